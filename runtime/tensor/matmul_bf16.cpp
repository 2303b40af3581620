// bf16 products through the low-precision GEMM: the kernels the compiled devices generate widen bf16
// to f32 element by element; cpu::gemm_bf16 multiplies pairs of bf16 in one instruction.
#include "matmul_bf16.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../gemm/gemv.hpp"
#include "../lazy/replayable_fill.hpp"
#include "metagrad/cpu/gemm_lowp.hpp"
#include "metagrad/cpu/narrow.hpp"
#include "metagrad/device/raw_buffer.hpp"

namespace metagrad {

namespace {
bool host_device(const std::string& d) {
  std::string c = Device::canonicalize(d.empty() ? Device::DEFAULT : d);
  return c == "CPU" || c == "CLANG" || c == "LLVM";
}
template <class T>
T* host(RawBuffer* b) {
  return static_cast<T*>(dynamic_cast<RawMallocBuffer&>(*b).data());
}

// x's shape with n last.
std::vector<std::int64_t> out_shape(const Tensor& x, std::int64_t n) {
  std::vector<std::int64_t> s(x.shape().begin(), x.shape().end());
  s.back() = n;
  return s;
}

}  // namespace

std::optional<Tensor> matmul_bf16(const Tensor& x, const Tensor& w, const char* op) {
  auto grad = [](const Tensor& t) { return t.requires_grad.get().value_or(false); };
  if (x.dtype(op) != dtypes::bfloat16 || w.dtype(op) != dtypes::bfloat16 || x.ndim() < 1 || w.ndim() != 2 ||
      x.shape().back() != w.shape()[0] || x.device() != w.device() || !host_device(x.device()) ||
      (!Tensor::no_grad && (grad(x) || grad(w))))
    return std::nullopt;
  std::int64_t k = w.shape()[0], n = w.shape()[1];
  Tensor a = x.detach().reshape({-1, k});
  std::int64_t m = a.shape()[0];
  // A weight stored (n, k), as Linear's is, is multiplied as it lies: C^T = W A^T (A^T is A for one
  // row), so no copy of the weight is made per product.
  Tensor wt = w.detach().transpose();
  bool transposed = wt.lazydata.get()->st.contiguous() && !w.lazydata.get()->st.contiguous();
  if (transposed && m <= 4) {
    auto arg = std::make_shared<const CustomArg>(
        CustomArg{ReplayableFill{[m, n, k](RawBuffer& o, const std::vector<RawBuffer*>& in) {
          std::vector<float> xf(static_cast<std::size_t>(m * k)), y(static_cast<std::size_t>(m * n));
          cpu::bf16_to_f32(host<const std::uint16_t>(in[0]), xf.data(), m * k);
          // W read in place, m small: the GEMM would pack W for 1-4 rows of work (gemm_bf16's tile is
          // 14 x 32, so A W^T or W A^T wastes most of its products).
          gemm::gemv_bf16(m, n, k, xf.data(), host<const std::uint16_t>(in[1]), y.data());
          cpu::f32_to_bf16(y.data(), host<std::uint16_t>(&o), m * n);
        }}});
    Tensor c(
        LazyBuffer::loadop(LoadOps::CUSTOM, {m, n}, dtypes::bfloat16, x.device(), arg,
                           {a.contiguous().lazydata.get()->contiguous(), wt.lazydata.get()->contiguous()}),
        false);
    return c.reshape(out_shape(x, n));
  }
  Tensor lhs = transposed ? wt : a.contiguous(),
         rhs = transposed ? a.transpose().contiguous() : w.detach().contiguous();
  std::int64_t rows = transposed ? n : m, cols = transposed ? m : n;
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[rows, cols, k](RawBuffer& o, const std::vector<RawBuffer*>& in) {
        std::vector<float> c(static_cast<std::size_t>(rows * cols));
        cpu::gemm_bf16(rows, cols, k, host<const std::uint16_t>(in[0]), k, host<const std::uint16_t>(in[1]),
                       cols, c.data(), cols);
        cpu::f32_to_bf16(c.data(), host<std::uint16_t>(&o), rows * cols);
      }}});
  Tensor c(LazyBuffer::loadop(LoadOps::CUSTOM, {rows, cols}, dtypes::bfloat16, x.device(), arg,
                              {lhs.lazydata.get()->contiguous(), rhs.lazydata.get()->contiguous()}),
           false);
  if (transposed) c = c.transpose();
  return c.reshape(out_shape(x, n));
}

}  // namespace metagrad
