#pragma once
// Type-level mlops: the backward rule of every static op, as a function from types to types.
// `Vjp<Op>::grad<I>(n, g)` is the expression of d loss / d child I, given the incoming gradient
// expression g (the node's shape) and the node n (n.out(): its forward value, n.x<I>(): child I's,
// n.op(): its op, for ops with run-time data), or `none` where child I gets no gradient
// (comparisons, a where's condition). The elementwise, movement and reduce rules are not written
// here: they are the FnTraits, MoveTraits and ReduceTraits entries (metagrad/functions.hpp,
// metagrad/shape_rules.hpp) the dynamic path's mlops are generated from too, so both paths agree
// to rounding (test/test_fixed_functions.cpp checks every one).
#include <cstddef>
#include <tuple>

#include "metagrad/detail/fixed/vjp.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/functions.hpp"
#include "metagrad/shape_rules.hpp"

namespace metagrad::fixed {

template <class Op>
struct Vjp {  // an op without a rule: a clear compile error instead of an incomplete type
  static_assert(detail::always_false<Op>,
                "fixed::grad: this op has no backward rule (specialise fixed::Vjp<Op>)");
};

// Elementwise functions: the rule in each one's FnTraits entry (metagrad/functions.hpp), shared
// with the dynamic path; it gives every child's gradient, of which child I's is built.
template <Fn F>
struct Vjp<op::Map<F>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::get<I>(FnTraits<F>::grad(detail::Only<I, N>{n}, g));
  }
};

template <class U>
struct Vjp<op::Cast<U>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    using From = typename N::template child_t<0>::value_type;
    if constexpr (std::is_floating_point_v<From>)
      return g.template cast<From>();
    else
      return none{};
  }
};

template <>
struct Vjp<op::Detach> {  // the gradient stops here
  template <std::size_t I, class N, class G>
  static none grad(const N&, const G&) {
    return {};
  }
};

template <>
struct Vjp<op::Gate> {  // the same switch on the gradient
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return Expr<op::Gate, G>(n.op(), g);
  }
};

// Reductions and movements: the rules of their MoveTraits and ReduceTraits entries
// (metagrad/shape_rules.hpp), shared with the dynamic path.
template <ReduceOps R, Dims Axes>
struct Vjp<op::Reduce<R, Axes>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return fn::ReduceTraits<R>::grad(detail::ReduceNode<Axes, N, typename G::value_type>{{n}}, g);
  }
};

template <MovementOps M, auto Arg>
struct Vjp<op::Move<M, Arg>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    if constexpr (detail::swaps_last_two<M, Arg>() && detail::transposable_product<G>::value) {
      // (a b)^T as b^T a^T: a linear layer's weight (out, in) read as w.transpose() gets its
      // gradient from one product written in its own layout, not a product and a transposed copy
      return matmul(detail::transposed(fixed::child<1>(g)), detail::transposed(fixed::child<0>(g)));
    } else {
      using Rule = fn::MoveTraits<M>;
      return detail::move_back<Rule::back, Rule::back_arg(Arg, N::template child_t<0>::shape::dims)>(g);
    }
  }
};

// (..., m, k) @ (k, n): da = g b^T; db = a^T g, the batch axes folded into m when b is 2-D.
template <>
struct Vjp<op::MatMul> {
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    if constexpr (I == 0) {
      return matmul(g, n.template x<1>().transpose());
    } else {
      using A = typename N::template child_t<0>;
      constexpr std::size_t ra = A::shape::rank;
      constexpr index_t k = A::shape::dims[ra - 1], m = A::shape::size / k, cols = G::shape::dims[ra - 1];
      if constexpr (ra == N::template child_t<1>::shape::rank)
        return matmul(n.template x<0>().transpose(), g);
      else
        return matmul(n.template x<0>().template reshape<m, k>().transpose(), g.template reshape<m, cols>());
    }
  }
};

}  // namespace metagrad::fixed
