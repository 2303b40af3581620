// bf16 products through the low-precision GEMM: the kernels the compiled devices generate widen bf16
// to f32 element by element; cpu::gemm_bf16 multiplies pairs of bf16 in one instruction.
#include "matmul_bf16.hpp"

#include <cstdint>
#include <vector>

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
}  // namespace

std::optional<Tensor> matmul_bf16(const Tensor& x, const Tensor& w) {
  auto grad = [](const Tensor& t) { return t.requires_grad.get().value_or(false); };
  if (x.dtype() != dtypes::bfloat16 || w.dtype() != dtypes::bfloat16 || x.ndim() < 1 || w.ndim() != 2 ||
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
  Dims out = x.shape();
  out.back() = n;
  return c.reshape(std::vector<std::int64_t>(out.begin(), out.end()));
}

}  // namespace metagrad
