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
//   auto g = L.grad(loss, w, b);                     // g.loss, g.grads[0] (d loss / d w), ...
//   auto h = L.cut(fixed::layernorm(x, w, b));       // as fixed::cut, for lowered models
//   L.bind(model, weights); L.grad(loss, model);     // a static model (fixed/model.hpp) whole
//
// L.grad differentiates the expression types with fixed::grad's own backward rules (fixed::Vjp,
// FnTraits), not the dynamic path's: each node of the loss gets its gradient as a Tensor, and each
// rule's expression -- built over leaves standing for the node's forward value, its children's and
// its incoming gradient -- is lowered in turn. So the rules are instantiated once per node type,
// over leaves (small types, like a cut's walk), and a static model's AOT training step
// (aot.hpp) is the type-level backward, lowered. L.cut(e) lowers e and returns a leaf that stands
// for it (the expressions above hold a pointer, as with fixed::cut, so a model read many times
// stays a small type); L.grad walks the loss, then each cut that received a gradient, newest first.
// A model written over a cut function (fixed::cut inline, L.cut lowered) serves both.
#include <array>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "metagrad/detail/cat.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/model.hpp"
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

  // A static model (fixed/model.hpp) as slices of one flat 1-D Tensor, its parameters in
  // fixed::for_each_param's order (an AOT library's weights array); its size must be the model's.
  template <fixed::ReflectedModel M>
  void bind(const M& model, const Tensor& flat) {
    std::int64_t at = 0, n = flat.shape().size() == 1 ? flat.shape()[0] : -1;
    fixed::for_each_param([&](const auto& t) { at += std::remove_cvref_t<decltype(t)>::size; }, model);
    if (at != n)
      throw std::invalid_argument(detail::cat("Lowering.bind: the model has ", at,
                                              " values, the flat tensor is ", to_string(flat.shape())));
    at = 0;
    fixed::for_each_param(
        [&](const auto& t) {
          using W = std::remove_cvref_t<decltype(t)>;
          constexpr auto dims = W::shape::dims;
          bind(t, flat.shrink({{at, at + W::size}}).reshape({dims.begin(), dims.end()}));
          at += W::size;
        },
        model);
  }

  // The expression as a Tensor. Equal subtrees of it lower to one Tensor; separate calls share
  // only leaves (a Tensor's requires_grad may change between them).
  template <fixed::Operand E>
  Tensor operator()(const E& e) {
    Tensor t = visit(e.expr());
    memo_.clear();
    return t;
  }

  // fixed::cut for lowered models: e lowered now, as a leaf of e's type and shape that the
  // expressions above read (its Tensor: `L(h)`); L.grad differentiates through it into e.
  template <fixed::Operand E>
  auto cut(const E& e) {
    using X = fixed::expr_t<E>;
    using T = typename X::value_type;
    const void* at = hold((*this)(e));
    if constexpr (std::is_floating_point_v<T>)
      cuts_.push_back(
          {at, [x = X(e.expr())](Lowering& L, const Tensor& g, Walk::Sinks& s) { L.backward(x, g, s); }});
    return placeholder<T, typename X::shape>(at);
  }

  // The loss and d loss / d each parameter (fixed::Tensors the loss reads; zeros where it does not),
  // as Tensors: fixed::grad's rules lowered (see above). The loss is lowered with them, once.
  struct Gradients {
    Tensor loss;
    std::vector<Tensor> grads;  // in the parameters' order
  };
  template <fixed::Operand L, class... P>
  Gradients grad(const L& loss, const P&... params) {
    using E = fixed::expr_t<L>;
    using T = typename E::value_type;
    static_assert(E::shape::size == 1, "Lowering::grad: the loss must be a single value (sum or mean it)");
    static_assert(std::is_floating_point_v<T>, "Lowering::grad: the loss must be floating-point");
    static_assert((std::is_same_v<typename P::value_type, T> && ...),
                  "Lowering::grad: parameters must be fixed::Tensors of the loss's element type");
    Walk::Sinks s;
    (s.wanted.insert(static_cast<const void*>(params.data())), ...);
    for (const auto& c : cuts_) s.wanted.insert(c.at);
    Tensor seed = Tensor::ones(E::shape::dims, {.device = device_, .dtype = dtype_of<T>});
    Tensor l = backward(loss.expr(), seed, s);
    for (auto c = cuts_.rbegin(); c != cuts_.rend(); ++c)  // newest first: a cut reads older ones only
      if (auto it = s.grads.find(c->at); it != s.grads.end()) c->back(*this, Tensor(it->second), s);
    Gradients out{l, {}};
    auto take = [&](const auto& p) {
      auto it = s.grads.find(p.data());
      out.grads.push_back(it != s.grads.end() ? it->second : Tensor::zeros_like(leaf(p)));
    };
    (take(params), ...);
    return out;
  }

  // d loss / d every parameter of a static model, in fixed::for_each_param's order.
  template <fixed::Operand L, fixed::ReflectedModel M>
  Gradients grad(const L& loss, const M& model) {
    return std::apply([&](const auto&... p) { return grad(loss, p...); }, fixed::parameters(model));
  }

 private:
  // The backward walk over one expression: its distinct subtrees as nodes, children before parents,
  // each with its value, its gradient so far, and its rule (null for leaves and for nodes no
  // wanted leaf is below).
  struct Walk {
    struct Node {
      Tensor value;
      std::optional<Tensor> grad;
      const void* leaf = nullptr;  // a leaf's data
      bool reaches = false;        // a wanted leaf is below (or is it)
      std::function<void(Lowering&, Walk&, const Tensor&)> back;
    };
    struct Sinks {  // what a walk's gradients go into: the wanted leaves' (parameters', cuts')
      std::unordered_set<const void*> wanted;
      std::unordered_map<const void*, Tensor> grads;
    };
    std::vector<Node> nodes;
    std::unordered_map<std::string, std::size_t> memo;
    const Sinks* sinks;
  };
  static void add(std::optional<Tensor>& to, const Tensor& g) { to = to ? *to + g : g; }

  // A fresh address standing for `t` in the expressions lowered after (a rule's operands).
  const void* hold(const Tensor& t) {
    const void* at = &slots_.emplace_back();
    leaves_.insert_or_assign(at, t);
    return at;
  }
  template <class T, class S>
  static auto placeholder(const void* at) {
    return fixed::Expr<fixed::op::Leaf<T, S>>(fixed::op::Leaf<T, S>{static_cast<const T*>(at)});
  }

  // Walks root from its gradient `seed`, adding what reaches a wanted leaf into s.grads; returns
  // root's value.
  template <class X>
  Tensor backward(const X& root, const Tensor& seed, typename Walk::Sinks& s) {
    Walk w;
    w.sinks = &s;
    const std::size_t top = record(w, root);
    w.nodes[top].grad = seed;
    for (std::size_t i = top + 1; i-- > 0;) {
      typename Walk::Node& n = w.nodes[i];
      if (!n.grad || !n.reaches) continue;
      if (n.leaf) {
        auto it = s.grads.find(n.leaf);
        if (it == s.grads.end())
          s.grads.emplace(n.leaf, *n.grad);
        else
          it->second = it->second + *n.grad;
      } else {
        Tensor g = *n.grad;
        n.back(*this, w, g);
      }
    }
    return w.nodes[top].value;
  }

  // x's node (equal subtrees: one node, as visit's memo), its children recorded first.
  template <class X>
  std::size_t record(Walk& w, const X& x) {
    return record(w, x, std::make_index_sequence<boost::mp11::mp_size<typename X::children_types>::value>{});
  }
  template <class X, std::size_t... I>
  std::size_t record(Walk& w, const X& x, std::index_sequence<I...>) {
    const std::array<std::size_t, sizeof...(I)> kids{record(w, fixed::child<I>(x))...};
    std::string key = bytes(&node_tag<X>) + payload(x.op);
    for (std::size_t k : kids) key.append(reinterpret_cast<const char*>(&k), sizeof k);
    if (auto it = w.memo.find(key); it != w.memo.end()) return it->second;
    using V = typename X::value_type;
    Tensor t = make(x.op, w.nodes[kids[I]].value...);
    typename Walk::Node n{
        t.dtype() == dtype_of<V> ? t : t.cast(dtype_of<V>), std::nullopt, nullptr, false, {}};
    if constexpr (std::is_floating_point_v<V>) {
      if constexpr (sizeof...(I) == 0) {
        if constexpr (std::is_base_of_v<fixed::op::Leaf<V, typename X::shape>, typename X::op_type>) {
          n.leaf = x.op.data;
          n.reaches = w.sinks->wanted.count(n.leaf) > 0;
        }
      } else {
        n.reaches = (w.nodes[kids[I]].reaches || ...);
        if (n.reaches)
          n.back = [&x, kids, self = w.nodes.size()](Lowering& L, Walk& w, const Tensor& g) {
            L.rule(w, x, self, kids, g, std::index_sequence<I...>{});
          };
      }
    }
    w.nodes.push_back(std::move(n));
    return w.memo.emplace(std::move(key), w.nodes.size() - 1).first->second;
  }

  // A node as the backward rules see it (fixed::Vjp's node protocol): its forward value, its
  // children's and its op, each value a leaf standing for its lowered Tensor.
  template <class E>
  struct Ref {
    const E& e;
    const void* out_at;
    std::array<const void*, boost::mp11::mp_size<typename E::children_types>::value> x_at;
    template <std::size_t I>
    using child_t = boost::mp11::mp_at_c<typename E::children_types, I>;
    const auto& op() const { return e.op; }
    auto out() const { return placeholder<typename E::value_type, typename E::shape>(out_at); }
    template <std::size_t I>
    auto x() const {
      return placeholder<typename child_t<I>::value_type, typename child_t<I>::shape>(x_at[I]);
    }
  };

  // Node x's rule: each child below a wanted leaf gets Vjp<op>::grad<I> of x's gradient, lowered.
  template <class X, std::size_t N, std::size_t... I>
  void rule(Walk& w, const X& x, std::size_t self, const std::array<std::size_t, N>& kids, const Tensor& g,
            std::index_sequence<I...>) {
    const Ref<X> n{x, hold(w.nodes[self].value), {hold(w.nodes[kids[I]].value)...}};
    const void* g_at = hold(g);
    (child_rule<I>(w, n, g_at, kids[I]), ...);
  }
  template <std::size_t K, class X>
  void child_rule(Walk& w, const Ref<X>& n, const void* g_at, std::size_t kid) {
    using C = typename Ref<X>::template child_t<K>;
    if constexpr (std::is_floating_point_v<typename C::value_type>) {
      const auto g = placeholder<typename X::value_type, typename X::shape>(g_at);
      using G = decltype(fixed::Vjp<typename X::op_type>::template grad<K>(n, g));
      if constexpr (!std::is_same_v<G, fixed::none>)
        if (w.nodes[kid].reaches)
          add(w.nodes[kid].grad, (*this)(fixed::Vjp<typename X::op_type>::template grad<K>(n, g)));
    }
  }

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
  Tensor make(const fixed::op::Cut<T, S>& op) {
    static_assert(sizeof(T) == 0,
                  "metagrad::lower: fixed::cut evaluated this value already, so its expression cannot be "
                  "lowered: cut the model with Lowering::cut when lowering it (a model written over a cut "
                  "function serves both)");
    return make(static_cast<const fixed::op::Leaf<T, S>&>(op));
  }
  template <class T, class S>
  Tensor make(const fixed::op::Const<T, S>& op) {
    return Tensor::full(S::dims, static_cast<double>(op.value), {.device = device_, .dtype = dtype_of<T>});
  }
  template <class U>
  Tensor make(const fixed::op::Cast<U>&, const Tensor& x) {
    return x.cast(dtype_of<U>);
  }
  Tensor make(const fixed::op::Detach&, const Tensor& x) { return x.detach(); }
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

  struct Cut {
    const void* at;  // the leaf that stands for the cut
    std::function<void(Lowering&, const Tensor&, typename Walk::Sinks&)> back;
  };

  std::string device_;
  std::deque<char> slots_;  // addresses that stand for Tensors (never moved)
  std::vector<Cut> cuts_;
  std::unordered_map<const void*, Tensor> leaves_;
  std::unordered_map<std::string, Tensor> memo_;  // by structure; node-based, so references stay valid
};

// One expression as a Tensor graph on `device` ("" is Device::DEFAULT), its leaves copied there.
template <fixed::Operand E>
Tensor lower(const E& e, const std::string& device = "") {
  return Lowering(device)(e);
}

}  // namespace metagrad
