#pragma once
// Type-level mlops: the backward rule of every static op, as a function from types to types.
// `Vjp<Op>::grad<I>(n, g)` is the expression of d loss / d child I, given the incoming gradient
// expression g (the node's shape) and the node n (n.out(): its forward value, n.x<I>(): child I's,
// n.op(): its op, for ops with run-time data), or `none` where child I gets no gradient
// (comparisons, a where's condition). The rules are the
// dynamic path's (runtime/tensor/mlops.cpp), so both paths agree to rounding.
#include <cstddef>
#include <tuple>

#include "metagrad/detail/fixed/vjp.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/reduce.hpp"
#include "metagrad/functions.hpp"

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

template <ReduceOps R, Dims Axes>
struct Vjp<op::Reduce<R, Axes>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    constexpr Dims in = N::template child_t<0>::shape::dims;
    if constexpr (R == ReduceOps::SUM) {
      return detail::expand_to<in>(g);
    } else {  // shared equally among the elements that reach the max
      using T = typename G::value_type;
      auto is_max = (n.template x<0>() == detail::expand_to<in>(n.out())).template cast<T>();
      auto count =
          detail::expand_to<in>(Expr<op::Reduce<ReduceOps::SUM, Axes>, decltype(is_max)>({}, is_max));
      return is_max / count * detail::expand_to<in>(g);
    }
  }
};

template <MovementOps M, auto Arg>
struct Vjp<op::Move<M, Arg>> {
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    constexpr Dims in = N::template child_t<0>::shape::dims;
    if constexpr (M == MovementOps::RESHAPE) {
      return detail::move<G, MovementOps::RESHAPE, in>(g);
    } else if constexpr (M == MovementOps::EXPAND) {
      return detail::sum_to<in>(g);
    } else if constexpr (M == MovementOps::PERMUTE && detail::swaps_last_two<M, Arg>() &&
                         detail::transposable_product<G>::value) {
      // (a b)^T as b^T a^T: a linear layer's weight (out, in) read as w.transpose() gets its
      // gradient from one product written in its own layout, not a product and a transposed copy
      return matmul(detail::transposed(fixed::child<1>(g)), detail::transposed(fixed::child<0>(g)));
    } else if constexpr (M == MovementOps::PERMUTE) {
      constexpr Dims inverse = [] {
        Dims d = Dims::filled(Arg.size(), 0);
        for (std::size_t i = 0; i < Arg.size(); ++i)
          d[static_cast<std::size_t>(Arg[i])] = static_cast<std::int64_t>(i);
        return d;
      }();
      return detail::move<G, MovementOps::PERMUTE, inverse>(g);
    } else if constexpr (M == MovementOps::PAD) {  // the padding cut off again
      constexpr Pairs keep = [] {
        Pairs p;
        for (std::size_t i = 0; i < Arg.size(); ++i)
          p.push_back({Arg[i].first, Arg[i].first + N::template child_t<0>::shape::dims[i]});
        return p;
      }();
      return detail::move<G, MovementOps::SHRINK, keep>(g);
    } else if constexpr (M == MovementOps::SHRINK) {  // zeros where the slice cut
      constexpr Pairs around = [] {
        Pairs p;
        for (std::size_t i = 0; i < Arg.size(); ++i)
          p.push_back({Arg[i].first, N::template child_t<0>::shape::dims[i] - Arg[i].second});
        return p;
      }();
      return detail::move<G, MovementOps::PAD, around>(g);
    } else {  // STRIDE of +-1 (flip) is its own inverse
      return detail::move<G, MovementOps::STRIDE, Arg>(g);
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
