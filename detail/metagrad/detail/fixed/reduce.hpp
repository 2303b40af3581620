#pragma once
// The internals of fixed/reduce.hpp: the Reduce node's materialisation (independent lanes along
// the innermost axis, split across threads when large) and the reduce op with its shape check.
#include <algorithm>
#include <limits>

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
// Combines elements [lo, hi) of the innermost axis at pos (lo a multiple of kLanes) in kLanes
// independent lanes, then the lanes pairwise. A range past the L2 is read as two interleaved
// streams (its halves), each into its own lanes: one core then keeps more memory reads in flight
// (W3c: +15% over one stream, where Eigen reads one).
template <ReduceOps R, std::size_t Rank, class B>
METAGRAD_INLINE auto reduce_lanes(const B& b, const index_t* pos, index_t lo, index_t hi) {
  using T = decltype(get<Rank>(b, pos, 0));
  constexpr index_t lanes = kLanes<T>;
  T acc[lanes];
  for (index_t l = 0; l < lanes; ++l) acc[l] = reduce_identity<R, T>();
  index_t j = lo;
  if (hi - lo >= (index_t{1} << 18)) {
    const index_t half = (hi - lo) / (2 * lanes) * lanes;
    T acc2[lanes];
    for (index_t l = 0; l < lanes; ++l) acc2[l] = reduce_identity<R, T>();
    for (; j < lo + half; j += lanes) {
      for (index_t l = 0; l < lanes; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, j + l));
      for (index_t l = 0; l < lanes; ++l) acc2[l] = combine<R>(acc2[l], get<Rank>(b, pos, j + half + l));
    }
    j += half;
    for (index_t l = 0; l < lanes; ++l) acc[l] = combine<R>(acc[l], acc2[l]);
  }
  for (; j + lanes <= hi; j += lanes)
    for (index_t l = 0; l < lanes; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, j + l));
  for (index_t l = 0; j + l < hi; ++l) acc[l] = combine<R>(acc[l], get<Rank>(b, pos, j + l));
  for (index_t w = lanes / 2; w > 0; w /= 2)
    for (index_t l = 0; l < w; ++l) acc[l] = combine<R>(acc[l], acc[l + w]);
  return acc[0];
}

template <ReduceOps R, Dims Axes>
struct Materialise<op::Reduce<R, Axes>> {
  template <class T, class C>
  static void run(T* out, const Expr<op::Reduce<R, Axes>, C>& e) {
    using S = typename Expr<op::Reduce<R, Axes>, C>::shape;
    constexpr Dims in = C::shape::dims;
    constexpr View out_view = View(S::dims).expand(in);  // input position -> output index
    constexpr Dims I = iteration_shape(
        in, concat<plan<mp::mp_list<>, C>::count + 1>(plan<mp::mp_list<>, C>::views, Views<1>{out_view}));
    constexpr std::size_t rank = I.size();
    constexpr index_t n = I[rank - 1];
    constexpr View ov = *out_view.reshape(I);
    std::fill(out, out + S::size, reduce_identity<R, T>());
    Ctx ctx;
    auto b = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e.kids.k0, ctx);
    constexpr index_t outer = outer_count<I>;
    constexpr bool par = C::shape::size >= kParallelElements;
    if constexpr (ov.strides[rank - 1] == 0 && n > 1) {  // along the innermost axis: lanes, then one sum
      // Does every outer position have its own output (no outer axis is reduced)?
      constexpr bool own_rows = [](const View& v) {
        for (std::size_t d = 0; d + 1 < rank; ++d)
          if (v.strides[d] == 0) return false;
        return true;
      }(ov);
      auto rows = [&](index_t lo, index_t hi) {
        for_outer<I>(lo, hi, [&](index_t, const index_t* pos) {
          T& o = out[offset_of<ov, rank>(pos, 0)];
          o = combine<R>(o, reduce_lanes<R, rank>(b, pos, 0, n));
        });
      };
      if constexpr (par && outer == 1) {  // one output: a partial per thread, combined in order
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
      } else if constexpr (par && own_rows && outer > 1) {  // output rows
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
      if constexpr (par)  // column ranges
        parallel_for(n, kLanes<T>, std::max<index_t>(kLanes<T>, kParallelElements / 2 / outer), cols);
      else
        cols(0, n);
    }
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
