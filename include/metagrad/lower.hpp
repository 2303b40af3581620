#pragma once
// metagrad::lower(expr): a static-path expression as the equivalent dynamic Tensor graph. Each op
// tag maps to the Tensor method (the mlop) it names, so the lowered graph is the LazyOp AST the
// dynamic path builds for the same computation, and every device, fusion and codegen pass serves
// static models; it is differentiable on the dynamic path too. The third evaluator over the
// expression types, beside inline evaluation (fixed/eval.hpp) and fixed::grad.
//
//   fixed::Tensor<float, 4, 8> a, b;
//   Tensor t = lower((a * b).sum<1>(), "CLANG");     // leaves copied to CLANG
//   Lowering L("CLANG"); Tensor x = L.leaf(a);       // one Tensor per leaf, shared by
//   Tensor y = L((a + b).relu()), z = L(a.exp());    // every expression lowered through L
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "metagrad/fixed.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

class Lowering {
 public:
  explicit Lowering(std::string device = "") : device_(std::move(device)) {}

  // The Tensor a fixed::Tensor's storage stands for in what this lowers: on first use, a copy of
  // its values on the device, realized (so it is a buffer of its own: an AOT generator's input).
  template <class T, fixed::index_t... D>
  const Tensor& leaf(const fixed::Tensor<T, D...>& t) {
    return leaf_of<T>(t.data(), fixed::Shape<D...>::dims);
  }
  // Makes `dyn` stand for `t` (same shape and dtype), e.g. a Tensor that requires grad.
  template <class T, fixed::index_t... D>
  void bind(const fixed::Tensor<T, D...>& t, const Tensor& dyn) {
    check_binding(dyn, fixed::Shape<D...>::dims, dtype_of<T>);
    leaves_.insert_or_assign(static_cast<const void*>(t.data()), dyn);
  }

  // The expression as a Tensor. Equal subtrees of it lower to one Tensor; separate calls share
  // only leaves (a Tensor's requires_grad may change between them).
  template <fixed::Operand E>
  Tensor operator()(const E& e) {
    Tensor t = visit(e.expr());
    memo_.clear();
    return t;
  }

 private:
  // Static expressions are trees holding repeated subexpressions by value (softmax reads its input
  // three times): equal subtrees -- same type, same leaves and constants -- lower to one Tensor, so
  // the dynamic graph is a DAG and each is computed once.
  template <class X>
  const Tensor& visit(const X& x) {
    return visit(x, std::make_index_sequence<boost::mp11::mp_size<typename X::children_types>::value>{});
  }
  template <class X, std::size_t... I>
  const Tensor& visit(const X& x, std::index_sequence<I...>) {
    const Tensor* kids[] = {&visit(fixed::child<I>(x))..., nullptr};
    std::string key = bytes(&node_tag<X>) + payload(x.op);
    for (std::size_t i = 0; i < sizeof...(I); ++i) key += bytes(kids[i]);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Tensor t = make(x.op, *kids[I]...);
    DType want = dtype_of<typename X::value_type>;
    return memo_.emplace(std::move(key), t.dtype() == want ? t : t.cast(want)).first->second;
  }
  template <class X>
  static constexpr char node_tag = 0;  // one address per node type
  template <class P>
  static std::string bytes(const P* p) {
    return std::string(reinterpret_cast<const char*>(&p), sizeof p);
  }
  template <class Op>
  static std::string payload(const Op& op) {  // a leaf's pointer, a constant's value
    if constexpr (std::is_empty_v<Op>)
      return {};
    else
      return std::string(reinterpret_cast<const char*>(&op), sizeof op);
  }

  static std::vector<std::int64_t> vec(const Dims& d) { return {d.begin(), d.end()}; }
  static std::vector<std::pair<std::int64_t, std::int64_t>> vec(const Pairs& p) {
    std::vector<std::pair<std::int64_t, std::int64_t>> v;
    for (const auto& [a, b] : p) v.emplace_back(a, b);
    return v;
  }
  static void check_binding(const Tensor& dyn, const Dims& dims, DType dt) {
    if (dyn.shape() != dims || dyn.dtype() != dt)
      throw std::invalid_argument(detail::cat("Lowering.bind: the fixed tensor is ", dt.name, to_string(dims),
                                              ", the Tensor ", dyn.dtype().name, to_string(dyn.shape())));
  }

  template <class T>
  const Tensor& leaf_of(const T* data, const Dims& dims) {
    auto it = leaves_.find(data);
    if (it == leaves_.end()) {
      Tensor t(std::vector<T>(data, data + prod(dims)), dims, {.device = device_});
      it = leaves_.emplace(static_cast<const void*>(data), t.realize()).first;
    }
    return it->second;
  }

  // One op on its lowered children: the dynamic path's method of the same meaning.
  template <class T, class S>
  Tensor make(const fixed::op::Leaf<T, S>& op) {
    return leaf_of<T>(op.data, S::dims);
  }
  template <class T, class S>
  Tensor make(const fixed::op::Const<T, S>& op) {
    return Tensor::full(S::dims, static_cast<double>(op.value), {.device = device_, .dtype = dtype_of<T>});
  }
  template <class U>
  Tensor make(const fixed::op::Cast<U>&, const Tensor& x) {
    return x.cast(dtype_of<U>);
  }
  Tensor make(const fixed::op::Gate& op, const Tensor& x) {  // off: x is never realized
    return op.on ? x : Tensor::zeros_like(x);
  }
  template <ReduceOps R, Dims Axes>
  Tensor make(const fixed::op::Reduce<R, Axes>&, const Tensor& x) {
    return R == ReduceOps::SUM ? x.sum(vec(Axes), true) : x.max(vec(Axes), true);
  }
  template <MovementOps M, auto Arg>
  Tensor make(const fixed::op::Move<M, Arg>&, const Tensor& x) {
    if constexpr (M == MovementOps::RESHAPE)
      return x.reshape(vec(Arg));
    else if constexpr (M == MovementOps::PERMUTE)
      return x.permute(vec(Arg));
    else if constexpr (M == MovementOps::EXPAND)
      return x.expand(vec(Arg));
    else if constexpr (M == MovementOps::PAD)
      return x.pad(vec(Arg));
    else if constexpr (M == MovementOps::SHRINK)
      return x.shrink(vec(Arg));
    else {  // STRIDE by +-1: a flip of the -1 axes
      std::vector<std::int64_t> axes;
      for (std::size_t i = 0; i < Arg.size(); ++i)
        if (Arg[i] < 0) axes.push_back(static_cast<std::int64_t>(i));
      return axes.empty() ? x : x.flip(axes);
    }
  }
  Tensor make(const fixed::op::MatMul&, const Tensor& a, const Tensor& b) { return a.matmul(b); }
  template <fixed::index_t Stride, fixed::index_t Padding>
  Tensor make(const fixed::op::Conv2d<Stride, Padding>&, const Tensor& x, const Tensor& w) {
    return x.conv2d(w, std::nullopt, 1, {Stride}, {1}, {Padding});
  }
  template <fixed::Fn F, class... K>
  Tensor make(const fixed::op::Map<F>&, const K&... k) {
    return fixed::FnTraits<F>::lower(k...);
  }
  template <class Op, class... K>
  void make(const Op&, const K&...) {
    static_assert(sizeof(Op) == 0,
                  "metagrad::lower: this static op has no lowering yet (add a make() to lower.hpp)");
  }

  std::string device_;
  std::unordered_map<const void*, Tensor> leaves_;
  std::unordered_map<std::string, Tensor> memo_;  // by structure; node-based, so references stay valid
};

// One expression as a Tensor graph on `device` ("" is Device::DEFAULT), its leaves copied there.
template <fixed::Operand E>
Tensor lower(const E& e, const std::string& device = "") {
  return Lowering(device)(e);
}

}  // namespace metagrad
