#pragma once
#include "../top.hpp"
