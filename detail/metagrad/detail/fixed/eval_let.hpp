#pragma once
// Inline evaluation (eval.hpp), phase 3's lets: an expensive subtree the bound tree holds more than
// once, evaluated once per element.
#include <cstddef>

#include "metagrad/detail/fixed/eval_vector.hpp"
#include "metagrad/detail/fixed/inline.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

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

}  // namespace metagrad::fixed::detail
