#pragma once
// Inline evaluation (eval.hpp), phases 1 and 2, at compile time: the plan (each leaf's View of the
// output's index space, what is materialised) and the iteration shape.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include "metagrad/detail/fixed/cpu.hpp"
#include "metagrad/detail/fixed/tensor.hpp"
#include "metagrad/detail/fixed/vec_form.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/parallel.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

template <class E>
struct kind {
  static constexpr bool leaf = false, constant = false, map = false, cast = false, move = false, gate = false,
                        detach = false;
};
template <class T, class S, class... C>
struct kind<Expr<op::Leaf<T, S>, C...>> : kind<void> {
  static constexpr bool leaf = true;
};
template <class T, class S, class... C>
struct kind<Expr<op::Cut<T, S>, C...>> : kind<Expr<op::Leaf<T, S>>> {};
template <class T, class S, class... C>
struct kind<Expr<op::Const<T, S>, C...>> : kind<void> {
  static constexpr bool constant = true;
};
template <Fn F, class... C>
struct kind<Expr<op::Map<F>, C...>> : kind<void> {
  static constexpr bool map = true;
};
template <class U, class... C>
struct kind<Expr<op::Cast<U>, C...>> : kind<void> {
  static constexpr bool cast = true;
};
template <MovementOps M, auto Arg, class... C>
struct kind<Expr<op::Move<M, Arg>, C...>> : kind<void> {
  static constexpr bool move = true;
};
template <class... C>
struct kind<Expr<op::Detach, C...>> : kind<void> {
  static constexpr bool detach = true;
};
template <class... C>
struct kind<Expr<op::Gate, C...>> : kind<void> {
  static constexpr bool gate = true;
};
// Everything else (reductions, matmul, ...) is computed whole by Materialise before the loop.
template <class E>
inline constexpr bool materialised = !(kind<E>::leaf || kind<E>::constant || kind<E>::map || kind<E>::cast ||
                                       kind<E>::move || kind<E>::gate || kind<E>::detach);

// Movement ops in the order they apply (the one nearest the leaf first).
template <class Ops>
constexpr std::optional<View> apply_moves(std::optional<View> v) {
  mp::mp_for_each<Ops>([&](auto m) {
    if (v) v = decltype(m)::apply(*v);
  });
  return v;
}
template <class M>
struct is_pad : std::bool_constant<M::kind == MovementOps::PAD> {};
template <class Ops>
inline constexpr bool has_pad = mp::mp_any_of<Ops, is_pad>::value;

template <std::size_t N>
using Views = std::array<std::optional<View>, N>;

template <std::size_t N, std::size_t... M>
constexpr Views<N> concat(const Views<M>&... parts) {
  Views<N> out{};
  std::size_t k = 0;
  ((std::copy(parts.begin(), parts.end(), out.begin() + k), k += M), ...);
  return out;
}

// The views the fused loop over E (below movement ops Ops) reads through: one per leaf or
// materialised node, one per guard (nullopt: a reshape the views cannot follow).
template <class Ops, class E>
struct plan {
  static constexpr bool own = !kind<E>::constant || has_pad<Ops>;
  static constexpr std::size_t count = own ? 1 : 0;
  static constexpr Views<count> views = [] {
    Views<count> v{};
    if constexpr (own) v[0] = apply_moves<Ops>(View(E::shape::dims));
    return v;
  }();
};
template <std::size_t N>
constexpr bool all_exist(const Views<N>& views) {
  return std::all_of(views.begin(), views.end(), [](const auto& v) { return v.has_value(); });
}
// A function's value that a broadcast reads many times (the log of a row's sum in a log-softmax, a
// LayerNorm's 1 / sqrt of its variance): computed once per element of its own shape before the loop,
// as a materialised node, not once per element of the output.
template <class E>
struct expensive : std::false_type {};
template <Fn F, class... C>
struct expensive<Expr<op::Map<F>, C...>>
    : std::bool_constant<(FnTraits<F>::cost >= kVectorCost) || (expensive<C>::value || ...)> {};
template <class U, class C>
struct expensive<Expr<op::Cast<U>, C>> : expensive<C> {};
template <MovementOps M, auto Arg, class C>
struct expensive<Expr<op::Move<M, Arg>, C>> : expensive<C> {};
template <class M>
struct is_expand : std::bool_constant<M::kind == MovementOps::EXPAND> {};
template <class Ops, class E>
inline constexpr bool hoisted = [] {
  if constexpr (kind<E>::map && expensive<E>::value && mp::mp_any_of<Ops, is_expand>::value && !has_pad<Ops>)
    return apply_moves<Ops>(View(E::shape::dims)).has_value();
  else
    return false;
}();

template <class Ops, Fn F, class... C>
struct plan<Ops, Expr<op::Map<F>, C...>> {
  using E = Expr<op::Map<F>, C...>;
  static constexpr bool hoist = hoisted<Ops, E>;
  static constexpr std::size_t guard = has_pad<Ops> ? 1 : 0;
  static constexpr std::size_t count = hoist ? 1 : guard + (plan<Ops, C>::count + ... + 0);
  static constexpr Views<count> views = [] {
    if constexpr (hoist)
      return Views<1>{apply_moves<Ops>(View(E::shape::dims))};
    else
      return concat<count>(
          [] {
            Views<guard> v{};
            if constexpr (guard) v[0] = apply_moves<Ops>(View(E::shape::dims));
            return v;
          }(),
          plan<Ops, C>::views...);
  }();
};
template <class Ops, class U, class C>
struct plan<Ops, Expr<op::Cast<U>, C>> : plan<Ops, C> {};
template <class Ops, class C>
struct plan<Ops, Expr<op::Gate, C>> : plan<Ops, C> {};
template <class Ops, class C>
struct plan<Ops, Expr<op::Detach, C>> : plan<Ops, C> {};
template <class Ops, MovementOps M, auto Arg, class C>
struct plan<Ops, Expr<op::Move<M, Arg>, C>> {
  using inner = plan<mp::mp_push_front<Ops, op::Move<M, Arg>>, C>;
  static constexpr bool split = !all_exist(inner::views);  // materialise C, then move the temporary
  static constexpr std::size_t count = split ? 1 : inner::count;
  static constexpr Views<count> views = [] {
    if constexpr (split)
      return Views<1>{apply_moves<mp::mp_push_front<Ops, op::Move<M, Arg>>>(View(C::shape::dims))};
    else
      return inner::views;
  }();
};

// Size-1 axes dropped, then neighbours merged from the innermost out while every view follows.
template <std::size_t N>
constexpr Dims iteration_shape(const Dims& shape, const Views<N>& views) {
  auto fits = [&](const Dims& d) {
    for (const auto& v : views)
      if (!v || !v->reshape(d)) return false;
    return true;
  };
  Dims cur;
  for (std::int64_t d : shape)
    if (d != 1) cur.push_back(d);
  if (cur.empty()) cur.push_back(1);
  if (!fits(cur)) return shape.empty() ? Dims{1} : shape;
  for (std::size_t i = cur.size(); i-- > 1;) {
    Dims cand;
    for (std::size_t k = 0; k < cur.size(); ++k)
      if (k == i)
        cand.back() *= cur[k];
      else
        cand.push_back(cur[k]);
    if (fits(cand)) cur = cand;
  }
  return cur;
}

}  // namespace metagrad::fixed::detail
