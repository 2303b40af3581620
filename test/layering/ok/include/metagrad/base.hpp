#pragma once
#include "metagrad/detail/util.hpp"
