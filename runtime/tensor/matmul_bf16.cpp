// bf16 and f16 products through the low-precision GEMMs: the kernels the compiled devices generate
// widen each element to f32 and sum in the narrow type; cpu::gemm_bf16 (vdpbf16ps) and
// cpu::gemm_f16 sum in f32 and round once. An autograd op, so that bf16 training runs its
// backward's two products (dA = G B^T, dB = A^T G) through the same GEMM.
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

LazyBufferPtr transposed(const LazyBufferPtr& x) { return x->movement_op(MovementOps::PERMUTE, Dims{1, 0}); }

// C (rows x cols, narrow) = A B, f32 sums rounded once, on realized contiguous buffers.
void narrow_gemm(bool bf16, std::int64_t rows, std::int64_t cols, std::int64_t k, RawBuffer& o,
                 const std::vector<RawBuffer*>& in) {
  std::vector<float> c(static_cast<std::size_t>(rows * cols));
  const auto *a = host<const std::uint16_t>(in[0]), *b = host<const std::uint16_t>(in[1]);
  if (bf16)
    cpu::gemm_bf16(rows, cols, k, a, k, b, cols, c.data(), cols);
  else
    cpu::gemm_f16(rows, cols, k, a, k, b, cols, c.data(), cols);
  (bf16 ? cpu::f32_to_bf16 : cpu::f32_to_f16)(c.data(), host<std::uint16_t>(&o), rows * cols);
}

// a (m, k) @ b (k, n), both bf16 or both f16 on a host device: (m, n) of their dtype.
LazyBufferPtr product(const LazyBufferPtr& a, const LazyBufferPtr& b) {
  const DType t = a->dtype;
  const bool bf16 = t == dtypes::bfloat16;
  std::int64_t m = a->shape()[0], k = a->shape()[1], n = b->shape()[1];
  // A weight stored (n, k), as Linear's is, is multiplied as it lies: C^T = W A^T (A^T is A for one
  // row), so no copy of the weight is made per product.
  LazyBufferPtr bt = transposed(b);
  const bool as_lies = bt->st.contiguous() && !b->st.contiguous();
  if (bf16 && as_lies && m <= 4) {
    auto arg = std::make_shared<const CustomArg>(
        CustomArg{ReplayableFill{[m, n, k](RawBuffer& o, const std::vector<RawBuffer*>& in) {
          std::vector<float> xf(static_cast<std::size_t>(m * k)), y(static_cast<std::size_t>(m * n));
          cpu::bf16_to_f32(host<const std::uint16_t>(in[0]), xf.data(), m * k);
          // W read in place, m small: the GEMM would pack W for 1-4 rows of work (gemm_bf16's tile is
          // 14 x 32, so A W^T or W A^T wastes most of its products).
          gemm::gemv_bf16(m, n, k, xf.data(), host<const std::uint16_t>(in[1]), y.data());
          cpu::f32_to_bf16(y.data(), host<std::uint16_t>(&o), m * n);
        }}});
    return LazyBuffer::loadop(LoadOps::CUSTOM, {m, n}, t, a->device, arg,
                              {a->contiguous(), bt->contiguous()});
  }
  LazyBufferPtr lhs = as_lies ? bt : a->contiguous(),
                rhs = as_lies ? transposed(a)->contiguous() : b->contiguous();
  std::int64_t rows = as_lies ? n : m, cols = as_lies ? m : n;
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[bf16, rows, cols, k](RawBuffer& o, const std::vector<RawBuffer*>& in) {
        narrow_gemm(bf16, rows, cols, k, o, in);
      }}});
  LazyBufferPtr c = LazyBuffer::loadop(LoadOps::CUSTOM, {rows, cols}, t, a->device, arg,
                                       {lhs->contiguous(), rhs->contiguous()});
  return as_lies ? transposed(c) : c;
}

// The autograd op: gradients of the narrow type, each product through the same GEMM.
struct NarrowMatmul final : FunctionImpl<NarrowMatmul, 2> {
  LazyBufferPtr a, b;
  LazyBufferPtr forward(const LazyBufferPtr& a_, const LazyBufferPtr& b_) {
    a = a_, b = b_;
    return product(a, b);
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g_) override {
    LazyBufferPtr g = g_->cast(a->dtype);
    return {needs_input_grad[0] ? product(g, transposed(b)) : nullptr,
            needs_input_grad[1] ? product(transposed(a), g) : nullptr};
  }
};

}  // namespace

std::optional<Tensor> matmul_bf16(const Tensor& x, const Tensor& w, const char* op) {
  const DType t = x.dtype(op);
  if ((t != dtypes::bfloat16 && t != dtypes::float16) || w.dtype(op) != t || x.ndim() < 1 || w.ndim() != 2 ||
      x.shape().back() != w.shape()[0] || x.device() != w.device() || !host_device(x.device()))
    return std::nullopt;
  std::int64_t k = w.shape()[0], n = w.shape()[1];
  return NarrowMatmul::apply(x.reshape({-1, k}), w).reshape(out_shape(x, n));
}

}  // namespace metagrad
