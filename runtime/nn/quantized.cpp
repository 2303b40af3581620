// Quantised weights on the dynamic path (nn/quantized.hpp): the blocks are a uint8 Tensor, and each
// product a CUSTOM load whose host function runs cpu::gemm_q on the realized buffers, so the weight
// is read as it lies (GEMV at decoding's few rows) and a TinyJit step replays it.
#include "metagrad/nn/quantized.hpp"

#include <stdexcept>
#include <vector>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/raw_buffer.hpp"

namespace metagrad::nn {

using metagrad::detail::cat;

namespace {
std::string str(std::int64_t x) { return std::to_string(x); }

// The host memory of a realized contiguous buffer, or a clear error naming the op and the device.
template <class T>
T* host(RawBuffer* b, const char* op) {
  auto* m = dynamic_cast<RawMallocBuffer*>(b);
  if (!m)
    throw std::invalid_argument(cat(op, ": quantised products run on host devices only (CPU, CLANG, LLVM)"));
  return static_cast<T*>(m->data());
}
}  // namespace

std::string quant_name(cpu::QuantType t) { return t == cpu::QuantType::q8_0 ? "q8_0" : "q4_0"; }

QuantizedTensor quantize(const Tensor& w, cpu::QuantType type) {
  std::string op = cat("quantize(", quant_name(type), ")");
  if (w.ndim() != 2 || w.shape()[1] % cpu::kQuantBlock != 0 || !dtypes::is_float(w.dtype()))
    throw std::invalid_argument(cat(op, ": the weight ", to_string(w),
                                    " must be a 2-D float matrix (rows, cols) ", "with cols a multiple of ",
                                    str(cpu::kQuantBlock)));
  std::int64_t rows = w.shape()[0], cols = w.shape()[1];
  auto row_bytes = static_cast<std::int64_t>(cpu::quant_row_bytes(type, cols));
  std::vector<float> x = w.detach().cast(dtypes::float32).to_vector<float>();
  std::vector<std::uint8_t> q(static_cast<std::size_t>(rows * row_bytes));
  cpu::quantize(type, rows, cols, x.data(), cols, q.data());
  Tensor blocks = Tensor(q, {rows, row_bytes}, {.device = w.device(), .dtype = dtypes::uint8}).realize();
  if (!dynamic_cast<RawMallocBuffer*>(blocks.lazydata.get()->realized.get()))
    throw std::invalid_argument(cat(op, ": the weight ", to_string(w), " is on ", w.device(),
                                    ", and quantised products run on host devices only (CPU, CLANG, LLVM)"));
  return {blocks, type, rows, cols};
}

Tensor QuantizedTensor::dequantize() const {
  std::vector<std::uint8_t> q = blocks.to_vector<std::uint8_t>();
  std::vector<float> y(static_cast<std::size_t>(rows * cols));
  cpu::dequantize(type, rows, cols, q.data(), y.data(), cols);
  return Tensor(y, {rows, cols}, {.device = device()});
}

Tensor linear(const Tensor& x, const QuantizedTensor& w, const std::optional<Tensor>& bias) {
  std::string op = cat("linear with a ", quant_name(w.type), " weight ", to_string(w.shape()));
  if (x.ndim() < 1 || x.shape().back() != w.cols)
    throw std::invalid_argument(
        cat(op, ": input ", to_string(x.shape()), " must end in ", str(w.cols), " features"));
  if (x.device() != w.device())
    throw std::invalid_argument(
        cat(op, ": input ", to_string(x), " is not on the weight's device ", w.device()));
  if (!Tensor::no_grad && x.requires_grad.get().value_or(false))
    throw std::invalid_argument(
        cat(op, ": input ", to_string(x), " requires grad, and no gradient flows through ",
            "a quantised product (inference only: use NoGradGuard or the float weight)"));
  std::int64_t k = w.cols, n = w.rows;
  Tensor a = x.detach().cast(dtypes::float32).reshape({-1, k}).contiguous();
  std::int64_t m = a.shape()[0];
  cpu::QuantType t = w.type;
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[m, n, k, t](RawBuffer& o, const std::vector<RawBuffer*>& in) {
        const char* name = "linear (quantised)";
        cpu::gemm_q(m, n, k, host<const float>(in[0], name), k, t, host<const void>(in[1], name),
                    host<float>(&o, name), n);
      }}});
  Tensor c(LazyBuffer::loadop(LoadOps::CUSTOM, {m, n}, dtypes::float32, x.device(), arg,
                              {a.lazydata.get()->contiguous(), w.blocks.lazydata.get()->contiguous()}),
           false);
  Dims out = x.shape();
  out.back() = n;
  c = c.reshape(std::vector<std::int64_t>(out.begin(), out.end()));
  return bias ? c + *bias : c;
}

}  // namespace metagrad::nn

namespace metagrad {
nn::QuantizedTensor Tensor::quantize(cpu::QuantType type) const { return nn::quantize(*this, type); }
}  // namespace metagrad
