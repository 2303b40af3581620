#pragma once
// The matmul kernel of both paths and of AOT libraries: C = A B for strided A (m x k) and B (k x n),
// row-major C, blocked as GotoBLAS and BLIS do. Panels of B (KC x NR strips) and A (MC x KC, MR-row strips)
// are packed into arena memory (A is read in place where its rows are contiguous); a register tile of MR rows
// x NV vectors (detail/.../simd.hpp) accumulates with FMA. The static path instantiates it for the ISA it is
// compiled for; the runtime library compiles it once per ISA (generic, AVX2, AVX-512) and picks one by CPUID
// (runtime/gemm/). Its rules (blocking, steps, B in place, the split over threads), its loops and tiles
// and its blocked driver are C in detail/metagrad/detail/cpu/gemm_plan.h, gemm_kernel.h and gemm_driver.h,
// which AOT libraries carry (runtime/aot/aot_gemm.cpp; docs/gemm.md).
#include "metagrad/detail/cpu/gemm.hpp"
