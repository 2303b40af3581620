#pragma once
// Inline evaluation: an Expr becomes one fused loop nest the host compiler vectorises.
//
// 1. Plan (compile time). Walking down from the root, the movement ops met so far are applied to
//    each leaf's row-major View with the shared View code, so every leaf ends up as one View of the
//    output's index space: movement costs nothing at run time. A node the loop cannot read element
//    by element (a reduction; a reshape no View can express) is materialised: evaluated first into
//    an arena temporary that is then a leaf (or, at the root, straight into the destination when the
//    expression does not read it). Below a PAD, elementwise nodes and constants are guarded by the
//    pad's mask (f(0) need not be 0).
// 2. Iteration shape (compile time). Size-1 axes are dropped and neighbouring axes merged while
//    every leaf view can follow, so contiguous operands give a single `p[i]` loop.
// 3. Bind (run time): the Expr becomes a tree of B* nodes holding only pointers and constants, the
//    Views are template arguments. 4. Loop: outer axes by an odometer, the innermost axis a plain
//    loop whose body the compiler inlines and vectorises. A large loop is cut into contiguous
//    ranges (the flat range of a 1-D loop, else outer rows), one per thread (parallel.hpp).
// Small expressions (every node at most kInlineBytes, tensor.hpp) skip the arena and the threads:
// a materialised node keeps its values inside the bound tree (BOwn), and the loop runs inline into
// a local array copied to the destination, which the compiler unrolls and keeps in registers.
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

#if defined(__GNUC__)
#define METAGRAD_INLINE __attribute__((always_inline)) inline
#define METAGRAD_NOINLINE __attribute__((noinline))  // one copy of a kernel however many callers
#else
#define METAGRAD_INLINE inline
#define METAGRAD_NOINLINE
#endif

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

// ---- bound nodes: what the loop reads ----
template <class T, View V>
struct BLeaf {
  const T* p;
};
template <class T, View V, index_t N>
struct BOwn {   // a small materialised node's values, inside the bound tree: no arena
  T v[N] = {};  // zeroed: g++ cannot always see that the materialisation writes every element
};
template <class T>
struct BConst {
  T v;
};
template <Fn F, class... C>
struct BMap {
  Kids<C...> c;
};
template <class U, class C>
struct BCast {
  C c;
};
template <View M, class T, class C>
struct BGuard {
  C c;
};
template <class T, class C>
struct BGate {  // c is bound (and its materialised nodes computed) only when on
  bool on;
  C c;
};

template <View V, std::size_t R>
METAGRAD_INLINE index_t offset_of(const index_t* pos, index_t j) {
  index_t i = V.offset + j * V.strides[R - 1];
  [&]<std::size_t... d>(std::index_sequence<d...>) { ((i += pos[d] * V.strides[d]), ...); }
  (std::make_index_sequence<R - 1>{});
  return i;
}
template <View V, std::size_t R>
METAGRAD_INLINE bool valid_at(const index_t* pos, index_t j) {
  if constexpr (V.mask.empty())
    return true;
  else
    return [&]<std::size_t... d>(std::index_sequence<d...>) {
      return ((pos[d] >= V.mask[d].first && pos[d] < V.mask[d].second) && ...) && j >= V.mask[R - 1].first &&
             j < V.mask[R - 1].second;
    }
  (std::make_index_sequence<R - 1>{});
}

template <std::size_t R, class T, View V>
METAGRAD_INLINE T get(const BLeaf<T, V>& b, const index_t* pos, index_t j) {
  if constexpr (V.mask.empty())
    return b.p[offset_of<V, R>(pos, j)];
  else
    return valid_at<V, R>(pos, j) ? b.p[offset_of<V, R>(pos, j)] : T(0);
}
template <std::size_t R, class T, View V, index_t N>
METAGRAD_INLINE T get(const BOwn<T, V, N>& b, const index_t* pos, index_t j) {
  return get<R>(BLeaf<T, V>{b.v}, pos, j);
}
template <std::size_t R, class T>
METAGRAD_INLINE T get(const BConst<T>& b, const index_t*, index_t) {
  return b.v;
}
// One overload per arity rather than a lambda over the children: fewer instantiations, and
// nothing between the loop body and the functions for the inliner to see through.
template <std::size_t R, Fn F, class A>
METAGRAD_INLINE auto get(const BMap<F, A>& b, const index_t* pos, index_t j) {
  return FnTraits<F>::scalar(get<R>(b.c.k0, pos, j));
}
template <std::size_t R, Fn F, class A, class B>
METAGRAD_INLINE auto get(const BMap<F, A, B>& b, const index_t* pos, index_t j) {
  return FnTraits<F>::scalar(get<R>(b.c.k0, pos, j), get<R>(b.c.k1, pos, j));
}
template <std::size_t R, Fn F, class A, class B, class C>
METAGRAD_INLINE auto get(const BMap<F, A, B, C>& b, const index_t* pos, index_t j) {
  return FnTraits<F>::scalar(get<R>(b.c.k0, pos, j), get<R>(b.c.k1, pos, j), get<R>(b.c.k2, pos, j));
}
template <std::size_t R, class U, class C>
METAGRAD_INLINE U get(const BCast<U, C>& b, const index_t* pos, index_t j) {
  return math::convert<U>(get<R>(b.c, pos, j));
}
template <std::size_t R, View M, class T, class C>
METAGRAD_INLINE T get(const BGuard<M, T, C>& b, const index_t* pos, index_t j) {
  return valid_at<M, R>(pos, j) ? get<R>(b.c, pos, j) : T(0);
}
template <std::size_t R, class T, class C>
METAGRAD_INLINE T get(const BGate<T, C>& b, const index_t* pos, index_t j) {
  return b.on ? get<R>(b.c, pos, j) : T(0);
}

struct Ctx {
  const void* out = nullptr;  // the destination, to detect a leaf that reads it
  bool reads_out = false;     // some leaf is the destination, read in place (safe)
  bool alias = false;         // some leaf reads the destination through another view
};

// How a materialised op computes its whole result: `Materialise<OpTag>::run(out, expr)`, one
// specialisation per op (reduce.hpp, matmul.hpp, ...).
template <class Op>
struct Materialise;
template <class E>
METAGRAD_INLINE void assign(typename E::value_type* out, const E& e);
// Can Materialise add E's result to what out holds, in its own stores (`add(out, e)`)? A product's
// GEMM can (matmul.hpp).
template <class E>
inline constexpr bool adds_into = false;

// b masked by the pads in Ops (for constants and elementwise nodes only: a movement node's view
// may not exist). Called only below a pad: elsewhere bind returns b itself, one function fewer.
template <class Ops, class S, class T, class B>
auto guarded(B b) {
  return BGuard<*apply_moves<Ops>(View(S::dims)), T, B>{b};
}

template <class Ops, class E>
METAGRAD_INLINE auto bind(const E& e, Ctx& ctx);
// A Map's children bound left to right (braces order the calls), one overload per arity.
template <class Ops, Fn F, class A>
METAGRAD_INLINE auto bind_map(const Expr<op::Map<F>, A>& e, Ctx& ctx) {
  return BMap<F, decltype(bind<Ops>(e.kids.k0, ctx))>{{bind<Ops>(e.kids.k0, ctx)}};
}
template <class Ops, Fn F, class A, class B>
METAGRAD_INLINE auto bind_map(const Expr<op::Map<F>, A, B>& e, Ctx& ctx) {
  using BA = decltype(bind<Ops>(e.kids.k0, ctx));
  using BB = decltype(bind<Ops>(e.kids.k1, ctx));
  return BMap<F, BA, BB>{{bind<Ops>(e.kids.k0, ctx), bind<Ops>(e.kids.k1, ctx)}};
}
template <class Ops, Fn F, class A, class B, class C>
METAGRAD_INLINE auto bind_map(const Expr<op::Map<F>, A, B, C>& e, Ctx& ctx) {
  using BA = decltype(bind<Ops>(e.kids.k0, ctx));
  using BB = decltype(bind<Ops>(e.kids.k1, ctx));
  using BC = decltype(bind<Ops>(e.kids.k2, ctx));
  return BMap<F, BA, BB, BC>{
      {bind<Ops>(e.kids.k0, ctx), bind<Ops>(e.kids.k1, ctx), bind<Ops>(e.kids.k2, ctx)}};
}

// Inline all the way down: the bound tree is then registers and pointers the loop reads, with no
// call between (a materialised node's work is a call of its own where it is big).
template <class Ops, class E>
METAGRAD_INLINE auto bind(const E& e, Ctx& ctx) {
  using T = typename E::value_type;
  using S = typename E::shape;
  if constexpr (kind<E>::leaf || materialised<E>) {
    constexpr View v = *apply_moves<Ops>(View(S::dims));
    if constexpr (kind<E>::leaf) {
      const T* p = e.op.data;
      ctx.reads_out = ctx.reads_out || p == ctx.out;
      ctx.alias = ctx.alias || (p == ctx.out && !v.contiguous);
      return BLeaf<T, v>{p};
    } else if constexpr (inline_size<T>(S::size)) {
      BOwn<T, v, S::size> own;
      Materialise<typename E::op_type>::run(own.v, e);
      return own;
    } else {
      T* tmp = Arena::local().alloc<T>(S::size);
      Materialise<typename E::op_type>::run(tmp, e);
      return BLeaf<T, v>{tmp};
    }
  } else if constexpr (kind<E>::constant) {
    if constexpr (has_pad<Ops>)
      return guarded<Ops, S, T>(BConst<T>{e.op.value});
    else
      return BConst<T>{e.op.value};
  } else if constexpr (hoisted<Ops, E>) {  // evaluated first, then read through the broadcast
    constexpr View v = *apply_moves<Ops>(View(S::dims));
    if constexpr (inline_size<T>(S::size)) {
      BOwn<T, v, S::size> own;
      assign(own.v, e);
      return own;
    } else {
      T* tmp = Arena::local().alloc<T>(S::size);
      assign(tmp, e);
      return BLeaf<T, v>{tmp};
    }
  } else if constexpr (kind<E>::map) {
    if constexpr (has_pad<Ops>)
      return guarded<Ops, S, T>(bind_map<Ops>(e, ctx));
    else
      return bind_map<Ops>(e, ctx);
  } else if constexpr (kind<E>::cast) {
    return BCast<T, decltype(bind<Ops>(e.kids.k0, ctx))>{bind<Ops>(e.kids.k0, ctx)};
  } else if constexpr (kind<E>::detach) {  // read as its child
    return bind<Ops>(e.kids.k0, ctx);
  } else if constexpr (kind<E>::gate) {
    using C = decltype(bind<Ops>(e.kids.k0, ctx));
    return BGate<T, C>{e.op.on, e.op.on ? bind<Ops>(e.kids.k0, ctx) : C{}};
  } else {
    using C = mp::mp_front<typename E::children_types>;
    using Ops2 = mp::mp_push_front<Ops, typename E::op_type>;
    if constexpr (plan<Ops, E>::split) {  // a reshape no view expresses: evaluate C first
      using U = typename C::value_type;
      constexpr View v = *apply_moves<Ops2>(View(C::shape::dims));
      if constexpr (inline_size<U>(C::shape::size)) {
        BOwn<U, v, C::shape::size> own;
        assign(own.v, e.kids.k0);
        return own;
      } else {
        U* tmp = Arena::local().alloc<U>(C::shape::size);
        assign(tmp, e.kids.k0);
        return BLeaf<U, v>{tmp};
      }
    } else {
      return bind<Ops2>(e.kids.k0, ctx);
    }
  }
}

// Runs body(o, pos) for each position o in [lo, hi) of the outer axes of I (o: their flat index);
// the body loops over the innermost axis itself.
template <Dims I, class Body>
METAGRAD_INLINE void for_outer(index_t lo, index_t hi, Body&& body) {
  constexpr std::size_t R = I.size();
  if constexpr (prod(I) == 0) return;
  index_t pos[R] = {};
  for (std::size_t d = R - 1, rest = static_cast<std::size_t>(lo); d-- > 0;)
    pos[d] = static_cast<index_t>(rest % static_cast<std::size_t>(I[d])),
    rest /= static_cast<std::size_t>(I[d]);
  for (index_t o = lo; o < hi; ++o) {
    body(o, static_cast<const index_t*>(pos));
    for (std::size_t d = R - 1; d-- > 0;) {
      if (++pos[d] < I[d]) break;
      pos[d] = 0;
    }
  }
}
template <Dims I>
inline constexpr index_t outer_count = prod(I) / (I[I.size() - 1] ? I[I.size() - 1] : 1);
template <Dims I, class Body>
METAGRAD_INLINE void for_outer(Body&& body) {
  for_outer<I>(0, outer_count<I>, body);
}

// ---- the contiguous 1-D loop per vector (when every leaf is read at stride 1 or 0, and each Fn
// has a vector form): simd.hpp's types and intrinsics instead of the auto-vectoriser ----
template <class B>
struct vector_form : std::false_type {};
template <class T, View V>
struct vector_form<BLeaf<T, V>>
    : std::bool_constant<std::is_floating_point_v<T> && V.ndim() == 1 && V.mask.empty() &&
                         (V.strides[0] == 0 || V.strides[0] == 1)> {};
template <class T, View V, index_t N>
struct vector_form<BOwn<T, V, N>> : vector_form<BLeaf<T, V>> {};
template <class T>
struct vector_form<BConst<T>> : std::is_floating_point<T> {};
template <class T, class C>
struct vector_form<BGate<T, C>> : vector_form<C> {};
template <Fn F, class... C>
struct vector_form<BMap<F, C...>> : std::bool_constant<vector_fn<F> && (vector_form<C>::value && ...)> {};
// Worth it only where the vector form beats what the compiler does alone: expensive functions
// (exp, sigmoid), and outputs large enough to stream past the caches.
template <class B>
struct vector_math : std::false_type {};
template <Fn F, class... C>
struct vector_math<BMap<F, C...>>
    : std::bool_constant<FnTraits<F>::cost >= kVectorCost || (vector_math<C>::value || ...)> {};
template <class T, class C>
struct vector_math<BGate<T, C>> : vector_math<C> {};

template <class T, View V>
METAGRAD_INLINE auto vget(const BLeaf<T, V>& b, index_t j) {
  if constexpr (V.strides[0] == 0)
    return simd<T>::splat(b.p[V.offset]);
  else
    return simd<T>::load(b.p + V.offset + j);
}
template <class T, View V, index_t N>
METAGRAD_INLINE auto vget(const BOwn<T, V, N>& b, index_t j) {
  return vget(BLeaf<T, V>{b.v}, j);
}
template <class T>
METAGRAD_INLINE auto vget(const BConst<T>& b, index_t) {
  return simd<T>::splat(b.v);
}
template <class T, class C>
METAGRAD_INLINE auto vget(const BGate<T, C>& b, index_t j) {
  if (b.on) return vget(b.c, j);
  return simd<T>::splat(T(0));
}
template <Fn F, class... V>
METAGRAD_INLINE auto vapply(V... v) {
  if constexpr (VecForm<F>::has)
    return VecForm<F>::vec(v...);
  else
    return FnTraits<F>::scalar(v...);
}
template <Fn F, class A>
METAGRAD_INLINE auto vget(const BMap<F, A>& b, index_t j) {
  return vapply<F>(vget(b.c.k0, j));
}
template <Fn F, class A, class B>
METAGRAD_INLINE auto vget(const BMap<F, A, B>& b, index_t j) {
  return vapply<F>(vget(b.c.k0, j), vget(b.c.k1, j));
}
template <Fn F, class A, class B, class C>
METAGRAD_INLINE auto vget(const BMap<F, A, B, C>& b, index_t j) {
  return vapply<F>(vget(b.c.k0, j), vget(b.c.k1, j), vget(b.c.k2, j));
}

// ---- a small contiguous loop written out as vectors: whole registers, then the rest by halving
// widths (9 floats: 8 lanes and 1; 20: 16 and 4), so neither a trip count nor a remainder loop is
// left (g++ keeps a 4-trip loop of vectors a loop), Eigen's fixed-size evaluation ----
template <class T, index_t L>  // L lanes of T, L a power of two: the width the data needs
using lanes_t __attribute__((vector_size(L * sizeof(T)))) = T;
template <class T, index_t L>
struct lanes {
  using V = lanes_t<T, L>;
  static METAGRAD_INLINE V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static METAGRAD_INLINE void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static METAGRAD_INLINE V splat(T x) {  // one broadcast (V{} + x would add a zero first)
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return V{(static_cast<void>(I), x)...}; }
    (std::make_index_sequence<L>{});
  }
};
template <index_t L, class T, View V>
METAGRAD_INLINE auto vget_n(const BLeaf<T, V>& b, index_t j) {
  if constexpr (V.strides[0] == 0)
    return lanes<T, L>::splat(b.p[V.offset]);
  else
    return lanes<T, L>::load(b.p + V.offset + j);
}
template <index_t L, class T, View V, index_t N>
METAGRAD_INLINE auto vget_n(const BOwn<T, V, N>& b, index_t j) {
  return vget_n<L>(BLeaf<T, V>{b.v}, j);
}
template <index_t L, class T>
METAGRAD_INLINE auto vget_n(const BConst<T>& b, index_t) {
  return lanes<T, L>::splat(b.v);
}
template <index_t L, class T, class C>
METAGRAD_INLINE auto vget_n(const BGate<T, C>& b, index_t j) {
  if (b.on) return vget_n<L>(b.c, j);
  return lanes<T, L>::splat(T(0));
}
template <index_t L, Fn F, class A>
METAGRAD_INLINE auto vget_n(const BMap<F, A>& b, index_t j) {
  return vapply<F>(vget_n<L>(b.c.k0, j));
}
template <index_t L, Fn F, class A, class B>
METAGRAD_INLINE auto vget_n(const BMap<F, A, B>& b, index_t j) {
  return vapply<F>(vget_n<L>(b.c.k0, j), vget_n<L>(b.c.k1, j));
}
template <index_t L, Fn F, class A, class B, class C>
METAGRAD_INLINE auto vget_n(const BMap<F, A, B, C>& b, index_t j) {
  return vapply<F>(vget_n<L>(b.c.k0, j), vget_n<L>(b.c.k1, j), vget_n<L>(b.c.k2, j));
}
// Cheap functions only: an expensive one's vector form is the ISA's width alone (narrower vectors
// would take its scalar form lane by lane, in double: other values than loop()'s).
template <class B>
inline constexpr bool small_vectors = vector_form<B>::value && !vector_math<B>::value;
// Elements [Off, Off + Left) of a 1-D loop, Left below a register: the widest power of two that fits,
// then the rest.
template <index_t Off, index_t Left, class B, class T>
METAGRAD_INLINE void vector_tail(const B& b, T* dst) {
  if constexpr (Left > 0) {
    constexpr index_t L = std::bit_floor(static_cast<std::size_t>(Left));
    if constexpr (L == 1)
      dst[Off] = get<1>(b, nullptr, Off);
    else
      lanes<T, L>::store(dst + Off, vget_n<L>(b, Off));
    vector_tail<Off + L, Left - L>(b, dst);
  }
}
// The whole 1-D loop of n elements into dst. dst may be a leaf of b read in place (each element at
// its own position): each vector is read before it is written, and no pointer is restrict.
template <index_t n, class B, class T>
METAGRAD_INLINE void vector_loop(const B& b, T* dst) {
  constexpr index_t W = simd<T>::W, body = n / W * W;
#pragma GCC unroll 16
  for (index_t j = 0; j < body; j += W) simd<T>::store(dst + j, vget(b, j));
  vector_tail<body, n - body>(b, dst);
}

// ---- each row of a loop of rank R > 1 per vector, where every leaf reads along the row at stride
// 1 or 0 (a row-major matrix, a bias broadcast down the rows): each leaf's row offset from the
// outer position, then the row as the 1-D loop above ----
template <std::size_t R, class B>
struct vector_rows : std::false_type {};
template <std::size_t R, class T, View V>
struct vector_rows<R, BLeaf<T, V>>
    : std::bool_constant<std::is_floating_point_v<T> && V.ndim() == R && V.mask.empty() &&
                         (V.strides[R - 1] == 0 || V.strides[R - 1] == 1)> {};
template <std::size_t R, class T, View V, index_t N>
struct vector_rows<R, BOwn<T, V, N>> : vector_rows<R, BLeaf<T, V>> {};
template <std::size_t R, class T>
struct vector_rows<R, BConst<T>> : std::is_floating_point<T> {};
template <std::size_t R, class T, class C>
struct vector_rows<R, BGate<T, C>> : vector_rows<R, C> {};
template <std::size_t R, Fn F, class... C>
struct vector_rows<R, BMap<F, C...>> : std::bool_constant<vector_fn<F> && (vector_rows<R, C>::value && ...)> {
};

// A select on a bool tensor read along the row (a causal mask): the bools widened to lane masks.
template <std::size_t R, View V, class X, class Y>
struct vector_rows<R, BMap<Fn::WHERE, BLeaf<bool, V>, X, Y>>
    : std::bool_constant<V.ndim() == R && V.mask.empty() &&
                         (V.strides[R - 1] == 0 || V.strides[R - 1] == 1) && vector_rows<R, X>::value &&
                         vector_rows<R, Y>::value> {};

template <std::size_t R, class T, View V>
METAGRAD_INLINE auto vget_row(const BLeaf<T, V>& b, const index_t* pos, index_t j) {
  if constexpr (V.strides[R - 1] == 0)
    return simd<T>::splat(b.p[offset_of<V, R>(pos, 0)]);
  else
    return simd<T>::load(b.p + offset_of<V, R>(pos, j));
}
template <std::size_t R, class T, View V, index_t N>
METAGRAD_INLINE auto vget_row(const BOwn<T, V, N>& b, const index_t* pos, index_t j) {
  return vget_row<R>(BLeaf<T, V>{b.v}, pos, j);
}
template <std::size_t R, class T>
METAGRAD_INLINE auto vget_row(const BConst<T>& b, const index_t*, index_t) {
  return simd<T>::splat(b.v);
}
template <std::size_t R, class T, class C>
METAGRAD_INLINE auto vget_row(const BGate<T, C>& b, const index_t* pos, index_t j) {
  if (b.on) return vget_row<R>(b.c, pos, j);
  return simd<T>::splat(T(0));
}
template <std::size_t R, Fn F, class A>
METAGRAD_INLINE auto vget_row(const BMap<F, A>& b, const index_t* pos, index_t j) {
  return vapply<F>(vget_row<R>(b.c.k0, pos, j));
}
template <std::size_t R, Fn F, class A, class B>
METAGRAD_INLINE auto vget_row(const BMap<F, A, B>& b, const index_t* pos, index_t j) {
  return vapply<F>(vget_row<R>(b.c.k0, pos, j), vget_row<R>(b.c.k1, pos, j));
}
template <std::size_t R, Fn F, class A, class B, class C>
METAGRAD_INLINE auto vget_row(const BMap<F, A, B, C>& b, const index_t* pos, index_t j) {
  return vapply<F>(vget_row<R>(b.c.k0, pos, j), vget_row<R>(b.c.k1, pos, j), vget_row<R>(b.c.k2, pos, j));
}
// W bools as the lanes of an integer vector M: one load widened (vpmovzx), not W loads each put in
// its lane (what g++ 12 makes of __builtin_convertvector from bytes).
template <class M, int W>
METAGRAD_INLINE M widen_bools(const bool* p) {
  static_assert(sizeof(bool) == 1);
  [[maybe_unused]] long long bytes8 = 0;
  std::memcpy(&bytes8, p, W < 8 ? W : 8);
#if defined(__AVX512F__)
  if constexpr (sizeof(M) == 64 && W == 16)
    return (M)_mm512_maskz_cvtepu8_epi32(__mmask16(0xFFFF),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if constexpr (sizeof(M) == 64 && W == 8)
    return (M)_mm512_maskz_cvtepu8_epi64(__mmask8(0xFF), _mm_cvtsi64_si128(bytes8));
#endif
#if defined(__AVX2__)
  if constexpr (sizeof(M) == 32 && W == 8) return (M)_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes8));
  if constexpr (sizeof(M) == 32 && W == 4) return (M)_mm256_cvtepu8_epi64(_mm_cvtsi64_si128(bytes8));
#endif
  M c;
  for (int i = 0; i < W; ++i) c[i] = p[i];
  return c;
}
template <std::size_t R, View V, class X, class Y>
METAGRAD_INLINE auto vget_row(const BMap<Fn::WHERE, BLeaf<bool, V>, X, Y>& b, const index_t* pos, index_t j) {
  auto x = vget_row<R>(b.c.k1, pos, j), y = vget_row<R>(b.c.k2, pos, j);
  using Lane = std::conditional_t<sizeof(x[0]) == 8, std::int64_t, std::int32_t>;
  using Mask = typename simd<Lane>::V;  // as many lanes as x, each as wide
  constexpr int W = simd<Lane>::W;
  const bool* p = b.c.k0.p + offset_of<V, R>(pos, V.strides[R - 1] == 0 ? 0 : j);
  Mask c;
  if constexpr (V.strides[R - 1] == 0) {
    c = Mask{} + Lane(*p);
  } else {
    c = widen_bools<Mask, W>(p);
  }
  return c != 0 ? x : y;
}

// ---- a subexpression read several times, evaluated once per element (a let): GELU's backward
// reads sigmoid(2u) three times, and as three copies of one subtree (an expression holds its
// children by value) the loop computed its exp three times. The largest repeated subtree with an
// expensive function is found in the bound tree's type; where its copies read the same pointers
// and constants (checked when bound, else the tree runs as it is) the loop evaluates it once per
// element and the copies read that value. ----
template <class X>
struct BVar {};  // a copy of the shared subtree X
template <class V>
struct BVal {  // X's value at the element the loop is at
  V v;
};
template <class B>
struct BRef {  // a subtree without X, by address (no copy per element of a small node's values)
  const B* p;
};
template <class X, class B>
struct BLet {
  X x;     // the shared subtree
  B body;  // the tree, X's copies BVar<X>
};

// The bound tree's nodes in preorder, a gate's and a guard's subtrees left out: their children
// may be read only where they are on (a gate off binds null pointers).
template <class B>
struct bnodes {
  using type = mp::mp_list<B>;
};
template <Fn F, class... C>
struct bnodes<BMap<F, C...>> {
  using type = mp::mp_append<mp::mp_list<BMap<F, C...>>, typename bnodes<C>::type...>;
};
template <class U, class C>
struct bnodes<BCast<U, C>> {
  using type = mp::mp_push_front<typename bnodes<C>::type, BCast<U, C>>;
};
template <class B>
inline constexpr std::size_t bsize = mp::mp_size<typename bnodes<B>::type>::value;

template <class L>
struct largest_of {
  template <class A, class C>
  using larger = mp::mp_if_c<(bsize<C> > bsize<A>), C, A>;
  using type = mp::mp_fold<mp::mp_pop_front<L>, mp::mp_front<L>, larger>;
};
template <>
struct largest_of<mp::mp_list<>> {
  using type = void;
};
// The largest subtree of B with an expensive function that B holds more than once (void: none).
template <class B>
struct shared_subtree {
  using nodes = typename bnodes<B>::type;
  template <class X>
  using repeated = mp::mp_bool<vector_math<X>::value && (mp::mp_count<nodes, X>::value > 1)>;
  using type = typename largest_of<mp::mp_copy_if<mp::mp_unique<nodes>, repeated>>::type;
};

// Bound trees of one type reading the same values: pointers equal, constants equal bit for bit
// (0 and -0 differ under a divide).
template <class T, View V>
bool bequal(const BLeaf<T, V>& a, const BLeaf<T, V>& b) {
  return a.p == b.p;
}
template <class T, View V, index_t N>
bool bequal(const BOwn<T, V, N>& a, const BOwn<T, V, N>& b) {
  return std::memcmp(a.v, b.v, sizeof(a.v)) == 0;
}
template <class T>
bool bequal(const BConst<T>& a, const BConst<T>& b) {
  return std::memcmp(&a.v, &b.v, sizeof(T)) == 0;
}
template <class U, class C>
bool bequal(const BCast<U, C>& a, const BCast<U, C>& b) {
  return bequal(a.c, b.c);
}
template <View M, class T, class C>
bool bequal(const BGuard<M, T, C>& a, const BGuard<M, T, C>& b) {
  return bequal(a.c, b.c);
}
template <class T, class C>
bool bequal(const BGate<T, C>& a, const BGate<T, C>& b) {
  return a.on == b.on && (!a.on || bequal(a.c, b.c));
}
template <Fn F, class... C>
bool bequal(const BMap<F, C...>& a, const BMap<F, C...>& b) {
  if constexpr (sizeof...(C) == 1)
    return bequal(a.c.k0, b.c.k0);
  else if constexpr (sizeof...(C) == 2)
    return bequal(a.c.k0, b.c.k0) && bequal(a.c.k1, b.c.k1);
  else
    return bequal(a.c.k0, b.c.k0) && bequal(a.c.k1, b.c.k1) && bequal(a.c.k2, b.c.k2);
}

// Do all copies of X in b read what the first does? (first: the first copy met, in preorder)
template <class X, class B>
bool copies_equal(const B& b, const X*& first) {
  if constexpr (std::is_same_v<B, X>) {
    if (!first) return first = &b, true;
    return bequal(*first, b);
  } else {
    return true;
  }
}
template <class X, Fn F, class... C>
bool copies_equal(const BMap<F, C...>& b, const X*& first) {
  if constexpr (std::is_same_v<BMap<F, C...>, X>) {
    if (!first) return first = &b, true;
    return bequal(*first, b);
  } else if constexpr (sizeof...(C) == 1) {
    return copies_equal<X>(b.c.k0, first);
  } else if constexpr (sizeof...(C) == 2) {
    return copies_equal<X>(b.c.k0, first) && copies_equal<X>(b.c.k1, first);
  } else {
    return copies_equal<X>(b.c.k0, first) && copies_equal<X>(b.c.k1, first) && copies_equal<X>(b.c.k2, first);
  }
}
template <class X, class U, class C>
bool copies_equal(const BCast<U, C>& b, const X*& first) {
  return copies_equal<X>(b.c, first);
}

// b with X's copies BVar<X>.
template <class X, class B>
auto unshare(const B& b) {
  if constexpr (std::is_same_v<B, X>)
    return BVar<X>{};
  else
    return b;
}
template <class X, Fn F, class... C>
auto unshare(const BMap<F, C...>& b) {
  if constexpr (std::is_same_v<BMap<F, C...>, X>)
    return BVar<X>{};
  else if constexpr (sizeof...(C) == 1)
    return BMap<F, decltype(unshare<X>(b.c.k0))>{{unshare<X>(b.c.k0)}};
  else if constexpr (sizeof...(C) == 2)
    return BMap<F, decltype(unshare<X>(b.c.k0)), decltype(unshare<X>(b.c.k1))>{
        {unshare<X>(b.c.k0), unshare<X>(b.c.k1)}};
  else
    return BMap<F, decltype(unshare<X>(b.c.k0)), decltype(unshare<X>(b.c.k1)), decltype(unshare<X>(b.c.k2))>{
        {unshare<X>(b.c.k0), unshare<X>(b.c.k1), unshare<X>(b.c.k2)}};
}
template <class X, class U, class C>
auto unshare(const BCast<U, C>& b) {
  return BCast<U, decltype(unshare<X>(b.c))>{unshare<X>(b.c)};
}

template <class B>
struct is_bvar : std::false_type {};
template <class X>
struct is_bvar<BVar<X>> : std::true_type {};
template <class B>
inline constexpr bool has_var = mp::mp_any_of<typename bnodes<B>::type, is_bvar>::value;

// The body at one element: BVar's copies the value v; subtrees without one by reference (a pointer
// or a constant copied).
template <class B, class V>
METAGRAD_INLINE auto subst(const B& b, const V&) {
  if constexpr (std::is_empty_v<B> || sizeof(B) <= sizeof(void*))
    return b;
  else
    return BRef<B>{&b};
}
template <class X, class V>
METAGRAD_INLINE BVal<V> subst(const BVar<X>&, const V& v) {
  return {v};
}
template <Fn F, class... C, class V>
METAGRAD_INLINE auto subst(const BMap<F, C...>& b, const V& v) {
  if constexpr (!has_var<BMap<F, C...>>)
    return BRef<BMap<F, C...>>{&b};
  else if constexpr (sizeof...(C) == 1)
    return BMap<F, decltype(subst(b.c.k0, v))>{{subst(b.c.k0, v)}};
  else if constexpr (sizeof...(C) == 2)
    return BMap<F, decltype(subst(b.c.k0, v)), decltype(subst(b.c.k1, v))>{
        {subst(b.c.k0, v), subst(b.c.k1, v)}};
  else
    return BMap<F, decltype(subst(b.c.k0, v)), decltype(subst(b.c.k1, v)), decltype(subst(b.c.k2, v))>{
        {subst(b.c.k0, v), subst(b.c.k1, v), subst(b.c.k2, v)}};
}
template <class U, class C, class V>
METAGRAD_INLINE auto subst(const BCast<U, C>& b, const V& v) {
  if constexpr (!has_var<BCast<U, C>>)
    return BRef<BCast<U, C>>{&b};
  else
    return BCast<U, decltype(subst(b.c, v))>{subst(b.c, v)};
}

// What the loops ask of a node, for the three new ones.
template <class X>
struct vector_form<BVar<X>> : vector_form<X> {};
template <class X, class B>
struct vector_form<BLet<X, B>> : std::bool_constant<vector_form<X>::value && vector_form<B>::value> {};
template <class X, class B>
struct vector_math<BLet<X, B>> : std::bool_constant<vector_math<X>::value || vector_math<B>::value> {};
template <std::size_t R, class X>
struct vector_rows<R, BVar<X>> : vector_rows<R, X> {};
template <std::size_t R, class X, class B>
struct vector_rows<R, BLet<X, B>> : std::bool_constant<vector_rows<R, X>::value && vector_rows<R, B>::value> {
};

template <std::size_t R, class V>
METAGRAD_INLINE V get(const BVal<V>& b, const index_t*, index_t) {
  return b.v;
}
template <class V>
METAGRAD_INLINE V vget(const BVal<V>& b, index_t) {
  return b.v;
}
template <index_t L, class V>
METAGRAD_INLINE V vget_n(const BVal<V>& b, index_t) {
  return b.v;
}
template <std::size_t R, class V>
METAGRAD_INLINE V vget_row(const BVal<V>& b, const index_t*, index_t) {
  return b.v;
}
template <std::size_t R, class B>
METAGRAD_INLINE auto get(const BRef<B>& b, const index_t* pos, index_t j) {
  return get<R>(*b.p, pos, j);
}
template <class B>
METAGRAD_INLINE auto vget(const BRef<B>& b, index_t j) {
  return vget(*b.p, j);
}
template <index_t L, class B>
METAGRAD_INLINE auto vget_n(const BRef<B>& b, index_t j) {
  return vget_n<L>(*b.p, j);
}
template <std::size_t R, class B>
METAGRAD_INLINE auto vget_row(const BRef<B>& b, const index_t* pos, index_t j) {
  return vget_row<R>(*b.p, pos, j);
}
template <std::size_t R, class X, class B>
METAGRAD_INLINE auto get(const BLet<X, B>& b, const index_t* pos, index_t j) {
  const auto v = get<R>(b.x, pos, j);
  return get<R>(subst(b.body, v), pos, j);
}
template <class X, class B>
METAGRAD_INLINE auto vget(const BLet<X, B>& b, index_t j) {
  const auto v = vget(b.x, j);
  return vget(subst(b.body, v), j);
}
template <index_t L, class X, class B>
METAGRAD_INLINE auto vget_n(const BLet<X, B>& b, index_t j) {
  const auto v = vget_n<L>(b.x, j);
  return vget_n<L>(subst(b.body, v), j);
}
template <std::size_t R, class X, class B>
METAGRAD_INLINE auto vget_row(const BLet<X, B>& b, const index_t* pos, index_t j) {
  const auto v = vget_row<R>(b.x, pos, j);
  return vget_row<R>(subst(b.body, v), pos, j);
}

// f(b as a let) where b holds equal copies of an expensive subtree, else f(b).
template <class B, class F>
METAGRAD_INLINE void with_shared(const B& b, F&& f) {
  using X = typename shared_subtree<B>::type;
  if constexpr (!std::is_void_v<X>) {
    const X* first = nullptr;
    if (copies_equal<X>(b, first)) return f(BLet<X, decltype(unshare<X>(b))>{*first, unshare<X>(b)});
  }
  f(b);
}

// A loop that copies one tensor (through a view).
template <class B>
struct plain_copy : std::false_type {};
template <class T, View V>
struct plain_copy<BLeaf<T, V>> : std::true_type {};
template <class T, View V, index_t N>
struct plain_copy<BOwn<T, V, N>> : std::true_type {};

inline constexpr index_t kChunk = 2048;  // elements per chunk of an in-place loop (a buffer in L1)

// Elements [lo, hi) (one axis) or outer rows [lo, hi) of the loop over I, written from dst on (where
// element or row lo goes). dst is restrict: the expression never reads it (the compiler then needs
// no overlap checks).
template <Dims I, class B, class T>
METAGRAD_INLINE void loop(const B& b, T* __restrict dst, index_t lo, index_t hi) {
  constexpr std::size_t R = I.size();
  constexpr index_t n = I[R - 1];
  if constexpr (R == 1 && vector_form<B>::value) {
    constexpr index_t W = simd<T>::W;
    constexpr bool big = n * sizeof(T) >= (std::size_t{32} << 20);  // an L3 of its own: stream it
    if constexpr (vector_math<B>::value || big) {
      index_t body = lo + (hi - lo) / W * W;
      if (big && hi - lo > kChunk && reinterpret_cast<std::uintptr_t>(dst) % kVectorBytes == 0) {
        for (index_t j = lo; j < body; j += W) stream(dst + (j - lo), vget(b, j));
        stream_fence();
      } else {
        for (index_t j = lo; j < body; j += W) simd<T>::store(dst + (j - lo), vget(b, j));
      }
      for (index_t j = body; j < hi; ++j) dst[j - lo] = get<1>(b, nullptr, j);
      return;
    }
  }
  if constexpr (R == 1) {
    // Left a loop for the vectoriser (which turns selects such as relu's into blends): a small
    // one unrolled first, inside a caller's loop, leaves branches the straight-line vectoriser cannot.
#pragma GCC unroll 1
    for (index_t j = lo; j < hi; ++j) dst[j - lo] = get<1>(b, nullptr, j);
  } else if constexpr (std::is_floating_point_v<T> && vector_rows<R, B>::value &&
                       (vector_math<B>::value || plain_copy<B>::value)) {
    // (only with expensive functions, as the 1-D loop: the compiler vectorises cheap rows alone; and
    // for a plain copy, short rows of which g++ makes a memmove call each: a permuted head's 32 floats)
    constexpr index_t W = simd<T>::W, body = n / W * W;
    for_outer<I>(lo, hi, [&](index_t o, const index_t* pos) {
      T* __restrict row = dst + (o - lo) * n;
      for (index_t j = 0; j < body; j += W) simd<T>::store(row + j, vget_row<R>(b, pos, j));
      for (index_t j = body; j < n; ++j) row[j] = get<R>(b, pos, j);
    });
  } else {
    for_outer<I>(lo, hi, [&](index_t o, const index_t* pos) {
      T* __restrict row = dst + (o - lo) * n;
      for (index_t j = 0; j < n; ++j) row[j] = get<R>(b, pos, j);
    });
  }
}
// The loop as one kernel per expression, whichever callers it has. On a copy of the expression: g++
// took a store through dst as a possible write to the caller's, and reloaded each constant and
// leaf pointer every vector (GELU's backward: 64 instructions a vector, 41 on the copy).
template <Dims I, class B, class T>
METAGRAD_NOINLINE void assign_range(const B& b, T* __restrict dst, index_t lo, index_t hi) {
  const B local = b;
  loop<I>(local, dst, lo, hi);
}
// The whole loop into out, split across threads when it is big enough (parallel.hpp). In place:
// the expression reads out, each element at its own position only, and a row of the loop fits in
// kChunk; the kernel then writes a small buffer per chunk, copied to out after it, so no element is
// read and written through different pointers (what restrict forbids) and later chunks still read
// old values.
template <Dims I, class B, class T>
void run_assign(const B& b, T* out, bool in_place) {
  constexpr std::size_t R = I.size();
  constexpr index_t range = R == 1 ? I[0] : outer_count<I>;
  constexpr index_t unit = R == 1 ? 1 : I[R - 1];  // elements per position
  auto part = [&](index_t lo, index_t hi) {
    if (!in_place) return assign_range<I>(b, out + lo * unit, lo, hi);
    // On the stack: a worker thread allocates nothing (a row longer than this never comes here).
    constexpr index_t step = std::max<index_t>(1, kChunk / unit);
    alignas(kVectorBytes) T buf[kChunk];
    for (index_t c = lo; c < hi; c += step) {
      index_t e = std::min(hi, c + step);
      assign_range<I>(b, buf, c, e);
      std::copy(buf, buf + (e - c) * unit, out + c * unit);
    }
  };
  if constexpr (prod(I) >= kParallelElements) {
    constexpr index_t align = R == 1 ? kVectorBytes / static_cast<index_t>(sizeof(T)) : 1;
    constexpr index_t grain = std::max<index_t>(1, kParallelElements / 2 / (prod(I) / range));
    parallel_for(range, align, grain, part);
  } else {
    part(0, range);
  }
}

// Does e read the tensor at p?
template <class E>
bool reads(const E& e, const void* p) {
  if constexpr (kind<E>::leaf)
    return e.op.data == p;
  else if constexpr (E::arity == 0)  // a constant
    return false;
  else if constexpr (E::arity == 1)  // no lambda per node type
    return reads(e.kids.k0, p);
  else if constexpr (E::arity == 2)
    return reads(e.kids.k0, p) || reads(e.kids.k1, p);
  else
    return reads(e.kids.k0, p) || reads(e.kids.k1, p) || reads(e.kids.k2, p);
}

// Can e be evaluated with neither the arena nor the threads? Every node small, and every
// materialised op one whose small case takes neither (small_op, specialised by reduce.hpp and
// matmul.hpp).
template <class Op>
struct small_op : std::false_type {};
template <class E>
constexpr bool small_tree();
template <class L>
struct small_trees;
template <class... C>
struct small_trees<mp::mp_list<C...>> : std::bool_constant<(small_tree<C>() && ...)> {};
template <class E>
constexpr bool small_tree() {
  if constexpr (!inline_size<typename E::value_type>(E::shape::size))
    return false;
  else if constexpr (kind<E>::leaf || kind<E>::constant)
    return true;
  else if constexpr (materialised<E> && !small_op<typename E::op_type>::value)
    return false;
  else
    return small_trees<typename E::children_types>::value;
}

// A small expression: its loop inline, straight into out where no leaf reads it, else into a local
// array (so the destination, read through any view, is read whole before it is written) copied to
// out after.
template <class E>
METAGRAD_INLINE void assign_small(typename E::value_type* out, const E& e) {
  using T = typename E::value_type;
  using S = typename E::shape;
  if constexpr (materialised<E>)  // a small product or reduction straight into out, when it may be
    if (!reads(e, out)) return Materialise<typename E::op_type>::run(out, e);
  constexpr Dims I = iteration_shape(S::dims, plan<mp::mp_list<>, E>::views);
  constexpr index_t range = I.size() == 1 ? I[0] : outer_count<I>;
  Ctx ctx{out};
  auto b = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
  // Written out as vectors, straight into out even where a leaf reads it in place (ctx.alias is then
  // false at compile time where every leaf is contiguous: no check is left).
  constexpr bool vectors = I.size() == 1 && std::is_floating_point_v<T> && small_vectors<decltype(b)>;
  if constexpr (vectors)
    if (!ctx.alias) return vector_loop<range>(b, out);
  alignas(kVectorBytes) T tmp[S::size ? S::size : 1] = {};
  if constexpr (vectors) {
    vector_loop<range>(b, tmp);
  } else {
    if (!ctx.reads_out) return loop<I>(b, out, 0, range);
    loop<I>(b, tmp, 0, range);
  }
  std::copy(tmp, tmp + S::size, out);
}

// Which addend of a sum Materialise adds in its own stores (adds_into), or -1: the other is written
// into out first, then, say, the GEMM adds the product in its tile stores (a linear layer's bias, a
// gradient added to one there) with no product in a temporary and no pass to add the two.
template <class E>
inline constexpr int added_into = -1;
template <class X, class Y>
inline constexpr int added_into<Expr<op::Map<Fn::ADD>, X, Y>> = adds_into<Y>   ? 1
                                                                : adds_into<X> ? 0
                                                                               : -1;

template <class E>
void assign_big(typename E::value_type* out, const E& e) {
  using T = typename E::value_type;
  using S = typename E::shape;
  Arena::Scope scope;
  if constexpr (added_into<E> >= 0) {
    const auto& p = std::get<added_into<E>>(std::tie(e.kids.k0, e.kids.k1));
    const auto& rest = std::get<1 - added_into<E>>(std::tie(e.kids.k0, e.kids.k1));
    // (a product that reads out: the same two steps into a temporary, copied after, rather than a
    // third way for the compiler to instantiate)
    T* dst = reads(p, out) ? Arena::local().alloc<T>(S::size) : out;
    using R = std::remove_cvref_t<decltype(rest)>;
    if constexpr (kind<R>::leaf) {  // (out += p: nothing to write first; else a plain copy, no loop)
      if (rest.op.data != dst) std::copy(rest.op.data, rest.op.data + S::size, dst);
    } else {
      assign(dst, rest);
    }
    Materialise<typename std::remove_cvref_t<decltype(p)>::op_type>::add(dst, p);
    if (dst != out) std::copy(dst, dst + S::size, out);
  } else {
    if constexpr (materialised<E>)  // a matmul or reduction computed straight into out, when it may be
      if (!reads(e, out)) return Materialise<typename E::op_type>::run(out, e);
    constexpr Dims I = iteration_shape(S::dims, plan<mp::mp_list<>, E>::views);
    Ctx ctx{out};
    auto bound = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
    constexpr bool row_fits = I.size() == 1 || I[I.size() - 1] <= kChunk;
    with_shared(bound, [&](const auto& b) {
      if (!ctx.alias && (!ctx.reads_out || row_fits)) return run_assign<I>(b, out, ctx.reads_out);
      T* tmp = Arena::local().alloc<T>(S::size);  // out is read through another view (or in long rows)
      run_assign<I>(b, tmp, false);
      std::copy(tmp, tmp + S::size, out);
    });
  }
}

// e written into dst through D, a view of e's shape (strides and an offset: a region of a larger
// buffer), or added to what is there: one loop, no temporary (a head's gradient into its place in a
// packed q, k, v's). e must not read dst.
template <View D, class E>
void assign_view(typename E::value_type* dst, const E& e, bool add) {
  using T = typename E::value_type;
  using S = typename E::shape;
  Arena::Scope scope;
  using Plan = plan<mp::mp_list<>, E>;
  constexpr Dims I = iteration_shape(S::dims, concat<Plan::count + 1>(Plan::views, Views<1>{D}));
  constexpr View DI = *D.reshape(I);
  constexpr std::size_t R = I.size();
  constexpr index_t n = I[R - 1], s = DI.strides[R - 1];
  Ctx ctx{dst};
  auto b = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
  auto part = [&](index_t lo, index_t hi) {
    for_outer<I>(lo, hi, [&](index_t, const index_t* pos) {
      T* __restrict row = dst + offset_of<DI, R>(pos, 0);
      if (add)
        for (index_t j = 0; j < n; ++j) row[j * s] += get<R>(b, pos, j);
      else
        for (index_t j = 0; j < n; ++j) row[j * s] = get<R>(b, pos, j);
    });
  };
  constexpr index_t range = outer_count<I>;
  if constexpr (prod(I) >= kParallelElements)
    parallel_for(range, 1, std::max<index_t>(1, kParallelElements / 2 / n), part);
  else
    part(0, range);
}

template <class E>
struct root_reshape : std::false_type {};
template <Dims D, class C>
struct root_reshape<Expr<op::Move<MovementOps::RESHAPE, D>, C>> : std::true_type {};

template <class E>
METAGRAD_INLINE void assign(typename E::value_type* out, const E& e) {
  if constexpr (root_reshape<E>::value)  // the same values in the same order: the child into out (a
    assign(out, e.kids.k0);              // reshape of a permuted product was two copies, not one)
  else if constexpr (small_tree<E>())
    assign_small(out, e);
  else
    assign_big(out, e);
}

}  // namespace metagrad::fixed::detail
