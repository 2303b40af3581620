// Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, elementwise on
// float32 (uint8, int8 and int32 results; rounding half to even, saturating), and the integer and
// quantized products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) computed in float32 on
// the dequantized values (exact for the 8-bit ranges) through MatMul's and Conv's own entries.
#include <algorithm>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

// A per-axis parameter (scale, zero point) shaped to broadcast along `axis` of x; a scalar stays.
Tensor per_axis(const Tensor& p, const Tensor& x, std::int64_t axis) {
  if (p.ndim() == 0 || p.numel() == 1) return p.reshape({});
  std::vector<std::int64_t> s(static_cast<std::size_t>(x.ndim()), 1);
  s[static_cast<std::size_t>(norm_axis(axis, x.ndim(), "axis"))] = -1;
  return p.reshape(s);
}

Tensor saturate(const Tensor& v, DType to) {
  return v.clip(dtypes::min_value(to), dtypes::limit(to) - 1).cast(to);
}

constexpr std::size_t kNoScale = static_cast<std::size_t>(-1);  // an input position no node has

// Input x as float32, less its zero point, times its scale (either may be absent).
Tensor dequantize(Args& a, std::size_t x, std::size_t scale, std::size_t zp, std::int64_t axis) {
  const Tensor& v = a.t(x);
  Tensor f = v.cast(dtypes::float32);
  if (zp < a.size() && a.has(zp)) f = f - per_axis(a.t(zp), v, axis).cast(dtypes::float32);
  return scale < a.size() && a.has(scale) ? f * per_axis(a.t(scale), v, axis) : f;
}

// Runs another entry (MatMul, Conv) of the same node on float inputs.
Tensor call(const Run& run, std::vector<Tensor> in, std::size_t n_out = 1) {
  std::vector<Value> vals(in.begin(), in.end());
  Args b;
  b.n_out = n_out;
  for (auto& v : vals) b.in.push_back(&v);
  return *run(b)[0].t;
}

}  // namespace

void add_quantize_ops(OpTable& t) {
  Prepare matmul = t.at("MatMul"), conv = t.at("Conv");
  t["MatMulInteger"] = [matmul](const NodeInfo& n) -> Run {
    Run mm = matmul(n);
    return [mm](Args& a) -> std::vector<Value> {
      Tensor A = dequantize(a, 0, kNoScale, 2, -1), B = dequantize(a, 1, kNoScale, 3, -1);
      return {call(mm, {A, B}).round().cast(dtypes::int32)};
    };
  };
  t["ConvInteger"] = [conv](const NodeInfo& n) -> Run {
    Run cv = conv(n);
    return [cv](Args& a) -> std::vector<Value> {
      Tensor x = dequantize(a, 0, kNoScale, 2, 1), w = dequantize(a, 1, kNoScale, 3, 0);
      return {call(cv, {x, w}).round().cast(dtypes::int32)};
    };
  };
  t["QLinearMatMul"] = [matmul](const NodeInfo& n) -> Run {
    Run mm = matmul(n);
    return [mm](Args& a) -> std::vector<Value> {
      Tensor y = call(mm, {dequantize(a, 0, 1, 2, -1), dequantize(a, 3, 4, 5, -1)});
      return {saturate((y / a.t(6)).round() + a.t(7).cast(dtypes::float32), a.dtype(7))};
    };
  };
  t["QLinearConv"] = [conv](const NodeInfo& n) -> Run {
    Run cv = conv(n);
    return [cv](Args& a) -> std::vector<Value> {
      Tensor x = dequantize(a, 0, 1, 2, 1), w = dequantize(a, 3, 4, 5, 0);
      Tensor y = call(cv, {x, w});
      if (a.has(8)) {
        Tensor b = a.t(8).cast(dtypes::float32) * (a.t(1) * a.t(4));
        std::vector<std::int64_t> s(static_cast<std::size_t>(y.ndim() - 1), 1);
        s[0] = -1;
        y = y + b.reshape(s);
      }
      return {saturate((y / a.t(6)).round() + a.t(7).cast(dtypes::float32), a.dtype(7))};
    };
  };
  t["QuantizeLinear"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 1);
    return [axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      DType to = a.has(2) ? a.dtype(2) : dtypes::uint8;
      if (to != dtypes::uint8 && to != dtypes::int8)
        throw Error(std::string("a ") + to.name + " zero point (uint8 and int8 are supported)");
      Tensor q = (x.cast(dtypes::float32) / per_axis(a.t(1), x, axis)).round();
      if (a.has(2)) q = q + per_axis(a.t(2), x, axis).cast(dtypes::float32);
      return {saturate(q, to)};
    };
  };
  t["DequantizeLinear"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 1);
    return [axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Tensor v = x.cast(dtypes::float32);
      if (a.has(2)) v = v - per_axis(a.t(2), x, axis).cast(dtypes::float32);
      return {v * per_axis(a.t(1), x, axis)};
    };
  };
  t["DynamicQuantizeLinear"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      Tensor hi = x.max().maximum(0.0), lo = x.min().minimum(0.0);
      Tensor scale = (hi - lo) / 255.0;
      Tensor zp = saturate((-lo / scale).round(), dtypes::uint8);
      Tensor y = saturate((x / scale).round() + zp.cast(dtypes::float32), dtypes::uint8);
      return {y, scale, zp};
    };
  };
}

}  // namespace metagrad::onnx::detail
