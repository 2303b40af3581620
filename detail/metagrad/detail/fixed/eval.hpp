#pragma once
// Inline evaluation: an Expr becomes one fused loop nest the host compiler vectorises.
//
// 1. Plan (compile time). Walking down from the root, the movement ops met so far are applied to
//    each leaf's row-major View with the shared View code, so every leaf ends up as one View of the
//    output's index space: movement costs nothing at run time. A node the loop cannot read element
//    by element (a reduction; a reshape no View can express) is materialised: evaluated first into
//    an arena temporary that is then a leaf (or, at the root, straight into the destination when the
//    expression does not read it). Below a PAD, elementwise nodes and constants are guarded by the
//    pad's mask (f(0) need not be 0).
// 2. Iteration shape (compile time). Size-1 axes are dropped and neighbouring axes merged while
//    every leaf view can follow, so contiguous operands give a single `p[i]` loop.
// 3. Bind (run time): the Expr becomes a tree of B* nodes holding only pointers and constants, the
//    Views are template arguments. 4. Loop: outer axes by an odometer, the innermost axis a plain
//    loop whose body the compiler inlines and vectorises. A large loop is cut into contiguous
//    ranges (the flat range of a 1-D loop, else outer rows), one per thread (parallel.hpp).
// Small expressions (every node at most kInlineBytes, tensor.hpp) skip the arena and the threads:
// a materialised node keeps its values inside the bound tree (BOwn), and the loop runs inline into
// a local array copied to the destination, which the compiler unrolls and keeps in registers.
//
// The phases, one file each: eval_plan.hpp (1, 2), eval_bind.hpp (3) and eval_let.hpp (its shared
// subexpressions), eval_vector.hpp and eval_loop.hpp (4). This file picks the path an expression takes.
#include <cstring>

#include "metagrad/detail/fixed/eval_loop.hpp"
#include "metagrad/detail/fixed/inline.hpp"

namespace metagrad::fixed::detail {

namespace mp = boost::mp11;

// Does e read the tensor at p?
template <class E>
bool reads(const E& e, const void* p) {
  if constexpr (kind<E>::leaf)
    return e.op.data == p;
  else if constexpr (E::arity == 0)  // a constant
    return false;
  else if constexpr (E::arity == 1)  // no lambda per node type
    return reads(e.kids.k0, p);
  else if constexpr (E::arity == 2)
    return reads(e.kids.k0, p) || reads(e.kids.k1, p);
  else
    return reads(e.kids.k0, p) || reads(e.kids.k1, p) || reads(e.kids.k2, p);
}

// Can e be evaluated with neither the arena nor the threads? Every node small, and every
// materialised op one whose small case takes neither (small_op, specialised by reduce.hpp and
// matmul.hpp).
template <class Op>
struct small_op : std::false_type {};
template <class E>
constexpr bool small_tree();
template <class L>
struct small_trees;
template <class... C>
struct small_trees<mp::mp_list<C...>> : std::bool_constant<(small_tree<C>() && ...)> {};
template <class E>
constexpr bool small_tree() {
  if constexpr (!inline_size<typename E::value_type>(E::shape::size))
    return false;
  else if constexpr (kind<E>::leaf || kind<E>::constant)
    return true;
  else if constexpr (materialised<E> && !small_op<typename E::op_type>::value)
    return false;
  else
    return small_trees<typename E::children_types>::value;
}

// A small expression: its loop inline, straight into out where no leaf reads it, else into a local
// array (so the destination, read through any view, is read whole before it is written) copied to
// out after.
template <class E>
METAGRAD_INLINE void assign_small(typename E::value_type* out, const E& e) {
  using T = typename E::value_type;
  using S = typename E::shape;
  if constexpr (materialised<E>)  // a small product or reduction straight into out, when it may be
    if (!reads(e, out)) return Materialise<typename E::op_type>::run(out, e);
  constexpr Dims I = iteration_shape(S::dims, plan<mp::mp_list<>, E>::views);
  constexpr index_t range = I.size() == 1 ? I[0] : outer_count<I>;
  Ctx ctx{out};
  auto b = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
  // Written out as vectors, straight into out even where a leaf reads it in place (ctx.alias is then
  // false at compile time where every leaf is contiguous: no check is left).
  constexpr bool vectors = I.size() == 1 && std::is_floating_point_v<T> && small_vectors<decltype(b)>;
  if constexpr (vectors)
    if (!ctx.alias) return vector_loop<range>(b, out);
  alignas(kVectorBytes) T tmp[S::size ? S::size : 1] = {};
  if constexpr (vectors) {
    vector_loop<range>(b, tmp);
  } else {
    if (!ctx.reads_out) return loop<I>(b, out, 0, range);
    loop<I>(b, tmp, 0, range);
  }
  std::copy(tmp, tmp + S::size, out);
}

// Which addend of a sum Materialise adds in its own stores (adds_into), or -1: the other is written
// into out first, then, say, the GEMM adds the product in its tile stores (a linear layer's bias, a
// gradient added to one there) with no product in a temporary and no pass to add the two.
template <class E>
inline constexpr int added_into = -1;
template <class X, class Y>
inline constexpr int added_into<Expr<op::Map<Fn::ADD>, X, Y>> = adds_into<Y>   ? 1
                                                                : adds_into<X> ? 0
                                                                               : -1;

template <class E>
void assign_big(typename E::value_type* out, const E& e) {
  using T = typename E::value_type;
  using S = typename E::shape;
  Arena::Scope scope;
  if constexpr (added_into<E> >= 0) {
    const auto& p = std::get<added_into<E>>(std::tie(e.kids.k0, e.kids.k1));
    const auto& rest = std::get<1 - added_into<E>>(std::tie(e.kids.k0, e.kids.k1));
    // (a product that reads out: the same two steps into a temporary, copied after, rather than a
    // third way for the compiler to instantiate)
    T* dst = reads(p, out) ? Arena::local().alloc<T>(S::size) : out;
    using R = std::remove_cvref_t<decltype(rest)>;
    if constexpr (kind<R>::leaf) {  // (out += p: nothing to write first; else a plain copy, no loop)
      if (rest.op.data != dst) std::copy(rest.op.data, rest.op.data + S::size, dst);
    } else {
      assign(dst, rest);
    }
    Materialise<typename std::remove_cvref_t<decltype(p)>::op_type>::add(dst, p);
    if (dst != out) std::copy(dst, dst + S::size, out);
  } else {
    if constexpr (materialised<E>)  // a matmul or reduction computed straight into out, when it may be
      if (!reads(e, out)) return Materialise<typename E::op_type>::run(out, e);
    constexpr Dims I = iteration_shape(S::dims, plan<mp::mp_list<>, E>::views);
    Ctx ctx{out};
    auto bound = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
    constexpr bool row_fits = I.size() == 1 || I[I.size() - 1] <= kChunk;
    with_shared(bound, [&](const auto& b) {
      if (!ctx.alias && (!ctx.reads_out || row_fits)) return run_assign<I>(by_leaves(b), out, ctx.reads_out);
      T* tmp = Arena::local().alloc<T>(S::size);  // out is read through another view (or in long rows)
      run_assign<I>(by_leaves(b), tmp, false);
      std::copy(tmp, tmp + S::size, out);
    });
  }
}

// e written into dst through D, a view of e's shape (strides and an offset: a region of a larger
// buffer), or added to what is there: one loop, no temporary (a head's gradient into its place in a
// packed q, k, v's). e must not read dst.
template <View D, class E>
void assign_view(typename E::value_type* dst, const E& e, bool add) {
  using T = typename E::value_type;
  using S = typename E::shape;
  Arena::Scope scope;
  using Plan = plan<mp::mp_list<>, E>;
  constexpr Dims I = iteration_shape(S::dims, concat<Plan::count + 1>(Plan::views, Views<1>{D}));
  constexpr View DI = *D.reshape(I);
  constexpr std::size_t R = I.size();
  constexpr index_t n = I[R - 1], s = DI.strides[R - 1];
  Ctx ctx{dst};
  auto b = bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, ctx);
  auto part = [&](index_t lo, index_t hi) {
    for_outer<I>(lo, hi, [&](index_t, const index_t* pos) {
      T* __restrict row = dst + offset_of<DI, R>(pos, 0);
      if (add)
        for (index_t j = 0; j < n; ++j) row[j * s] += get<R>(b, pos, j);
      else
        for (index_t j = 0; j < n; ++j) row[j * s] = get<R>(b, pos, j);
    });
  };
  constexpr index_t range = outer_count<I>;
  if constexpr (prod(I) >= kParallelElements)
    parallel_for(range, 1, std::max<index_t>(1, kParallelElements / 2 / n), part);
  else
    part(0, range);
}

template <class E>
struct root_reshape : std::false_type {};
template <Dims D, class C>
struct root_reshape<Expr<op::Move<MovementOps::RESHAPE, D>, C>> : std::true_type {};

template <class E>
METAGRAD_INLINE void assign(typename E::value_type* out, const E& e) {
  if constexpr (root_reshape<E>::value)  // the same values in the same order: the child into out (a
    assign(out, e.kids.k0);              // reshape of a permuted product was two copies, not one)
  else if constexpr (small_tree<E>())
    assign_small(out, e);
  else
    assign_big(out, e);
}

}  // namespace metagrad::fixed::detail
