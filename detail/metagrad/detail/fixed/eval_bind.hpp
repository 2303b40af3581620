#pragma once
// Inline evaluation (eval.hpp), phase 3, at run time: the Expr bound to a tree of B* nodes holding
// only pointers and constants, and how the loop reads an element of each.
#include "metagrad/detail/fixed/eval_plan.hpp"
#include "metagrad/detail/fixed/inline.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

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

// The bound tree as an out-of-line kernel takes it: a small materialised node's values (BOwn) read
// through a pointer to them, as any leaf. A kernel then depends on its leaves' views alone, not on
// which of them were materialised nodes: fixed::grad's forward, whose leaves are values it computed,
// shares its kernels with the same forward evaluated by the user. b must outlive the result.
template <class B>
METAGRAD_INLINE B by_leaves(const B& b) {
  return b;
}
template <class T, View V, index_t N>
METAGRAD_INLINE BLeaf<T, V> by_leaves(const BOwn<T, V, N>& b) {
  return {b.v};
}
template <Fn F, class A>
METAGRAD_INLINE auto by_leaves(const BMap<F, A>& b) {
  return BMap<F, decltype(by_leaves(b.c.k0))>{{by_leaves(b.c.k0)}};
}
template <Fn F, class A, class B>
METAGRAD_INLINE auto by_leaves(const BMap<F, A, B>& b) {
  return BMap<F, decltype(by_leaves(b.c.k0)), decltype(by_leaves(b.c.k1))>{
      {by_leaves(b.c.k0), by_leaves(b.c.k1)}};
}
template <Fn F, class A, class B, class C>
METAGRAD_INLINE auto by_leaves(const BMap<F, A, B, C>& b) {
  return BMap<F, decltype(by_leaves(b.c.k0)), decltype(by_leaves(b.c.k1)), decltype(by_leaves(b.c.k2))>{
      {by_leaves(b.c.k0), by_leaves(b.c.k1), by_leaves(b.c.k2)}};
}
template <class U, class C>
METAGRAD_INLINE auto by_leaves(const BCast<U, C>& b) {
  return BCast<U, decltype(by_leaves(b.c))>{by_leaves(b.c)};
}
template <View M, class T, class C>
METAGRAD_INLINE auto by_leaves(const BGuard<M, T, C>& b) {
  return BGuard<M, T, decltype(by_leaves(b.c))>{by_leaves(b.c)};
}
template <class T, class C>
METAGRAD_INLINE auto by_leaves(const BGate<T, C>& b) {
  return BGate<T, decltype(by_leaves(b.c))>{b.on, by_leaves(b.c)};
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

}  // namespace metagrad::fixed::detail
