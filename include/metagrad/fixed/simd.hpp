#pragma once
// The host's vector registers, for the kernels written per vector (the matmul tile, the contiguous
// elementwise loop): internal as a whole, in detail/metagrad/detail/fixed/simd.hpp. This header
// forwards to it until the GEMM's detail header (detail/.../fixed/gemm.hpp) includes it from there.
#include "metagrad/detail/fixed/simd.hpp"
