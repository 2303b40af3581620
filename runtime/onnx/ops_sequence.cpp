// Sequences of tensors inside a graph: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
// SequenceErase, SequenceLength, ConcatFromSequence, SplitToSequence. (A graph's own inputs and
// outputs are tensors: Model's call takes and returns Tensors.)
#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

// A position in a sequence of n (n itself where appending is allowed); negative counts from the end.
std::size_t position(Args& a, std::size_t k, std::size_t n, bool append) {
  std::int64_t p = a.h(k).int_at(0), size = static_cast<std::int64_t>(n);
  if (p < 0) p += size;
  if (p < 0 || p > size || (p == size && !append))
    throw Error("position " + std::to_string(a.h(k).int_at(0)) + " is out of range for a sequence of " +
                std::to_string(n));
  return static_cast<std::size_t>(p);
}

}  // namespace

void add_sequence_ops(OpTable& t) {
  t["SequenceEmpty"] = [](const NodeInfo&) -> Run {
    return [](Args&) -> std::vector<Value> { return {Value::sequence({})}; };
  };
  t["SequenceConstruct"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      std::vector<Value> items;
      for (std::size_t k = 0; k < a.size(); ++k) items.push_back(*a.in[k]);
      return {Value::sequence(std::move(items))};
    };
  };
  t["SequenceInsert"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      std::vector<Value> items = a.seq(0);
      std::size_t at = a.has(2) ? position(a, 2, items.size(), true) : items.size();
      items.insert(items.begin() + static_cast<std::ptrdiff_t>(at), *a.in[1]);
      return {Value::sequence(std::move(items))};
    };
  };
  t["SequenceErase"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      std::vector<Value> items = a.seq(0);
      if (items.empty()) throw Error("SequenceErase: the sequence is empty");
      std::size_t at = a.has(1) ? position(a, 1, items.size(), false) : items.size() - 1;
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
      return {Value::sequence(std::move(items))};
    };
  };
  t["SequenceAt"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      const auto& items = a.seq(0);
      return {items[position(a, 1, items.size(), false)]};
    };
  };
  t["SequenceLength"] = [](const NodeInfo&) -> Run {
    return [](Args& a) -> std::vector<Value> {
      return {Host::scalar(static_cast<double>(a.seq(0).size()), dtypes::int64)};
    };
  };
  t["ConcatFromSequence"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    bool new_axis = n.i("new_axis", 0);
    return [axis, new_axis](Args& a) -> std::vector<Value> {
      std::vector<Tensor> items;
      for (const auto& v : a.seq(0)) {
        if (!v.t && !v.h)
          throw Error("ConcatFromSequence: the sequence holds strings or sequences, not numbers");
        items.push_back(v.t ? *v.t : v.h->tensor());
      }
      if (items.empty()) throw Error("ConcatFromSequence: the sequence is empty");
      std::int64_t ax = norm_axis(axis, items[0].ndim() + (new_axis ? 1 : 0), "axis");
      if (new_axis) return {Tensor::stack(items, ax)};
      return {items[0].cat(std::vector<Tensor>(items.begin() + 1, items.end()), ax)};
    };
  };
  t["SplitToSequence"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", 0);
    bool keepdims = n.i("keepdims", 1);
    return [axis, keepdims](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      std::int64_t ax = norm_axis(axis, x.ndim(), "axis");
      std::vector<Tensor> parts;
      if (!a.has(1)) {
        parts = x.split(1, ax);
        if (!keepdims)
          for (auto& p : parts) p = p.squeeze(ax);
      } else if (a.h(1).shape.empty()) {
        parts = x.split(a.h(1).int_at(0), ax);
      } else {
        parts = x.split(a.ints(1), ax);
      }
      std::vector<Value> items(parts.begin(), parts.end());
      return {Value::sequence(std::move(items))};
    };
  };
}

}  // namespace metagrad::onnx::detail
