#pragma once
// A contraction (codegen/gemm.hpp) on the CUDA device: a tiled SGEMM kernel in CUDA C, rendered
// with the plan's sizes, strides and offsets as constants, between the ordinary kernels around it
// (the operand gathers and the epilogue, gemm_parts). A block of 256 threads computes a square
// tile of C, each thread a register tile of it, from 8-deep slices of A and B staged in shared
// memory; the next slice is read from global memory while the current one is multiplied.
#include <string>

#include "metagrad/backends/gemm_program.hpp"

namespace metagrad {

// How a product is launched: `tile` (32, 64 or 128) rows and columns of C per block of 256
// threads; where that leaves the GPU short of blocks, the depth K also in `split` parts of `depth`.
struct CudaSgemmShape {
  int tile = 64, split = 1;
  std::int64_t depth = 1;
};
// The largest tile that gives every multiprocessor a block; failing that 32-tiles and depth parts
// (each at least 128 deep) enough to give every multiprocessor a block.
CudaSgemmShape cuda_sgemm_shape(const codegen::GemmPlan& plan, int multiprocessors);
// CUDA C of a kernel `name`(c, a, b) computing C = A B for every batch index of `plan`
// (blockIdx.z: batch index x split + part). Split, each part writes its own M x N slab of c
// (a scratch buffer), which the kernel of cuda_sgemm_sum_source(c, part) adds into C.
std::string cuda_sgemm_source(const std::string& name, const codegen::GemmPlan& plan, CudaSgemmShape shape);
std::string cuda_sgemm_sum_source(const std::string& name, const codegen::GemmPlan& plan,
                                  CudaSgemmShape shape);
// Global and local size of the product's launch (threads; blocks of 256 along x).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> cuda_sgemm_launch(
    const codegen::GemmPlan& plan, CudaSgemmShape shape);
// Whether the tiles are worth it (C at least 32 x 32: a dot or matrix-vector product stays a
// reduce) and the launch fits CUDA's grid.
bool cuda_sgemm_fits(const codegen::GemmPlan& plan);

// The runner of a kernel that `plan` covers, on the CUDA device whose `compile` builds programs
// and `alloc` makes the scratch buffers (C before an epilogue, gathered operands) each program
// keeps. `lower` is the device's code generator, for the kernels around the product.
ASTRunner cuda_gemm_runner(const codegen::Kernel& k, const codegen::GemmPlan& plan, int multiprocessors,
                           const RunnerFn& lower, const GemmCompile& compile,
                           const Compiled::BufferFactory& alloc);

}  // namespace metagrad
