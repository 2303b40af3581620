#pragma once
// The internals of fixed/assign.hpp: several elementwise assignments of one size as one loop,
// chunk by chunk, each expression's chunk written before the next expression's is read.
#include <algorithm>
#include <array>
#include <cstddef>
#include <tuple>
#include <utility>

#include "metagrad/detail/fixed/eval.hpp"

namespace metagrad::fixed::detail {

// Is E read element by element by the loop, with nothing computed before it (no reduction, product
// or reshape the views cannot follow)? Only then may it read another assignment's new values.
template <class Ops, class E>
constexpr bool elementwise_only() {
  if constexpr (kind<E>::leaf || kind<E>::constant) {
    return true;
  } else if constexpr (materialised<E>) {
    return false;
  } else if constexpr (kind<E>::move) {
    using Ops2 = mp::mp_push_front<Ops, typename E::op_type>;
    using C = mp::mp_front<typename E::children_types>;
    return all_exist(plan<Ops2, C>::views) && elementwise_only<Ops2, C>();
  } else {
    return []<class... C>(mp::mp_list<C...>*) {
      return (elementwise_only<Ops, C>() && ...);
    }(static_cast<typename E::children_types*>(nullptr));
  }
}

template <class E>
inline constexpr Dims flat_shape = iteration_shape(E::shape::dims, plan<mp::mp_list<>, E>::views);

// Elements [lo, hi) of every assignment, each vector of positions written assignment by assignment:
// an expression reads a destination only at its own position (assign_fused), so at each position
// the earlier ones' new values and the later ones' old values, with neither buffers nor copies (an
// AdamW step reads its four tensors once and writes three). On copies of out and the expressions,
// as assign_range.
template <class T, std::size_t N, class... B>
METAGRAD_NOINLINE void assign_vectors(const std::array<T*, N>& out, const std::tuple<B...>& bound, index_t lo,
                                      index_t hi) {
  const std::array<T*, N> o = out;
  const std::tuple<B...> b = bound;
  constexpr index_t W = simd<T>::W;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    index_t j = lo;
    for (; j + W <= hi; j += W) (simd<T>::store(o[K] + j, vget(std::get<K>(b), j)), ...);
    for (; j < hi; ++j) ((o[K][j] = get<1>(std::get<K>(b), nullptr, j)), ...);
  }
  (std::index_sequence_for<B...>{});
}

// out[k] = e[k] for each k in turn, as one pass: each chunk of kChunk elements of every expression
// in order, so an expression reads the earlier ones' new values and the later ones' old values,
// as the assignments one after another would. Where that cannot hold (an expression computes
// something whole first, or reads a destination at another position) or the loops are not flat,
// the assignments one after another.
template <class T, class... E>
void assign_fused(const std::array<T*, sizeof...(E)>& out, const E&... e) {
  constexpr index_t n = mp::mp_front<mp::mp_list<E...>>::shape::size;
  constexpr bool flat = ((elementwise_only<mp::mp_list<>, E>() && flat_shape<E>.size() == 1) && ...);
  auto one_by_one = [&] {
    std::size_t k = 0;
    (assign(out[k++], e), ...);
  };
  if constexpr (!flat) {
    one_by_one();
  } else {
    // Where each reads each destination: in place (then through a buffer) or elsewhere (then apart).
    std::array<bool, sizeof...(E)> in_place{};
    bool apart = false;
    std::size_t k = 0;
    (
        [&](const auto& x) {
          for (std::size_t j = 0; j < out.size(); ++j) {
            Ctx c{out[j]};
            (void)bind<mp::mp_list<op::Move<MovementOps::RESHAPE, flat_shape<E>>>>(x, c);
            apart = apart || c.alias || (j != k && out[j] == out[k]);
            if (j == k) in_place[k] = c.reads_out;
          }
          ++k;
        }(e),
        ...);
    if (apart) return one_by_one();
    Ctx ctx{};
    auto b = std::tuple{bind<mp::mp_list<op::Move<MovementOps::RESHAPE, flat_shape<E>>>>(e, ctx)...};
    constexpr bool vectors = std::is_floating_point_v<T> && []<class... B>(std::tuple<B...>*) {
      return (vector_form<B>::value && ...);
    }(static_cast<decltype(b)*>(nullptr));
    auto part = [&](index_t lo, index_t hi) {
      if constexpr (vectors) {
        assign_vectors(out, b, lo, hi);
      } else {  // (else: the chunks' kernels are not instantiated where the vector loop runs)
        alignas(kVectorBytes) T buf[kChunk];
        for (index_t c = lo; c < hi; c += kChunk) {
          const index_t end = std::min(hi, c + kChunk);
          [&]<std::size_t... K>(std::index_sequence<K...>) {
            (
                [&] {
                  constexpr Dims I = flat_shape<std::tuple_element_t<K, std::tuple<E...>>>;
                  if (in_place[K]) {
                    assign_range<I>(std::get<K>(b), buf, c, end);
                    std::copy(buf, buf + (end - c), out[K] + c);
                  } else {
                    assign_range<I>(std::get<K>(b), out[K] + c, c, end);
                  }
                }(),
                ...);
          }
          (std::index_sequence_for<E...>{});
        }
      }
    };
    if constexpr (n >= kParallelElements)
      parallel_for(n, kVectorBytes / static_cast<index_t>(sizeof(T)), kParallelElements / 2, part);
    else
      part(0, n);
  }
}

}  // namespace metagrad::fixed::detail
