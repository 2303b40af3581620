#pragma once
#include "metagrad/base.hpp"
