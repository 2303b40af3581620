#pragma once
#include "b.hpp"
