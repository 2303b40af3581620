// Reductions and what is built on them: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax (both opset
// semantics), CumSum, TopK, and the losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
#include <limits>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;
using Reduce = Tensor (*)(const Tensor&, const Axes&, bool);

// axes: the attribute before `input_from`, input 1 from it on; an empty list is every axis unless
// noop_with_empty_axes.
Prepare reduce(Reduce f, std::int64_t input_from) {
  return [f, input_from](const NodeInfo& n) -> Run {
    bool keep = n.i("keepdims", 1), noop = n.i("noop_with_empty_axes", 0),
         from_input = n.opset() >= input_from;
    I64s attr = n.ints("axes");
    return [=](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      I64s axes = from_input ? (a.has(1) ? a.ints(1) : I64s{}) : attr;
      if (axes.empty() && noop) return {x};
      Axes ax = axes.empty() ? Axes(AllAxes) : Axes(axes);
      Tensor r = f(x, ax, keep);
      return {r.dtype() == x.dtype() ? r : r.cast(x.dtype())};
    };
  };
}

// Softmax-like ops: before opset 13 the input is flattened to 2-D at `axis` (default 1).
Prepare softmax_like(Tensor (*f)(const Tensor&, std::int64_t)) {
  return [f](const NodeInfo& n) -> Run {
    bool old = n.opset() < 13;
    std::int64_t axis = n.i("axis", old ? 1 : -1);
    return [f, old, axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "axis");
      if (!old) return {f(x, ax)};
      std::int64_t outer = 1;
      for (std::int64_t k = 0; k < ax; ++k) outer *= x.shape()[static_cast<std::size_t>(k)];
      I64s s(x.shape().begin(), x.shape().end());
      return {f(x.reshape({outer, -1}), 1).reshape(s)};
    };
  };
}

Tensor hardmax(const Tensor& x, std::int64_t axis) {
  Tensor idx = x.argmax(axis, true);
  std::int64_t n = x.shape()[static_cast<std::size_t>(axis)];
  I64s s(static_cast<std::size_t>(x.ndim()), 1);
  s[static_cast<std::size_t>(axis)] = n;
  Tensor pos = Tensor::arange(static_cast<double>(n), {.dtype = dtypes::int64}).reshape(s);
  return (pos == idx).cast(x.dtype());
}

Prepare arg(bool max) {
  return [max](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    bool keep = n.i("keepdims", 1), last = n.i("select_last_index", 0);
    return [=](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "axis");
      if (last) x = x.flip(ax);
      Tensor r = max ? x.argmax(ax, keep) : x.argmin(ax, keep);
      if (last) r = (x.shape()[static_cast<std::size_t>(ax)] - 1) - r;
      return {r};
    };
  };
}

struct LossAttrs {
  std::string reduction;
  std::optional<std::int64_t> ignore;
};
LossAttrs loss_attrs(const NodeInfo& n) {
  LossAttrs l{n.s("reduction", "mean"), {}};
  if (l.reduction != "mean" && l.reduction != "sum" && l.reduction != "none")
    n.unsupported("reduction '" + l.reduction + "'");
  if (n.has("ignore_index")) l.ignore = n.i("ignore_index", -100);
  return l;
}
Tensor nll(const Tensor& logp, const Tensor& target, std::optional<Tensor> weight, const LossAttrs& l) {
  LossOptions o;
  o.weight = std::move(weight);
  o.reduction = l.reduction;
  o.ignore_index = l.ignore.value_or(std::numeric_limits<std::int64_t>::min());
  Tensor r = logp.nll_loss(target.cast(dtypes::int64), o);
  return r.dtype() == logp.dtype() ? r : r.cast(logp.dtype());
}

}  // namespace

void add_reduce_ops(OpTable& t) {
  t["ReduceSum"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.sum(a, k); }, 13);
  t["ReduceMean"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.mean(a, k); }, 18);
  t["ReduceMax"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.max(a, k); }, 18);
  t["ReduceMin"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.min(a, k); }, 18);
  t["ReduceProd"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.prod(a, k); }, 18);
  t["ReduceL1"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.abs().sum(a, k); }, 18);
  t["ReduceL2"] =
      reduce([](const Tensor& x, const Axes& a, bool k) { return x.square().sum(a, k).sqrt(); }, 18);
  t["ReduceSumSquare"] =
      reduce([](const Tensor& x, const Axes& a, bool k) { return x.square().sum(a, k); }, 18);
  t["ReduceLogSum"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.sum(a, k).log(); }, 18);
  t["ReduceLogSumExp"] = reduce([](const Tensor& x, const Axes& a, bool k) { return x.logsumexp(a, k); }, 18);
  t["ArgMax"] = arg(true);
  t["ArgMin"] = arg(false);
  t["Softmax"] = softmax_like([](const Tensor& x, std::int64_t ax) { return x.softmax(ax); });
  t["LogSoftmax"] = softmax_like([](const Tensor& x, std::int64_t ax) { return x.log_softmax(ax); });
  t["Hardmax"] = softmax_like(hardmax);
  t["CumSum"] = [](const NodeInfo& n) -> Run {
    bool exclusive = n.i("exclusive", 0), reverse = n.i("reverse", 0);
    return [=](Args& a) -> std::vector<Value> {
      Tensor x = a.t(0);
      std::int64_t ax = norm_axis(a.h(1).int_at(0), x.ndim(), "CumSum: axis");
      if (reverse) x = x.flip(ax);
      if (exclusive) {  // shift by one: a zero first, the last element dropped
        std::vector<std::pair<std::int64_t, std::int64_t>> p(static_cast<std::size_t>(x.ndim()), {0, 0}), s;
        p[static_cast<std::size_t>(ax)] = {1, 0};
        for (auto d : x.shape()) s.push_back({0, d});
        s[static_cast<std::size_t>(ax)].second -= 1;
        x = x.shrink(s).pad(p, 0.0);
      }
      Tensor r = x.cumsum(ax);
      if (r.dtype() != a.dtype(0)) r = r.cast(a.dtype(0));
      return {reverse ? r.flip(ax) : r};
    };
  };
  t["TopK"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", -1), k_attr = n.i("k", 0);
    bool largest = n.i("largest", 1), old = n.opset() < 10;
    if (!n.i("sorted", 1)) n.unsupported("sorted=0");
    return [=](Args& a) -> std::vector<Value> {
      std::int64_t k = old ? k_attr : a.h(1).int_at(0);
      auto [v, i] = a.t(0).topk(k, axis, largest);
      return {v, i};
    };
  };
  t["NegativeLogLikelihoodLoss"] = [](const NodeInfo& n) -> Run {
    LossAttrs l = loss_attrs(n);
    return [l](Args& a) -> std::vector<Value> {
      return {nll(a.t(0), a.t(1), a.has(2) ? std::optional<Tensor>(a.t(2)) : std::nullopt, l)};
    };
  };
  t["SoftmaxCrossEntropyLoss"] = [](const NodeInfo& n) -> Run {
    LossAttrs l = loss_attrs(n);
    return [l](Args& a) -> std::vector<Value> {
      Tensor logp = a.t(0).log_softmax(1);
      std::vector<Value> out{nll(logp, a.t(1), a.has(2) ? std::optional<Tensor>(a.t(2)) : std::nullopt, l)};
      if (a.n_out > 1) out.push_back(logp);
      return out;
    };
  };
}

}  // namespace metagrad::onnx::detail
