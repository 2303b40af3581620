#pragma once
// Static-path expression nodes. Every operation on a fixed::Tensor returns an Expr: structure only.
// Evaluators (inline loops in eval.hpp; lowering to LazyOp and AOT emission elsewhere) decide how.
//
// ---- The node protocol (what evaluators, fixed::grad and lower() rely on) ----
// Every node is `Expr<Op, Children...>`: an op tag plus 0 to 3 children, held by value. Compile time:
//   E::op_type         the op tag (below); its template arguments are the op's parameters
//   E::children_types  boost::mp11::mp_list<Children...>
//   E::arity           sizeof...(Children), 0 to 3
//   E::value_type      element type (comparisons give bool)
//   E::shape           fixed::Shape<D...>: ::dims (a constexpr metagrad::Dims), ::rank, ::size
// Run time:
//   e.op               the tag object: a leaf's data pointer or a constant's value, else empty
//   child<I>(e)        child I (const&); e.kids.apply(f) is f(child 0, child 1, ...)
//   e.children()       std::tuple<const Children&...>, the same as a tuple (the evaluators use child:
//                      a std::tuple costs the compiler dozens of instantiations per node type)
// Op tags, in namespace fixed::op (the dynamic path's mlops, each maps to one Tensor method):
//   Leaf<T, S>            a fixed::Tensor's storage, row-major: op.data (const T*). No children.
//   Const<T, S>           op.value broadcast to shape S (scalar operands). No children.
//   Cut<T, S>             a cut's value (fixed/cut.hpp): read as a Leaf (op.data), and op.node is the
//                         tape entry through which fixed::grad continues past it. No children.
//   Map<Fn F>             elementwise over FnTraits<F>::arity children (WHERE: cond, x, y) of the
//                         node's own shape (broadcasting is explicit Moves).
//   Cast<U>               elementwise conversion to U.
//   Detach                its child's value, through which fixed::grad passes no gradient.
//   Reduce<ReduceOps R, Dims Axes>  SUM or MAX over Axes (sorted, non-negative); the output keeps
//                         the rank with reduced axes 1, like mlops::Sum (keepdim=false is a RESHAPE
//                         above it).
//   Move<MovementOps M, Arg>  RESHAPE/EXPAND (Arg: the new Dims), PERMUTE (Dims order), PAD
//                         (Pairs (before, after)), SHRINK (Pairs [begin, end)), STRIDE (Dims of
//                         +-1: flip). Move::view<ChildShape> is the metagrad::View it stands for,
//                         computed in a constant expression by the shared View code.
//   MatMul                (matmul.hpp) a (..., m, k) @ b (k, n) or (..., k, n).
//   Conv2d<Stride, Padding>  (conv2d.hpp) x (N, Cin, H, W) with w (Cout, Cin, KH, KW), NCHW out.
// Evaluation (eval.hpp) reads Leaf/Const/Map/Cast/Detach/Move element by element; every other tag is
// materialised whole by its detail::Materialise<Tag> specialisation (Reduce, MatMul, Conv2d).
// Leaves point at tensors; an Expr must not outlive the tensors it reads (as with Eigen).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/mp11/list.hpp>

#include "metagrad/detail/fixed/expr.hpp"
#include "metagrad/fixed/shape.hpp"
#include "metagrad/functions.hpp"
#include "metagrad/ops.hpp"

namespace metagrad::fixed {

// Elementwise functions: their definitions, shared with the dynamic path (metagrad/functions.hpp).
using fn::Fn;
using fn::FnTraits;
using fn::none;

struct keepdim_t {};
inline constexpr keepdim_t keepdim{};  // x.sum<1>(keepdim)

namespace op {
template <class T, class S>
struct Leaf {
  const T* data;
};
template <class T, class S>
struct Const {
  T value;
};
// Derived from Leaf: whatever reads a leaf's data reads a cut's the same way.
template <class T, class S>
struct Cut : Leaf<T, S> {
  void* node;  // its fixed::detail::ad::TapeNode
};
template <Fn F>
struct Map {
  static constexpr Fn fn = F;
};
template <class U>
struct Cast {};
struct Detach {};
// A switch known at run time: the child's value, or zeros without evaluating the child at all
// (fixed::grad gates each gradient term by whether its leaf is the parameter).
struct Gate {
  bool on;
};
template <ReduceOps R, Dims Axes>
struct Reduce {
  static constexpr ReduceOps kind = R;
  static constexpr Dims axes = Axes;
};
template <MovementOps M, auto Arg>
struct Move {
  static constexpr MovementOps kind = M;
  static constexpr auto arg = Arg;
  // This op applied to a view (nullopt: a reshape the view cannot express by itself).
  static constexpr std::optional<View> apply(const View& v) {
    if constexpr (M == MovementOps::RESHAPE)
      return v.reshape(Arg);
    else if constexpr (M == MovementOps::PERMUTE)
      return v.permute(Arg);
    else if constexpr (M == MovementOps::EXPAND)
      return v.expand(Arg);
    else if constexpr (M == MovementOps::PAD)
      return v.pad(Arg);
    else if constexpr (M == MovementOps::SHRINK)
      return v.shrink(Arg);
    else
      return v.stride(Arg);
  }
  template <class ChildShape>
  static constexpr View view = *apply(View(ChildShape::dims));
};
}  // namespace op

template <class Derived>
struct ExprBase;

template <class Op, class... C>
struct Expr : ExprBase<Expr<Op, C...>> {
  using op_type = Op;
  using children_types = boost::mp11::mp_list<C...>;
  static constexpr std::size_t arity = sizeof...(C);
  using value_type = typename detail::node<Op, C...>::value_type;
  using shape = typename detail::node<Op, C...>::shape;

  [[no_unique_address]] Op op;
  detail::Kids<C...> kids;

  constexpr explicit Expr(Op o, const C&... c) : op(o), kids{c...} {}  // copies: pointers and values
  std::tuple<const C&...> children() const {
    return kids.apply([](const C&... c) { return std::tuple<const C&...>(c...); });
  }
  constexpr const Expr& expr() const { return *this; }
};

// Child I of a node.
template <std::size_t I, class Op, class... C>
constexpr const auto& child(const Expr<Op, C...>& e) {
  if constexpr (I == 0)
    return e.kids.k0;
  else if constexpr (I == 1)
    return e.kids.k1;
  else
    return e.kids.k2;
}

template <class E>
struct is_expr : std::false_type {};
template <class Op, class... C>
struct is_expr<Expr<Op, C...>> : std::true_type {};

// Anything that has an expression: an Expr or a fixed::Tensor (a Leaf).
template <class E>
concept Operand = requires(const E& e) {
  e.expr();
  typename E::shape;
  typename E::value_type;
};
template <Operand E>
using expr_t = std::remove_cvref_t<decltype(std::declval<const E&>().expr())>;

// The methods every operand has; their bodies live with their concept (elementwise.hpp,
// movement.hpp, reduce.hpp, tensor.hpp). Include metagrad/fixed.hpp to get them all.
template <class Derived>
struct ExprBase {
  constexpr const Derived& self() const { return static_cast<const Derived&>(*this); }

  auto neg() const;
  auto exp() const;
  auto log() const;
  auto sin() const;
  auto cos() const;
  auto sqrt() const;
  auto relu() const;
  auto sigmoid() const;
  auto erf() const;
  auto asin() const;
  auto acos() const;
  auto atan() const;
  auto tanh() const;
  auto gelu() const;
  auto square() const;
  auto abs() const;
  auto reciprocal() const;
  auto log2() const;
  auto exp2() const;
  auto tan() const;
  auto rsqrt() const;
  auto sign() const;
  auto clip(double min, double max) const;
  template <class B>
  auto maximum(const B& y) const;  // y: an operand or a scalar, broadcast (as fixed::maximum)
  template <class B>
  auto minimum(const B& y) const;
  auto hardtanh(double min = -1, double max = 1) const;
  auto relu6() const;
  auto elu(double alpha = 1) const;
  auto leakyrelu(double neg_slope = 0.01) const;
  auto swish() const;
  auto silu() const;
  auto hardswish() const;
  auto quick_gelu() const;
  auto softplus(double beta = 1) const;
  auto mish() const;
  auto softsign() const;
  auto floor() const;
  auto ceil() const;
  auto celu(double alpha = 1) const;
  template <class U>
  auto cast() const;

  template <index_t... S>
  auto reshape() const;
  template <index_t... Order>
  auto permute() const;
  template <index_t... S>
  auto expand() const;
  template <index_t... BeforeAfter>
  auto pad() const;
  template <index_t... BeginEnd>
  auto shrink() const;
  template <index_t... Axes>
  auto flip() const;
  auto transpose() const;  // the last two axes swapped

  template <index_t... Axes>
  auto sum() const;
  template <index_t... Axes>
  auto sum(keepdim_t) const;
  template <index_t... Axes>
  auto max() const;
  template <index_t... Axes>
  auto max(keepdim_t) const;
  template <index_t... Axes>
  auto min() const;
  template <index_t... Axes>
  auto min(keepdim_t) const;
  template <index_t... Axes>
  auto mean() const;
  template <index_t... Axes>
  auto mean(keepdim_t) const;
  template <index_t Axis = -1>
  auto softmax() const;
  template <index_t Axis = -1>
  auto log_softmax() const;
  // The same value, a constant to fixed::grad (Tensor::detach): softmax's shift by its max.
  auto detach() const;

  auto eval() const;  // a fixed::Tensor holding the values
};

}  // namespace metagrad::fixed
