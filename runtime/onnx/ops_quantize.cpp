// Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, elementwise on
// float32 (uint8, int8 and int32 results; rounding half to even, saturating).
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

}  // namespace

void add_quantize_ops(OpTable& t) {
  t["QuantizeLinear"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 1);
    return [axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      DType to = a.has(2) ? a.dtype(2) : dtypes::uint8;
      if (to != dtypes::uint8 && to != dtypes::int8) throw Error(std::string("a ") + to.name + " zero point (uint8 and int8 are supported)");
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
