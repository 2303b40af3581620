#pragma once
// allreduce and broadcast of Tensors across the ranks of the group (comm.hpp). Each replaces the
// tensor's data in place, as Tensor::assign does: every copy of the handle sees the result, and the
// graphs that read the old value keep it. A tensor is realized first; its data goes to MPI straight
// from device memory where that memory is host memory (CPU, CLANG, LLVM), through one host copy
// each way where it is not (OPENCL). Shapes and dtypes are compared across ranks before data moves
// (dist::check_same): a mismatch throws dist::Error naming both on every rank.
//
//   dist::allreduce(loss_sum);                          // every rank now holds the sum
//   dist::allreduce(grads, dist::ReduceOp::MEAN);       // several tensors, one fused buffer
//   dist::broadcast(nn::get_parameters(model));         // rank 0's weights everywhere
//
// Not inside a TinyJit step (the JIT replays kernels, and a collective is not one): see
// DataParallel (data_parallel.hpp) for a jitted step.
#include <vector>

#include "metagrad/dist/comm.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::dist {

// The description ranks compare: "(3, 4) float32".
std::string describe(const Dims& shape, DType dtype);

void allreduce(Tensor& t, ReduceOp op = ReduceOp::SUM);
// Several tensors of one dtype in one fused host buffer and one collective.
void allreduce(const std::vector<Tensor>& ts, ReduceOp op = ReduceOp::SUM);
void broadcast(Tensor& t, int root = 0);
void broadcast(const std::vector<Tensor>& ts, int root = 0);

}  // namespace metagrad::dist
