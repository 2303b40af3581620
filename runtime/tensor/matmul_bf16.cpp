// bf16 products through the low-precision GEMM: the kernels the compiled devices generate widen bf16
// to f32 element by element; cpu::gemm_bf16 multiplies pairs of bf16 in one instruction.
#include "matmul_bf16.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/cpu/gemm_lowp.hpp"
#include "metagrad/cpu/narrow.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
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

// y (m x n, f32) = x (m x k, f32) W^T for W (n x k) bf16 rows, m small (decoding): dot products that
// read each weight once. The GEMM would pack W for 1-4 rows of work (gemm_bf16's tile is 14 x 32,
// so A W^T or W A^T wastes most of its products). 16 independent sums vectorise without reassociation.
// One copy per ISA, chosen by gemm::isa() (runtime/gemm/gemv.cpp says why not target_clones).
#define METAGRAD_GEMV_ROWS_PARAMS                                                                           \
  std::int64_t m, std::int64_t k, const float *x, const std::uint16_t *w, std::int64_t j0, std::int64_t j1, \
      float *y, std::int64_t n
[[gnu::always_inline]] inline void gemv_rows_body(METAGRAD_GEMV_ROWS_PARAMS) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::uint16_t* r = w + j * k;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* a = x + i * k;
      float acc[16] = {};
      std::int64_t p = 0;
      for (; p + 16 <= k; p += 16)
        for (int l = 0; l < 16; ++l)
          acc[l] += a[p + l] * std::bit_cast<float>(static_cast<std::uint32_t>(r[p + l]) << 16);
      float s = 0;
      for (; p < k; ++p) s += a[p] * std::bit_cast<float>(static_cast<std::uint32_t>(r[p]) << 16);
      for (float v : acc) s += v;
      y[i * n + j] = s;
    }
  }
}
// (in the ISA namespaces test/isa_isolation.cmake looks for)
namespace avx512 {
[[gnu::target("avx512f")]] void gemv_rows(METAGRAD_GEMV_ROWS_PARAMS) {
  gemv_rows_body(m, k, x, w, j0, j1, y, n);
}
}  // namespace avx512
namespace avx {
[[gnu::target("avx2")]] void gemv_rows(METAGRAD_GEMV_ROWS_PARAMS) {
  gemv_rows_body(m, k, x, w, j0, j1, y, n);
}
}  // namespace avx
#undef METAGRAD_GEMV_ROWS_PARAMS
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
          const auto* w = host<const std::uint16_t>(in[1]);
          auto gemv_rows = gemm::isa() == gemm::Isa::avx512 ? &avx512::gemv_rows
                           : gemm::isa() == gemm::Isa::avx2 ? &avx::gemv_rows
                                                            : &gemv_rows_body;
          cpu::parallel_for(
              n, 16, std::max<std::int64_t>(16, (1 << 16) / k),
              [&](std::int64_t j0, std::int64_t j1) { gemv_rows(m, k, xf.data(), w, j0, j1, y.data(), n); });
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
