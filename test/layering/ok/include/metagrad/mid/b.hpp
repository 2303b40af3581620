#pragma once
#include "../base.hpp"
