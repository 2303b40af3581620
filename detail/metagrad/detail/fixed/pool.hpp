#pragma once
// The internals of fixed/pool.hpp: pooling windows as movement ops (tinygrad's _pool), the pooled
// shape and its check.
#include <algorithm>
#include <initializer_list>

#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/movement.hpp"
#include "metagrad/fixed/reduce.hpp"

namespace metagrad::fixed {

namespace detail {
// A movement op on e, or e itself where the op changes nothing.
template <MovementOps M, auto Arg, class E>
auto moved(const E& e) {
  constexpr bool noop = [] {
    constexpr Dims d = E::shape::dims;
    if constexpr (M == MovementOps::RESHAPE || M == MovementOps::EXPAND)
      return Arg == d;
    else if constexpr (M == MovementOps::PERMUTE || M == MovementOps::SHRINK || M == MovementOps::PAD) {
      for (std::size_t i = 0; i < d.size(); ++i) {
        if constexpr (M == MovementOps::PERMUTE) {
          if (Arg[i] != static_cast<index_t>(i)) return false;
        } else if constexpr (M == MovementOps::SHRINK) {
          if (Arg[i].first != 0 || Arg[i].second != d[i]) return false;
        } else if (Arg[i].first != 0 || Arg[i].second != 0) {
          return false;
        }
      }
      return true;
    } else {
      return false;
    }
  }();
  if constexpr (noop)
    return e;
  else
    return move<E, M, Arg>(e);
}

// The movement ops that turn (..., H, W) into (..., OH, OW, KH, KW) windows.
template <class S, index_t KH, index_t KW, index_t SH, index_t SW>
struct Windows {
  static constexpr std::size_t np = S::rank - 2;  // the axes in front of H and W
  static constexpr index_t in[2] = {S::dims[np], S::dims[np + 1]}, k[2] = {KH, KW}, s[2] = {SH, SW};
  // Overlapping windows come from a repeated input; otherwise a strided reshape of it suffices.
  static constexpr bool overlap = KH > SH || KW > SW;
  static constexpr index_t out(std::size_t j) {
    return overlap ? (in[j] - k[j]) / s[j] + 1 : (in[j] + s[j] - k[j]) / s[j];
  }
  static constexpr index_t o[2] = {out(0), out(1)};
  static constexpr index_t e[2] = {(k[0] * (in[0] + 1) + in[0] - 1) / in[0],  // repeats: no padding needed
                                   (k[1] * (in[1] + 1) + in[1] - 1) / in[1]};
  // The prefix axes, then h's sizes, then w's.
  static constexpr Dims dims(const Dims& h, const Dims& w) {
    Dims d;
    for (std::size_t i = 0; i < np; ++i) d.push_back(S::dims[i]);
    for (index_t x : h) d.push_back(x);
    for (index_t x : w) d.push_back(x);
    return d;
  }
  // Whole prefix axes, then [0, end) on each of the others.
  static constexpr Pairs firsts(const Dims& ends) {
    Pairs p;
    for (std::size_t i = 0; i < np; ++i) p.push_back({0, S::dims[i]});
    for (index_t x : ends) p.push_back({0, x});
    return p;
  }
  static constexpr Dims order(std::initializer_list<index_t> last) {
    Dims d;
    for (std::size_t i = 0; i < np; ++i) d.push_back(static_cast<index_t>(i));
    for (index_t x : last) d.push_back(static_cast<index_t>(np) + x);
    return d;
  }

  template <class E>
  static auto apply(const E& x) {
    using M = MovementOps;
    if constexpr (overlap) {  // rows of length in + 1 of a repeated input start one further along
      auto up = moved<M::RESHAPE, dims({e[0] * in[0]}, {e[1] * in[1]})>(
          moved<M::EXPAND, dims({e[0], in[0]}, {e[1], in[1]})>(
              moved<M::RESHAPE, dims({1, in[0]}, {1, in[1]})>(x)));
      auto rows = moved<M::RESHAPE, dims({k[0], in[0] + 1}, {k[1], in[1] + 1})>(
          moved<M::SHRINK, firsts({k[0] * (in[0] + 1), k[1] * (in[1] + 1)})>(up));
      auto strided = moved<M::RESHAPE, dims({k[0], o[0], s[0]}, {k[1], o[1], s[1]})>(
          moved<M::SHRINK, firsts({k[0], o[0] * s[0], k[1], o[1] * s[1]})>(rows));
      return moved<M::PERMUTE, order({1, 3, 0, 2})>(moved<M::RESHAPE, dims({k[0], o[0]}, {k[1], o[1]})>(
          moved<M::SHRINK, firsts({k[0], o[0], 1, k[1], o[1], 1})>(strided)));
    } else {  // fit (..., OH * SH, OW * SW), padding the end that no window reads, keep KxK of each SxS
      constexpr Pairs grow = [] {
        Pairs p = firsts({});
        for (auto& pr : p) pr.second = 0;
        for (std::size_t j = 0; j < 2; ++j) p.push_back({0, std::max<index_t>(0, o[j] * s[j] - in[j])});
        return p;
      }();
      auto fit = moved<M::SHRINK, firsts({o[0] * s[0], o[1] * s[1]})>(moved<M::PAD, grow>(x));
      return moved<M::PERMUTE, order({0, 2, 1, 3})>(moved<M::SHRINK, firsts({o[0], k[0], o[1], k[1]})>(
          moved<M::RESHAPE, dims({o[0], s[0]}, {o[1], s[1]})>(fit)));
    }
  }
};

// Whether KH x KW windows SH and SW apart fit in the last two axes of S.
template <class S, index_t KH, index_t KW, index_t SH, index_t SW>
inline constexpr bool pool_fits = S::rank >= 2 && KH > 0 && KW > 0 && SH > 0 && SW > 0 &&
                                  S::dims[S::rank - 2] >= KH&& S::dims[S::rank - 1] >= KW;
// A plausible pooled shape after a shape error: (..., OH, OW), each at least 1.
template <class S, index_t KH, index_t KW, index_t SH, index_t SW>
constexpr Dims pool_fallback_dims() {
  Dims d = S::dims;
  const index_t k[2] = {KH, KW}, s[2] = {SH, SW};
  for (std::size_t j = 0; j < 2 && d.size() >= 2; ++j) {
    index_t& x = d[d.size() - 2 + j];
    x = k[j] > 0 && s[j] > 0 && x >= k[j] ? (x - k[j]) / s[j] + 1 : 1;
  }
  return d;
}
template <class X, index_t KH, index_t KW, index_t SH, index_t SW>
auto pool_fallback() {
  using E = expr_t<X>;
  constexpr Dims d = pool_fallback_dims<typename E::shape, KH, KW, SH, SW>();
  return constant<typename E::value_type, ShapeOf<d>>({});
}
}  // namespace detail

}  // namespace metagrad::fixed
