#pragma once
// The internals of fixed/matmul.hpp: the MatMul node, its operands read in place or evaluated, and
// its materialisation by the blocked kernel (gemm.hpp).
#include "metagrad/fixed/elementwise.hpp"
#include "metagrad/fixed/eval.hpp"
#include "metagrad/fixed/gemm.hpp"

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

template <>
struct Materialise<op::MatMul> {
  template <class T, class A, class B>
  static void run(T* out, const Expr<op::MatMul, A, B>& e) {
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
    for (index_t bi = 0; bi < batch; ++bi) {
      index_t oa = va.offset, ob = vb.offset;
      for (std::size_t d = ra - 2, rest = static_cast<std::size_t>(bi); d-- > 0;) {  // batch axes
        index_t i = static_cast<index_t>(rest) % da[d];
        rest /= static_cast<std::size_t>(da[d]);
        oa += i * va.strides[d];
        if constexpr (rb == ra) ob += i * vb.strides[d];
      }
      Gemm<T>::run(m, n, k, pa + oa, va.strides[ra - 2], va.strides[ra - 1], pb + ob, vb.strides[rb - 2],
                   vb.strides[rb - 1], out + bi * m * n, n);
    }
  }
};

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
