#pragma once
// Inline evaluation (eval.hpp), phase 4's vector forms: a bound tree read a vector at a time, in
// the contiguous 1-D loop, the small loop written out as registers, and along the rows of a loop.
#include <cstddef>

#include "metagrad/detail/fixed/eval_bind.hpp"
#include "metagrad/detail/fixed/inline.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

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

}  // namespace metagrad::fixed::detail
