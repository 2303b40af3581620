#pragma once
// The internals of fixed/reduce.hpp: the Reduce node's materialisation (independent lanes along
// the innermost axis, split across threads when large) and the reduce op with its shape check.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "metagrad/detail/fixed/cpu.hpp"
#include "metagrad/fixed/eval.hpp"
#include "metagrad/fixed/movement.hpp"

namespace metagrad::fixed::detail {
template <ReduceOps R, class T>
constexpr T reduce_identity() {
  if constexpr (R == ReduceOps::SUM)
    return T(0);
  else if constexpr (std::numeric_limits<T>::has_infinity)
    return -std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::lowest();
}
template <ReduceOps R, class T>
METAGRAD_INLINE T combine(T a, T b) {
  if constexpr (R == ReduceOps::SUM)
    return a + b;
  else
    return a < b || b != b ? b : a;  // NaN wins, as on the dynamic path
}

template <class T>
inline constexpr index_t kLanes = 256 / sizeof(T);  // 256 bytes of accumulators: 4 AVX-512 registers
// At most this many terms go into one float accumulator in a row (as on the dynamic path's devices,
// runtime/codegen/linearizer.cpp): one accumulator stops growing at 2^24 ones and drifts well
// before, so long sums go in levels, each passing its sum up after kFanIn terms.
inline constexpr index_t kFanIn = 16;

// Per-lane sums in levels: level k holds the sum of at most kFanIn blocks of level k - 1 (level 0:
// of blocks of kFanIn trips). 8 levels reach 2^40 elements before the last level grows past kFanIn.
template <ReduceOps R, class T, index_t Lanes>
struct LaneLevels {
  static constexpr int kLevels = 8;
  T level[kLevels][Lanes];
  int count[kLevels] = {};
  int used = 1;  // levels in use: a level is set when the one below first passes its sum up
  METAGRAD_INLINE LaneLevels() {
    for (index_t i = 0; i < Lanes; ++i) level[0][i] = reduce_identity<R, T>();
  }
  METAGRAD_INLINE void push(const T* block) {
    for (index_t i = 0; i < Lanes; ++i) level[0][i] = combine<R>(level[0][i], block[i]);
    for (int k = 0; k + 1 < kLevels && ++count[k] == kFanIn; ++k) {
      if (k + 1 == used)
        for (index_t i = 0; i < Lanes; ++i) level[k + 1][i] = level[k][i];
      else
        for (index_t i = 0; i < Lanes; ++i) level[k + 1][i] = combine<R>(level[k + 1][i], level[k][i]);
      for (index_t i = 0; i < Lanes; ++i) level[k][i] = reduce_identity<R, T>();
      used = std::max(used, k + 2), count[k] = 0;
    }
  }
  // The lanes' totals, the small levels first.
  METAGRAD_INLINE void total(T* out) const {
    for (index_t i = 0; i < Lanes; ++i) out[i] = level[0][i];
    for (int k = 1; k < used; ++k)
      for (index_t i = 0; i < Lanes; ++i) out[i] = combine<R>(out[i], level[k][i]);
  }
};

// combine on whole vectors, lane by lane as combine does.
template <ReduceOps R, class V>
METAGRAD_INLINE V vcombine(V a, V b) {
  if constexpr (R == ReduceOps::SUM)
    return a + b;
  else
    return ((a < b) | (b != b)) ? b : a;
}
// A row read per vector: every leaf along the row at stride 1 or 0 and every function with a vector
// form (eval.hpp's vector_rows); the exp of a softmax's sum then runs 16 lanes at a time.
template <std::size_t Rank, class B, class T>
inline constexpr bool vector_reduce = std::is_floating_point_v<T>&& vector_rows<Rank, B>::value;

// acc[l] = combine(acc[l], element t + l) for the kLanes lanes: per vector where vector_reduce, each
// lane taking the same terms in the same order as lane by lane (the same sums, but for the functions'
// vector forms).
template <ReduceOps R, std::size_t Rank, class B, class T>
METAGRAD_INLINE void add_lanes(T* acc, const B& b, const index_t* pos, index_t t) {
  constexpr index_t lanes = kLanes<T>;
  if constexpr (vector_reduce<Rank, B, T>) {
    constexpr index_t W = simd<T>::W;
#pragma GCC unroll 16
    for (index_t v = 0; v < lanes; v += W)
      simd<T>::store(acc + v, vcombine<R>(simd<T>::load(acc + v), vget_row<Rank>(b, pos, t + v)));
  } else {
#pragma GCC unroll 64
    for (index_t l = 0; l < lanes; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, t + l));
  }
}

// Combines elements [lo, hi) of the innermost axis at pos (lo a multiple of kLanes) in kLanes
// independent lanes, each in levels (LaneLevels), then the lanes pairwise. A range past the L2 is
// read as two interleaved streams (its halves), each into its own lanes: one core then keeps more
// memory reads in flight (W3c: +15% over one stream, where Eigen reads one).
template <ReduceOps R, std::size_t Rank, class B>
METAGRAD_INLINE auto reduce_lanes(const B& b, const index_t* pos, index_t lo, index_t hi) {
  using T = decltype(get<Rank>(b, pos, 0));
  constexpr index_t lanes = kLanes<T>, step = lanes * kFanIn;
  LaneLevels<R, T, lanes> sums;
  T acc[lanes];
  auto clear = [](T* a) {
    for (index_t l = 0; l < lanes; ++l) a[l] = reduce_identity<R, T>();
  };
  index_t j = lo;
  if (hi - lo >= (index_t{1} << 18)) {
    const index_t half = (hi - lo) / (2 * step) * step;
    LaneLevels<R, T, lanes> sums2;
    T acc2[lanes];
    for (; j < lo + half; j += step) {
      clear(acc), clear(acc2);
      for (index_t t = j; t < j + step; t += lanes) {
        add_lanes<R, Rank>(acc, b, pos, t);
        add_lanes<R, Rank>(acc2, b, pos, t + half);
      }
      sums.push(acc), sums2.push(acc2);
    }
    j += half;
    sums2.total(acc2);
    sums.push(acc2);
  }
  for (; j + step <= hi; j += step) {
    clear(acc);
    for (index_t t = j; t < j + step; t += lanes) add_lanes<R, Rank>(acc, b, pos, t);
    sums.push(acc);
  }
  clear(acc);  // the rest: fewer than kFanIn trips
  for (; j + lanes <= hi; j += lanes) add_lanes<R, Rank>(acc, b, pos, j);
  for (index_t l = 0; j + l < hi; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, j + l));
  sums.push(acc);
  sums.total(acc);
  for (index_t w = lanes / 2; w > 0; w /= 2)
    for (index_t l = 0; l < w; ++l) acc[l] = combine<R>(acc[l], acc[l + w]);
  return acc[0];
}

// The lanes of x paired as the scalar tree pairs them (lane l with l + w, w = half the lanes down to
// 1), by halves of the register: log2(W) vector steps instead of W - 1 scalar ones.
template <ReduceOps R, class V, std::size_t... I>
METAGRAD_INLINE auto fold_halves(V x, std::index_sequence<I...>) {
  using E = std::remove_cvref_t<decltype(x[0])>;
  using H = lanes_t<E, sizeof...(I)>;
  H lo = H(__builtin_shufflevector(x, x, I...));  // the low half: no instruction
  // The high half of a 512- or 256-bit register by one extract (g++ shuffles the whole register
  // for it: vshuff32x4, vperm2f128); zero-masked, as simd.hpp's kAll.
#if defined(__AVX512F__)
  if constexpr (sizeof(V) == 64 && std::is_floating_point_v<E>)
    return vcombine<R>(lo, (H)_mm512_maskz_extractf64x4_pd(__mmask8(0xF), (__m512d)x, 1));
#endif
#if defined(__AVX__)
  if constexpr (sizeof(V) == 32 && std::is_floating_point_v<E>)
    return vcombine<R>(lo, (H)_mm256_extractf128_pd((__m256d)x, 1));
#endif
  return vcombine<R>(lo, H(__builtin_shufflevector(x, x, (I + sizeof...(I))...)));
}
template <ReduceOps R, class V>
METAGRAD_INLINE auto reduce_vector(V x) {
  constexpr std::size_t lanes = sizeof(V) / sizeof(x[0]);
  if constexpr (lanes == 2)  // lane 1 onto lane 0 by a shuffle (a scalar x[0] + x[1] became a slow hadd)
    return vcombine<R>(x, __builtin_shufflevector(x, x, 1, 0))[0];
  else
    return reduce_vector<R>(fold_halves<R>(x, std::make_index_sequence<lanes / 2>{}));
}

// Elements [Off, Off + Len) of a row of at most kLanes: its largest power-of-two part pairwise (lane l
// with l + w, w halving), per vector where vector_reduce and the part spans whole vectors, then the
// rest after it the same way (9 elements: 8 pairwise, then the ninth, as Eigen's fixed-size sums). A
// few instructions for a small tensor's row, no identity to fill in; the order is fixed by N alone.
template <ReduceOps R, std::size_t Rank, index_t Off, index_t Len, class B>
METAGRAD_INLINE auto reduce_span(const B& b, const index_t* pos) {
  using T = decltype(get<Rank>(b, pos, 0));
  constexpr index_t p2 = [] {
    index_t w = 1;
    while (w * 2 <= Len) w *= 2;
    return w;
  }();
  T head;
  if constexpr (vector_reduce<Rank, B, T> && p2 >= simd<T>::W) {
    constexpr index_t W = simd<T>::W;
    typename simd<T>::V x[p2 / W];
#pragma GCC unroll 8
    for (index_t v = 0; v < p2 / W; ++v) x[v] = vget_row<Rank>(b, pos, Off + v * W);
#pragma GCC unroll 8
    for (index_t w = p2 / W / 2; w > 0; w /= 2)
#pragma GCC unroll 8
      for (index_t v = 0; v < w; ++v) x[v] = vcombine<R>(x[v], x[v + w]);
    head = reduce_vector<R>(x[0]);
  } else {
    T acc[p2];
#pragma GCC unroll 64
    for (index_t l = 0; l < p2; ++l) acc[l] = get<Rank>(b, pos, Off + l);
    if constexpr (std::is_floating_point_v<T> && p2 * sizeof(T) >= 16 && p2 <= simd<T>::W) {
      // One register narrower than the ISA's (4 or 8 floats), folded by halves: the same pairs in
      // log2(p2) vector steps rather than p2 - 1 scalar ones (a 3x3 sum as Eigen's Matrix3f). The
      // first fold from two loads of half width where those are whole registers (no lane shuffle).
      if constexpr (p2 * sizeof(T) >= 32) {
        lanes_t<T, p2 / 2> lo, hi;
        std::memcpy(&lo, acc, sizeof lo);
        std::memcpy(&hi, acc + p2 / 2, sizeof hi);
        head = reduce_vector<R>(vcombine<R>(lo, hi));
      } else {
        lanes_t<T, p2> x;
        std::memcpy(&x, acc, sizeof x);
        head = reduce_vector<R>(x);
      }
    } else {
#pragma GCC unroll 16
      for (index_t w = p2 / 2; w > 0; w /= 2)
#pragma GCC unroll 64
        for (index_t l = 0; l < w; ++l) acc[l] = combine<R>(acc[l], acc[l + w]);
      head = acc[0];
    }
  }
  if constexpr (p2 == Len)
    return head;
  else
    return combine<R>(head, reduce_span<R, Rank, Off + p2, Len - p2>(b, pos));
}
template <ReduceOps R, std::size_t Rank, index_t N, class B>
METAGRAD_INLINE auto reduce_few(const B& b, const index_t* pos) {
  return reduce_span<R, Rank, 0, N>(b, pos);
}
// A row of kLanes to kLanes * kFanIn elements (a LayerNorm's of 128 or 512): reduce_lanes's sums
// (the lanes in one level, then pairwise) without its levels, which cost more than such a row; the
// first block taken as it is (no identity), the pairs by halves of registers where the lanes are
// vectors.
template <ReduceOps R, std::size_t Rank, index_t N, class B>
METAGRAD_INLINE auto reduce_short(const B& b, const index_t* pos) {
  using T = decltype(get<Rank>(b, pos, 0));
  constexpr index_t lanes = kLanes<T>;
  T acc[lanes];
  if constexpr (vector_reduce<Rank, B, T>) {
    constexpr index_t W = simd<T>::W;
#pragma GCC unroll 16
    for (index_t v = 0; v < lanes; v += W) simd<T>::store(acc + v, vget_row<Rank>(b, pos, v));
  } else {
#pragma GCC unroll 64
    for (index_t l = 0; l < lanes; ++l) acc[l] = get<Rank>(b, pos, l);
  }
  index_t j = lanes;
#pragma GCC unroll 16
  for (; j + lanes <= N; j += lanes) add_lanes<R, Rank>(acc, b, pos, j);
  for (index_t l = 0; j + l < N; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, j + l));
  if constexpr (std::is_floating_point_v<T> && lanes % simd<T>::W == 0) {
    constexpr index_t W = simd<T>::W;
    typename simd<T>::V x[lanes / W];
#pragma GCC unroll 16
    for (index_t v = 0; v < lanes / W; ++v) x[v] = simd<T>::load(acc + v * W);
#pragma GCC unroll 8
    for (index_t w = lanes / W / 2; w > 0; w /= 2)
#pragma GCC unroll 8
      for (index_t v = 0; v < w; ++v) x[v] = vcombine<R>(x[v], x[v + w]);
    return reduce_vector<R>(x[0]);
  } else {
    for (index_t w = lanes / 2; w > 0; w /= 2)
      for (index_t l = 0; l < w; ++l) acc[l] = combine<R>(acc[l], acc[l + w]);
    return acc[0];
  }
}
template <ReduceOps R, std::size_t Rank, index_t N, class B>
METAGRAD_INLINE auto reduce_row(const B& b, const index_t* pos) {
  constexpr index_t lanes = kLanes<decltype(get<Rank>(b, pos, 0))>;
  if constexpr (N <= lanes)
    return reduce_few<R, Rank, N>(b, pos);
  else if constexpr (N < lanes * kFanIn)
    return reduce_short<R, Rank, N>(b, pos);
  else
    return reduce_lanes<R, Rank>(b, pos, 0, N);
}

// A sum over outer positions [lo, hi) that all meet in the same `width` outputs (at stride `stride`
// in dst): in halves, each half into its own scratch row and then added, down to runs of kFanIn
// positions that `add(lo, hi, row)` adds in order; so no output takes more than kFanIn terms in a
// row. `scratch` holds a row per level of halving.
template <class T, class Add>
void sum_halves(T* dst, index_t stride, index_t width, index_t lo, index_t hi, T* scratch, Add& add) {
  if (hi - lo <= kFanIn) return add(lo, hi, dst, stride);
  index_t mid = lo + (hi - lo) / 2;
  sum_halves(dst, stride, width, lo, mid, scratch + width, add);
  std::fill(scratch, scratch + width, T(0));
  sum_halves(scratch, index_t{1}, width, mid, hi, scratch + width, add);
  for (index_t j = 0; j < width; ++j) dst[j * stride] += scratch[j];
}
// Levels of halving for n positions, and the scratch they need.
constexpr index_t halving_levels(index_t n) {
  index_t k = 1;
  for (; n > kFanIn; n = (n + 1) / 2) ++k;
  return k;
}

// How Materialise<Reduce> walks C into the output shape S, and fixed::describe with it: the
// iteration shape I, the output's view ov over it, and for sums whose outputs each take more than
// kFanIn outer positions (`halves`) an order (the reduced outer axes after the kept ones) in which
// each output's positions are one run of `each`, added in halves.
template <ReduceOps R, class S, class C>
struct ReduceLoop {
  static constexpr Dims in = C::shape::dims;
  static constexpr View out_view = View(S::dims).expand(in);  // input position -> output index
  static constexpr Dims I0 = iteration_shape(
      in, concat<plan<mp::mp_list<>, C>::count + 1>(plan<mp::mp_list<>, C>::views, Views<1>{out_view}));
  static constexpr std::size_t rank = I0.size();
  static constexpr index_t n = I0[rank - 1];
  static constexpr View ov0 = *out_view.reshape(I0);
  static constexpr Dims P = [] {
    Dims p;
    for (bool reduced : {false, true})
      for (std::size_t d = 0; d + 1 < rank; ++d)
        if ((ov0.strides[d] == 0) == reduced) p.push_back(static_cast<index_t>(d));
    p.push_back(static_cast<index_t>(rank - 1));
    return p;
  }();
  static constexpr index_t each = [] {
    index_t k = 1;
    for (std::size_t d = 0; d + 1 < rank; ++d) k *= ov0.strides[d] == 0 ? ov0.shape[d] : 1;
    return k;
  }();
  static constexpr bool halves = R == ReduceOps::SUM && each > kFanIn;
  static constexpr bool permuted = halves && [] {
    for (std::size_t d = 0; d < P.size(); ++d)
      if (P[d] != static_cast<index_t>(d)) return true;
    return false;
  }();
  static constexpr Dims I = permuted ? View(I0).permute(P).shape : I0;
  static constexpr View ov = permuted ? ov0.permute(P) : ov0;
  static constexpr bool along_rows = ov.strides[rank - 1] == 0 && n > 1;  // the innermost axis reduced
  // Sums in halves of input rows into rows of outputs: scratch rows for every column, on the stack
  // up to 1024 elements, else in the arena.
  static constexpr index_t scratch = halves && !along_rows ? halving_levels(each) * n : 0;
  static constexpr bool scratch_in_arena = scratch > 1024;
  using Moves =
      std::conditional_t<permuted,
                         mp::mp_list<op::Move<MovementOps::RESHAPE, I0>, op::Move<MovementOps::PERMUTE, P>>,
                         mp::mp_list<op::Move<MovementOps::RESHAPE, I0>>>;
};

// A small reduction's input is small too (eval.hpp's small_tree): no threads; scratch rows (past kFanIn
// rows into an output) on the stack.
template <ReduceOps R, Dims Axes>
struct small_op<op::Reduce<R, Axes>> : std::true_type {};

// A reduction's loops over its bound input b (eval_bind.hpp), by the kernel's shape alone: the op, the
// iteration shape I, the output's view ov over it, the input positions per output (each), whether
// sums go in halves, the output's size and whether the threads share it. Expressions of different
// types that bind alike (a loss's forward, and fixed::grad's forward over the values it computed)
// then share one kernel.
template <ReduceOps R, Dims I, View ov, index_t each, bool halves, index_t out_size, bool par, class B,
          class T>
METAGRAD_INLINE void reduce_loops(T* out, const B& b) {
  constexpr std::size_t rank = I.size();
  constexpr index_t n = I[rank - 1];
  constexpr bool along_rows = ov.strides[rank - 1] == 0 && n > 1;  // the innermost axis reduced
  constexpr index_t scratch_size = halves && !along_rows ? halving_levels(each) * n : 0;
  constexpr bool scratch_in_arena = scratch_size > 1024;
  constexpr index_t outer = outer_count<I>, outputs = outer / (each ? each : 1);
  // Each output one row's reduction (only the innermost axis reduced, one thread per row): written
  // once, with no identity to fill in and combine with first (most of a small sum's work).
  constexpr bool one_row_each = along_rows && !halves && each == 1 && !(par && outer == 1);
  if constexpr (!one_row_each) std::fill(out, out + out_size, reduce_identity<R, T>());
  // The output that outer position o (of I) adds into.
  auto output_at = [&](index_t o) {
    index_t at = 0;
    for_outer<I>(o, o + 1, [&](index_t, const index_t* pos) { at = offset_of<ov, rank>(pos, 0); });
    return at;
  };
  if constexpr (along_rows) {  // along the innermost axis: lanes, then one sum
    auto rows = [&](index_t lo, index_t hi) {
      for_outer<I>(lo, hi, [&](index_t, const index_t* pos) {
        T& o = out[offset_of<ov, rank>(pos, 0)];
        if constexpr (one_row_each)
          o = reduce_row<R, rank, n>(b, pos);
        else
          o = combine<R>(o, reduce_row<R, rank, n>(b, pos));
      });
    };
    if constexpr (halves) {  // many row sums meet in each output
      auto add = [&](index_t lo, index_t hi, T* dst, index_t) {
        for_outer<I>(lo, hi, [&](index_t, const index_t* pos) { *dst += reduce_row<R, rank, n>(b, pos); });
      };
      auto sums = [&](index_t lo, index_t hi) {
        T scratch[halving_levels(each)];
        for (index_t k = lo; k < hi; ++k)
          sum_halves(out + output_at(k * each), 1, 1, k * each, (k + 1) * each, scratch, add);
      };
      if constexpr (par && outputs > 1)
        parallel_for(outputs, 1, std::max<index_t>(1, kParallelElements / 2 / (each * n)), sums);
      else
        sums(0, outputs);
    } else if constexpr (par && outer == 1) {  // one output: a partial per thread, combined in order
      T part[kMaxThreads];
      int parts = std::min(kMaxThreads, parts_for(n, kParallelElements / 2));
      parallel_parts(parts, [&](int p, int np) {
        auto cut = [&](int q) { return q == np ? n : n * q / np / kLanes<T> * kLanes<T>; };
        const index_t origin[rank] = {};
        part[p] = reduce_lanes<R, rank>(b, origin, cut(p), cut(p + 1));
      });
      T acc = part[0];
      for (int p = 1; p < parts; ++p) acc = combine<R>(acc, part[p]);
      out[0] = combine<R>(out[0], acc);
    } else if constexpr (par && each == 1 && outer > 1) {  // output rows
      parallel_for(outer, 1, std::max<index_t>(1, kParallelElements / 2 / n), rows);
    } else {
      rows(0, outer);
    }
  } else {  // the innermost axis is kept: a vector of outputs accumulates each input row
    auto cols = [&](index_t lo, index_t hi) {
      for_outer<I>([&](index_t, const index_t* pos) {
        T* row = out + offset_of<ov, rank>(pos, 0);
        for (index_t j = lo; j < hi; ++j)
          row[j * ov.strides[rank - 1]] = combine<R>(row[j * ov.strides[rank - 1]], get<rank>(b, pos, j));
      });
    };
    if constexpr (halves) {  // each output row adds many input rows: in halves, a run of columns at a time
      constexpr index_t s = ov.strides[rank - 1], levels = halving_levels(each);
      // Scratch rows for every column, taken here: a thread of the pool may first get columns
      // after the warm-up, and its own arena would then allocate.
      Arena::Scope scope;
      T on_stack[scratch_in_arena ? 1 : scratch_size];
      T* scratch =
          scratch_in_arena ? Arena::local().alloc<T>(static_cast<std::size_t>(scratch_size)) : on_stack;
      for (index_t k = 0; k < outputs; ++k) {
        T* dst = out + output_at(k * each);
        auto col_range = [&](index_t lo, index_t hi) {
          auto add = [&](index_t from, index_t to, T* row, index_t stride) {
            for_outer<I>(from, to, [&](index_t, const index_t* pos) {
              if (stride == 1)  // the scratch rows, and a contiguous output: a loop the compiler vectorises
                for (index_t j = lo; j < hi; ++j) row[j - lo] += get<rank>(b, pos, j);
              else
                for (index_t j = lo; j < hi; ++j) row[(j - lo) * stride] += get<rank>(b, pos, j);
            });
          };
          sum_halves(dst + lo * s, s, hi - lo, k * each, (k + 1) * each, scratch + lo * levels, add);
        };
        if constexpr (par)
          parallel_for(n, kLanes<T>, std::max<index_t>(kLanes<T>, kParallelElements / 2 / each), col_range);
        else
          col_range(0, n);
      }
    } else if constexpr (par) {  // column ranges
      parallel_for(n, kLanes<T>, std::max<index_t>(kLanes<T>, kParallelElements / 2 / outer), cols);
    } else {
      cols(0, n);
    }
  }
}
// The same, one call: the bound tree copied into it, so that no store through out can alias it.
template <ReduceOps R, Dims I, View ov, index_t each, bool halves, index_t out_size, bool par, class B,
          class T>
METAGRAD_NOINLINE void reduce_kernel(T* out, const B b) {
  reduce_loops<R, I, ov, each, halves, out_size, par>(out, b);
}

template <ReduceOps R, Dims Axes>
struct Materialise<op::Reduce<R, Axes>> {
  // Inline where small (eval.hpp's small_tree); elsewhere the input bound here and the loops one
  // call of the kernel's shape (reduce_kernel).
  template <class T, class C>
  METAGRAD_INLINE static void run(T* out, const Expr<op::Reduce<R, Axes>, C>& e) {
    if constexpr (small_tree<Expr<op::Reduce<R, Axes>, C>>())
      loops<false>(out, e);
    else
      loops<true>(out, e);
  }
  template <class T, class C>
  static void call(T* out, const Expr<op::Reduce<R, Axes>, C>& e) {
    loops<true>(out, e);
  }
  template <bool Call, class T, class C>
  METAGRAD_INLINE static void loops(T* out, const Expr<op::Reduce<R, Axes>, C>& e) {
    using S = typename Expr<op::Reduce<R, Axes>, C>::shape;
    using L = ReduceLoop<R, S, C>;
    constexpr bool par = C::shape::size >= kParallelElements;
    Ctx ctx;
    auto b = bind<typename L::Moves>(e.kids.k0, ctx);
    if constexpr (Call)
      reduce_kernel<R, L::I, L::ov, L::each, L::halves, S::size, par>(out, by_leaves(b));
    else
      reduce_loops<R, L::I, L::ov, L::each, L::halves, S::size, par>(out, b);
  }
};

// The reduction of e over A... (none: every axis), with or without the reduced axes kept.
template <ReduceOps R, bool Keep, index_t... A, class E>
auto reduce(const E& e) {
  using S = typename E::shape;
  constexpr AxisSet ax = [] {
    AxisSet a = normalize_axes(Dims{A...}, S::rank);
    if constexpr (sizeof...(A) == 0)
      for (std::size_t i = 0; i < S::rank; ++i) a.axes.push_back(static_cast<index_t>(i));
    std::sort(a.axes.begin(), a.axes.end());
    return a;
  }();
  METAGRAD_FIXED_SHAPE_CHECK(ax.ok,
                             "fixed: reduce: each axis must exist and appear once (sum, max, min, mean)",
                             err::reduce, S, Args<A...>);
  if constexpr (ax.ok) {
    auto r = Expr<op::Reduce<R, ax.axes>, E>(op::Reduce<R, ax.axes>{}, e);
    if constexpr (Keep)
      return r;
    else {
      constexpr Dims kept = [](const Dims& axes) {
        Dims d;
        for (std::size_t i = 0; i < S::rank; ++i)
          if (std::find(axes.begin(), axes.end(), static_cast<index_t>(i)) == axes.end())
            d.push_back(S::dims[i]);
        return d;
      }(ax.axes);
      if constexpr (kept == decltype(r)::shape::dims)
        return r;
      else
        return move<decltype(r), MovementOps::RESHAPE, kept>(r);
    }
  } else {  // after the error: a plausible result, so that no second error follows
    return constant<typename E::value_type, S>({});
  }
}
template <class E, index_t... A>
constexpr index_t reduced_count() {
  using S = typename E::shape;
  if constexpr (sizeof...(A) == 0)
    return S::size;
  else
    return ((A < -index_t(S::rank) || A >= index_t(S::rank) ? 1 : S::dims[A < 0 ? A + S::rank : A]) * ...);
}
}  // namespace metagrad::fixed::detail
