#pragma once
#include "metagrad/base.hpp"
#include "t.hpp"
