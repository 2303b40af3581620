#pragma once
// Moved to detail/: eval.hpp and gemm.hpp include it from there once their owners switch over.
#include "metagrad/detail/fixed/arena.hpp"
