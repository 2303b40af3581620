#pragma once
#include "../../include/metagrad/top.hpp"
