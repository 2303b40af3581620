// Control flow: If, Loop and Scan run their subgraphs (checked at load like the model's graph) in a
// scope that sees the node's own. The condition and the trip count are read on the host; the loops
// unroll into the lazy graph, one iteration after another.
#include <algorithm>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

// A value as a Tensor or as a host number, outside a node's Args.
Tensor tensor_of(Value v) {
  Args a;
  a.in = {&v};
  return a.t(0);
}
double scalar_of(Value v) {
  Args a;
  a.in = {&v};
  return a.scalar(0);
}

// Slice k along axis, the axis removed.
Tensor slice_at(const Tensor& x, std::int64_t axis, std::int64_t k) {
  std::vector<Index> idx(static_cast<std::size_t>(axis), Slice{});
  idx.push_back(k);
  return x[idx];
}

}  // namespace

void add_control_ops(OpTable& t) {
  t["If"] = [](const NodeInfo& n) -> Run {
    auto yes = n.graph("then_branch"), no = n.graph("else_branch");
    return [yes, no](Args& a) -> std::vector<Value> {
      return run_graph(a.scalar(0) != 0 ? *yes : *no, {}, *a.env);
    };
  };
  t["Loop"] = [](const NodeInfo& n) -> Run {
    auto body = n.graph("body");
    return [body](Args& a) -> std::vector<Value> {
      std::optional<std::int64_t> trips;
      if (a.has(0)) trips = a.h(0).int_at(0);
      bool cond = !a.has(1) || a.scalar(1) != 0;
      std::vector<Value> carried;
      for (std::size_t k = 2; k < a.size(); ++k) carried.push_back(*a.in[k]);
      std::vector<std::vector<Tensor>> scans;
      for (std::int64_t i = 0; (!trips || i < *trips) && cond; ++i) {
        std::vector<Value> in{Host::scalar(static_cast<double>(i), dtypes::int64),
                              Host::scalar(cond, dtypes::bool_)};
        in.insert(in.end(), carried.begin(), carried.end());
        std::vector<Value> out = run_graph(*body, in, *a.env);
        if (out.size() < 1 + carried.size()) throw Error("Loop: the body returns too few outputs");
        cond = scalar_of(out[0]) != 0;
        std::copy(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(carried.size()),
                  carried.begin());
        scans.resize(out.size() - 1 - carried.size());
        for (std::size_t k = 0; k < scans.size(); ++k)
          scans[k].push_back(tensor_of(out[1 + carried.size() + k]));
      }
      std::vector<Value> result = carried;
      for (std::size_t k = carried.size(); k < a.n_out; ++k) {
        std::size_t s = k - carried.size();
        if (s >= scans.size() || scans[s].empty()) throw Error("Loop: a scan output of no iteration");
        result.push_back(Tensor::stack(scans[s], 0));
      }
      return result;
    };
  };
  t["Scan"] = [](const NodeInfo& n) -> Run {
    if (n.opset() < 9) n.unsupported("Scan before opset 9 (its batch axis and sequence_lens)");
    auto body = n.graph("body");
    std::int64_t m = n.i("num_scan_inputs", 0);
    I64s in_axes = n.ints("scan_input_axes"), in_dirs = n.ints("scan_input_directions"),
         out_axes = n.ints("scan_output_axes"), out_dirs = n.ints("scan_output_directions");
    return [=](Args& a) -> std::vector<Value> {
      std::size_t states = a.size() - static_cast<std::size_t>(m);
      std::vector<Value> carried;
      for (std::size_t k = 0; k < states; ++k) carried.push_back(*a.in[k]);
      std::vector<Tensor> xs;
      std::vector<std::int64_t> axes, dirs;
      for (std::size_t j = 0; j < static_cast<std::size_t>(m); ++j) {
        xs.push_back(a.t(states + j));
        axes.push_back(norm_axis(j < in_axes.size() ? in_axes[j] : 0, xs.back().ndim(), "scan_input_axes"));
        dirs.push_back(j < in_dirs.size() ? in_dirs[j] : 0);
      }
      std::int64_t len = xs.empty() ? 0 : xs[0].shape()[static_cast<std::size_t>(axes[0])];
      std::vector<std::vector<Tensor>> scans;
      for (std::int64_t i = 0; i < len; ++i) {
        std::vector<Value> in = carried;
        for (std::size_t j = 0; j < xs.size(); ++j)
          in.push_back(slice_at(xs[j], axes[j], dirs[j] ? len - 1 - i : i));
        std::vector<Value> out = run_graph(*body, in, *a.env);
        std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(states), carried.begin());
        scans.resize(out.size() - states);
        for (std::size_t k = 0; k < scans.size(); ++k) scans[k].push_back(tensor_of(out[states + k]));
      }
      std::vector<Value> result = carried;
      for (std::size_t k = 0; k < scans.size(); ++k) {
        if (k < out_dirs.size() && out_dirs[k]) std::reverse(scans[k].begin(), scans[k].end());
        std::int64_t ax = k < out_axes.size() ? out_axes[k] : 0;
        result.push_back(Tensor::stack(scans[k], norm_axis(ax, scans[k][0].ndim() + 1, "scan_output_axes")));
      }
      return result;
    };
  };
}

}  // namespace metagrad::onnx::detail
