#pragma once
// The internals of fixed/matmul.hpp: the MatMul node, its operands read in place or evaluated, and
// its materialisation by the blocked kernel (gemm.hpp).
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "metagrad/detail/fixed/cpu.hpp"
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/eval.hpp"

namespace metagrad::fixed {

namespace op {
struct MatMul {};  // children: a (..., m, k), b (k, n) or (..., k, n); shape (..., m, n)
}  // namespace op

namespace detail {
template <class A, class B>
struct node<op::MatMul, A, B> {
  static constexpr Dims dims = [] {
    Dims d = A::shape::dims;
    d.back() = B::shape::dims.back();
    return d;
  }();
  using value_type = typename A::value_type;
  using shape = ShapeOf<dims>;
};

// A tensor seen through movement ops without a mask: its data and one View; else not `exists`.
template <class E>
struct strided {
  static constexpr bool exists = false;
};
template <class T, class S>
struct strided<Expr<op::Leaf<T, S>>> {
  static constexpr bool exists = true;
  static constexpr View view = View(S::dims);
  static const T* data(const Expr<op::Leaf<T, S>>& e) { return e.op.data; }
};
template <class T, class S>
struct strided<Expr<op::Cut<T, S>>> : strided<Expr<op::Leaf<T, S>>> {
  static const T* data(const Expr<op::Cut<T, S>>& e) { return e.op.data; }
};
template <MovementOps M, auto Arg, class C>
requires(strided<C>::exists) struct strided<Expr<op::Move<M, Arg>, C>> {
  static constexpr std::optional<View> v = op::Move<M, Arg>::apply(strided<C>::view);
  static constexpr bool exists = v.has_value() && v->mask.empty();
  static constexpr View view = v ? *v : View(Dims{});
  static auto data(const Expr<op::Move<M, Arg>, C>& e) { return strided<C>::data(fixed::child<0>(e)); }
};

// A permuted expression (a gradient's h.transpose()): evaluated in its own row-major order, then
// read through the permutation, so neither the evaluation nor the packing reads across rows.
template <class E>
struct permuted {
  static constexpr bool exists = false;
};
template <auto Arg, class C>
requires(!strided<C>::exists) struct permuted<Expr<op::Move<MovementOps::PERMUTE, Arg>, C>> {
  static constexpr std::optional<View> v = op::Move<MovementOps::PERMUTE, Arg>::apply(View(C::shape::dims));
  static constexpr bool exists = v.has_value();
  static constexpr View view = v ? *v : View(Dims{});
};

// An operand's View, known at compile time: its own if it is strided, the permutation's if it is
// permuted, else row-major (it is evaluated into the arena).
template <class E>
constexpr View operand_view() {
  if constexpr (strided<E>::exists)
    return strided<E>::view;
  else if constexpr (permuted<E>::exists)
    return permuted<E>::view;
  else
    return View(E::shape::dims);
}

// An operand's data: in place if it is strided, else evaluated into the arena.
template <class E>
const typename E::value_type* operand_data(const E& e) {
  if constexpr (strided<E>::exists)
    return strided<E>::data(e);
  else if constexpr (permuted<E>::exists) {
    using C = std::remove_cvref_t<decltype(fixed::child<0>(e))>;
    auto* tmp = Arena::local().alloc<typename C::value_type>(C::shape::size);
    assign(tmp, fixed::child<0>(e));
    return tmp;
  } else {
    auto* tmp = Arena::local().alloc<typename E::value_type>(E::shape::size);
    assign(tmp, e);
    return tmp;
  }
}

// a * b + c, fused where the ISA has FMA (ISO C++ mode does not contract), as the GEMM's tile.
template <class T>
METAGRAD_INLINE T madd(T a, T b, T c) {
#if defined(__FMA__) || defined(__AVX512F__)
  if constexpr (std::is_floating_point_v<T>) return std::fma(a, b, c);
#endif
  return a * b + c;
}

// A small operand (kInlineBytes): read in place where it is strided, else evaluated into an array
// of its own, row-major, on the stack.
template <class E, bool Own = !strided<E>::exists>
struct SmallOperand {
  using T = typename E::value_type;
  static constexpr View view = strided<E>::view;
  explicit SmallOperand(const E& e) : p(strided<E>::data(e)) {}
  const T* p;
};
template <class E>
struct SmallOperand<E, true> {
  using T = typename E::value_type;
  static constexpr View view = View(E::shape::dims);
  explicit SmallOperand(const E& e) : p(v) { assign(v, e); }
  SmallOperand(const SmallOperand&) = delete;
  T v[E::shape::size] = {};  // zeroed: g++ cannot always see that assign writes every element
  const T* p;
};

// Where batch index bi's product reads A and B (views va, vb; A's dims da, B of rank rb, which has
// the batch axes when its rank is A's, else is shared by every batch index).
template <Dims da, View va, View vb, std::size_t rb>
METAGRAD_INLINE std::pair<index_t, index_t> batch_offsets(index_t bi) {
  constexpr std::size_t ra = da.size();
  index_t oa = va.offset, ob = vb.offset;
  for (std::size_t d = ra - 2, rest = static_cast<std::size_t>(bi); d-- > 0;) {  // batch axes
    index_t i = static_cast<index_t>(rest) % da[d];
    rest /= static_cast<std::size_t>(da[d]);
    oa += i * va.strides[d];
    if constexpr (rb == ra) ob += i * vb.strides[d];
  }
  return {oa, ob};
}

// A batch of products that is one product of batch * m rows: B the same for every batch index (rank
// 2, or its batch axes broadcast) and A's rows one stride apart across the batch axes (a linear
// layer's (batch, tokens, in) input): the GEMM then sees 256 rows, not four products of 64, whose
// last row strips are partial (64 = 4 x 14 + 8 at AVX-512's 14-row tile).
template <Dims da, View va, View vb, std::size_t rb>
constexpr bool foldable() {
  constexpr std::size_t ra = da.size();
  if (ra <= 2 || da[ra - 2] < 2) return false;
  index_t next = va.strides[ra - 2] * da[ra - 2];  // the stride the next batch axis out must have
  for (std::size_t d = ra - 2; d-- > 0;) {
    if (rb == ra && vb.strides[d] != 0 && da[d] != 1) return false;
    if (da[d] == 1) continue;
    if (va.strides[d] != next) return false;
    next *= da[d];
  }
  return true;
}

constexpr bool power_of_two(index_t x) { return x >= 2 && (x & (x - 1)) == 0; }
// a * b + c on a small vector: fused where the ISA has it for that width (as madd on scalars).
template <class V>
METAGRAD_INLINE V vmadd(V a, V b, V c) {
#if defined(__FMA__)
  using E = std::remove_cvref_t<decltype(a[0])>;
  if constexpr (std::is_same_v<E, float>) {
    if constexpr (sizeof(V) == 16) return (V)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
    if constexpr (sizeof(V) == 32) return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#endif
  } else if constexpr (std::is_same_v<E, double>) {
    if constexpr (sizeof(V) == 16) return (V)_mm_fmadd_pd((__m128d)a, (__m128d)b, (__m128d)c);
    if constexpr (sizeof(V) == 32) return (V)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#if defined(__AVX512F__)
    if constexpr (sizeof(V) == 64) return (V)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#endif
  }
#endif
  return a * b + c;
}

// x elements of T in one small vector: x lanes where x is a power of two, else the next power of
// two, at least 16 bytes (the lanes past x: zero, never stored).
template <class T>
constexpr index_t product_lanes(index_t x) {
  if (power_of_two(x)) return x;
  index_t p = 16 / static_cast<index_t>(sizeof(T));
  while (p < x) p *= 2;
  return p;
}
// The first C of P lanes from p, the rest zero; and back. In whole power-of-two parts, each one
// load or store of its own width (9 floats: 8 and 1), joined in registers: a masked 64-byte access
// would span the tensors beside a 3 x 3 one, and a load behind the last product's store would wait
// for it (Zen 4: 3x slower in a loop).
template <class T, index_t P, index_t C>
METAGRAD_INLINE lanes_t<T, P> load_lanes(const T* p) {
  using V = lanes_t<T, P>;
  if constexpr (C >= P) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else if constexpr (C <= 0) {
    return V{};
  } else if constexpr (P * sizeof(T) <= 16) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return V{(index_t(I) < C ? p[I] : T(0))...}; }
    (std::make_index_sequence<P>{});
  } else {
    auto lo = load_lanes<T, P / 2, C>(p);
    auto hi = load_lanes<T, P / 2, C - P / 2>(p + P / 2);
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return __builtin_shufflevector(lo, hi, I...); }
    (std::make_index_sequence<P>{});
  }
}
template <class T, index_t P, index_t C>
METAGRAD_INLINE void store_lanes(T* p, lanes_t<T, P> v) {
  if constexpr (C >= P) {
    std::memcpy(p, &v, sizeof v);
  } else if constexpr (P == 2) {
    if constexpr (C > 0) p[0] = v[0];
  } else if constexpr (C > 0) {
    auto lo = [&]<std::size_t... I>(std::index_sequence<I...>) { return __builtin_shufflevector(v, v, I...); }
    (std::make_index_sequence<P / 2>{});
    auto hi = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return __builtin_shufflevector(v, v, (I + P / 2)...);
    }
    (std::make_index_sequence<P / 2>{});
    store_lanes<T, P / 2, C>(p, lo);
    store_lanes<T, P / 2, C - P / 2>(p + P / 2, hi);
  }
}

// C = A B with A, B and C each one small vector (2 x 2, 3 x 3, 4 x 4, 2 x 3 by 3 x 4 floats at
// AVX-512): A's column p and B's row p spread over C's lanes by two shuffles, one multiply-add per
// p (Eigen's 2 x 2 product), where a 3 x 3 product's scalar loop is 27 multiply-adds and its
// vectorised one shuffles 3-wide rows. True where it applies.
template <class T, index_t x>
inline constexpr bool one_vector = product_lanes<T>(x) * index_t(sizeof(T)) <= kVectorBytes;
template <class T, index_t m, index_t k, index_t n>
inline constexpr bool vector_product = std::is_floating_point_v<T>&& m* n* index_t(sizeof(T)) >= 16 &&
                                       one_vector<T, m * n>&& one_vector<T, m * k>&& one_vector<T, k * n>;
// A's column p (B's row p) at each lane l = i n + j of C (lanes past m n: any of A's).
template <class VC, index_t m, index_t k, index_t n, index_t p, class VA, std::size_t... L>
METAGRAD_INLINE VC spread_a(VA a, std::index_sequence<L...>) {
  return VC(__builtin_shufflevector(a, a, (index_t(L) < m * n ? L / n * k + p : 0)...));
}
template <class VC, index_t n, index_t p, class VB, std::size_t... L>
METAGRAD_INLINE VC spread_b(VB b, std::index_sequence<L...>) {
  return VC(__builtin_shufflevector(b, b, (p * n + L % n)...));
}
template <index_t m, index_t k, index_t n, class T>
METAGRAD_INLINE void vector_product_run(T* out, const T* pa, const T* pb) {
  constexpr index_t la = product_lanes<T>(m * k), lb = product_lanes<T>(k * n), lc = product_lanes<T>(m * n);
  using VC = lanes_t<T, lc>;
  constexpr auto lanes = std::make_index_sequence<lc>{};
  auto a = load_lanes<T, la, m * k>(pa);
  auto b = load_lanes<T, lb, k * n>(pb);
  VC c = spread_a<VC, m, k, n, 0>(a, lanes) * spread_b<VC, n, 0>(b, lanes);
  [&]<std::size_t... P>(std::index_sequence<P...>) {
    ((c = vmadd(spread_a<VC, m, k, n, P + 1>(a, lanes), spread_b<VC, n, P + 1>(b, lanes), c)), ...);
  }
  (std::make_index_sequence<k - 1>{});
  store_lanes<T, lc, m * n>(out, c);
}

// C = A B a row of C at a time where a row is not a power of two (5 to 7 floats: 8 lanes): B's
// rows each one small vector, loaded once; each of A's elements broadcast, one multiply-add per p.
// The scalar loop leaves such rows to the vectoriser, which runs them a lane at a time.
template <class T, index_t n>
inline constexpr bool row_product = std::is_floating_point_v<T>&& n > 2 && !power_of_two(n) &&
                                    product_lanes<T>(n) * index_t(sizeof(T)) <= kVectorBytes;
template <index_t m, index_t k, index_t n, index_t a_row, index_t a_col, index_t b_row, class T>
METAGRAD_INLINE void row_product_run(T* out, const T* pa, const T* pb) {
  constexpr index_t L = product_lanes<T>(n);
  using V = lanes_t<T, L>;
  V b[k ? k : 1];
#pragma GCC unroll 16
  for (index_t p = 0; p < k; ++p) b[p] = load_lanes<T, L, n>(pb + p * b_row);
#pragma GCC unroll 8
  for (index_t i = 0; i < m; ++i) {
    V c = lanes<T, L>::splat(pa[i * a_row]) * b[0];
#pragma GCC unroll 16
    for (index_t p = 1; p < k; ++p) c = vmadd(lanes<T, L>::splat(pa[i * a_row + p * a_col]), b[p], c);
    store_lanes<T, L, n>(out + i * n, c);
  }
}

// Products whose operands and result are all small: every size a constant, the loops plain (a row
// of C accumulated in registers, row of B by row of B), which the compiler unrolls and vectorises:
// no arena, no packing, no threads, no call into the GEMM.
template <class T, class A, class B>
METAGRAD_INLINE void small_matmul(T* __restrict out, const A& a, const B& b) {
  constexpr Dims da = A::shape::dims, db = B::shape::dims;
  constexpr std::size_t ra = da.size(), rb = db.size();
  constexpr index_t m = da[ra - 2], k = da[ra - 1], n = db[rb - 1];
  constexpr index_t batch = A::shape::size / (m * k ? m * k : 1);
  SmallOperand<A> oa(a);
  SmallOperand<B> ob(b);
  constexpr View va = SmallOperand<A>::view, vb = SmallOperand<B>::view;
  // both read row by row, each row whole
  constexpr bool rows = va.strides[ra - 1] == 1 && va.strides[ra - 2] == k && vb.strides[rb - 1] == 1 &&
                        vb.strides[rb - 2] == n;
  for (index_t bi = 0; bi < batch; ++bi) {
    const auto [sa, sb] = batch_offsets<da, va, vb, rb>(bi);
    const T* pa = oa.p + sa;
    const T* pb = ob.p + sb;
    if constexpr (rows && vector_product<T, m, k, n>) {
      vector_product_run<m, k, n>(out + bi * m * n, pa, pb);
      continue;
    } else if constexpr (vb.strides[rb - 1] == 1 && k > 0 && row_product<T, n>) {
      row_product_run<m, k, n, va.strides[ra - 2], va.strides[ra - 1], vb.strides[rb - 2]>(out + bi * m * n,
                                                                                           pa, pb);
      continue;
    }
    for (index_t i = 0; i < m; ++i) {
      T acc[n ? n : 1] = {};
      for (index_t p = 0; p < k; ++p) {
        T x = pa[i * va.strides[ra - 2] + p * va.strides[ra - 1]];
        for (index_t j = 0; j < n; ++j)
          acc[j] = madd(x, pb[p * vb.strides[rb - 2] + j * vb.strides[rb - 1]], acc[j]);
      }
      for (index_t j = 0; j < n; ++j) out[(bi * m + i) * n + j] = acc[j];
    }
  }
}

template <class A, class B>
inline constexpr bool small_product =
    inline_size<typename A::value_type>(A::shape::size) &&
    inline_size<typename A::value_type>(B::shape::size) &&
    inline_size<typename A::value_type>(node<op::MatMul, A, B>::shape::size);

template <>
struct small_op<op::MatMul> : std::true_type {};  // when small, small_matmul: no arena

template <>
struct Materialise<op::MatMul> {
  template <class T, class A, class B>
  METAGRAD_INLINE static void run(T* out, const Expr<op::MatMul, A, B>& e) {
    if constexpr (small_product<A, B>)
      return small_matmul(out, fixed::child<0>(e), fixed::child<1>(e));
    else
      run_gemm(out, e);
  }
  template <class T, class A, class B>
  static void add(T* out, const Expr<op::MatMul, A, B>& e) {  // (adds_into)
    run_gemm(out, e, true);
  }
  // out = the product, or (acc) out += it
  template <class T, class A, class B>
  static void run_gemm(T* out, const Expr<op::MatMul, A, B>& e, bool acc = false) {
    constexpr Dims da = A::shape::dims, db = B::shape::dims;
    constexpr std::size_t ra = da.size(), rb = db.size();
    constexpr index_t m = da[ra - 2], k = da[ra - 1], n = db[rb - 1];
    constexpr index_t batch = [] {
      index_t p = 1;
      for (std::size_t i = 0; i + 2 < A::shape::rank; ++i) p *= A::shape::dims[i];
      return p;
    }();
    Arena::Scope scope;
    static constexpr View va = operand_view<A>(), vb = operand_view<B>();
    const T* pa = operand_data(fixed::child<0>(e));
    const T* pb = operand_data(fixed::child<1>(e));
    if constexpr (foldable<da, va, vb, rb>()) {  // one product of batch * m rows
      Gemm<T>::run(batch * m, n, k, pa + va.offset, va.strides[ra - 2], va.strides[ra - 1], pb + vb.offset,
                   vb.strides[rb - 2], vb.strides[rb - 1], out, n, Gemm<T>::host_blocking(), acc);
    } else {  // (else: a folded product instantiates no batch loop)
      auto products = [&](index_t b0, index_t b1) {
        for (index_t bi = b0; bi < b1; ++bi) {
          const auto [oa, ob] = batch_offsets<da, va, vb, rb>(bi);
          Gemm<T>::run(m, n, k, pa + oa, va.strides[ra - 2], va.strides[ra - 1], pb + ob, vb.strides[rb - 2],
                       vb.strides[rb - 1], out + bi * m * n, n, Gemm<T>::host_blocking(), acc);
        }
      };
      parallel_products(batch, m * n * k, products);
    }
  }
};

template <class A, class B>
inline constexpr bool adds_into<Expr<op::MatMul, A, B>> = !small_product<A, B>;

template <class A, class B>
constexpr bool matmul_fits() {
  constexpr Dims da = A::shape::dims, db = B::shape::dims;
  if (da.size() < 2 || db.size() < 2 || da[da.size() - 1] != db[db.size() - 2]) return false;
  if (db.size() == 2) return true;
  if (db.size() != da.size()) return false;
  for (std::size_t i = 0; i + 2 < da.size(); ++i)
    if (da[i] != db[i]) return false;
  return true;
}
}  // namespace detail

}  // namespace metagrad::fixed
