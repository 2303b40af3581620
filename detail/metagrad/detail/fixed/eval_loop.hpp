#pragma once
// Inline evaluation (eval.hpp), phase 4: the loop nest over the iteration shape (outer axes by an
// odometer, the innermost a plain or vector loop), one kernel per expression, cut across threads.
#include <cstddef>

#include "metagrad/detail/fixed/eval_let.hpp"
#include "metagrad/detail/fixed/inline.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

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

}  // namespace metagrad::fixed::detail
