#pragma once
// The internals of fixed/describe.hpp: each node's name in a plan, and the Planner that walks an
// expression as assign() evaluates it, replaying the arena's scopes.
#include <algorithm>
#include <cstddef>
#include <sstream>
#include <string>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/fixed/conv2d_vjp.hpp"
#include "metagrad/fixed/fusion_plan.hpp"
#include "metagrad/fixed/matmul.hpp"
#include "metagrad/fixed/reduce.hpp"

namespace metagrad::fixed::detail::describe {
namespace mp = boost::mp11;

// Child I of a node: the one place this file reads children (the node protocol of expr.hpp).
template <std::size_t I, class E>
const auto& nth_child(const E& e) {
  return fixed::child<I>(e);
}
template <class E>
inline constexpr std::size_t arity = E::arity;

// As the arena rounds a request.
template <class T>
constexpr std::size_t rounded(index_t n) {
  return (static_cast<std::size_t>(n) * sizeof(T) + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
}

constexpr const char* name(ReduceOps r) { return r == ReduceOps::SUM ? "SUM" : "MAX"; }
constexpr const char* name(MovementOps m) {
  constexpr const char* names[] = {"RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "STRIDE"};
  return names[static_cast<int>(m)];
}
template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_floating_point_v<T>)
    return sizeof(T) == 4 ? "float" : sizeof(T) == 8 ? "double" : "long double";
  else
    return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
}
template <class E>
std::string shape() {
  return metagrad::to_string(E::shape::dims);
}

// The op and shapes of a node, as a plan line names it.
template <class Op>
struct Name {
  template <class E>
  static std::string of(const E&) {
    return "op " + shape<E>();
  }
};
template <class T, class S>
struct Name<op::Leaf<T, S>> {
  template <class E>
  static std::string of(const E&) {
    return "Leaf " + shape<E>() + " " + type_name<T>();
  }
};
template <class T, class S>
struct Name<op::Cut<T, S>> {
  template <class E>
  static std::string of(const E&) {
    return "Cut " + shape<E>() + " " + type_name<T>();
  }
};
template <class T, class S>
struct Name<op::Const<T, S>> {
  template <class E>
  static std::string of(const E& e) {
    std::ostringstream s;
    s << "Const " << +e.op.value << " " << shape<E>();
    return s.str();
  }
};
template <Fn F>
struct Name<op::Map<F>> {
  template <class E>
  static std::string of(const E&) {
    return std::string("Map ") + FnTraits<F>::name + " " + shape<E>();
  }
};
template <class U>
struct Name<op::Cast<U>> {
  template <class E>
  static std::string of(const E&) {
    return "Cast to " + type_name<U>() + " " + shape<E>();
  }
};
template <>
struct Name<op::Detach> {
  template <class E>
  static std::string of(const E&) {
    return "Detach (no gradient) " + shape<E>();
  }
};
template <>
struct Name<op::Gate> {
  template <class E>
  static std::string of(const E& e) {
    return std::string(e.op.on ? "Gate on " : "Gate off (zeros, child not evaluated) ") + shape<E>();
  }
};
template <MovementOps M, auto Arg>
struct Name<op::Move<M, Arg>> {
  template <class E>
  static std::string of(const E&) {
    using C = mp::mp_front<typename E::children_types>;
    std::string arg =
        M == MovementOps::RESHAPE || M == MovementOps::EXPAND ? "" : " " + metagrad::to_string(Arg) + ":";
    return std::string("Move ") + name(M) + arg + " " + shape<C>() + " -> " + shape<E>();
  }
};
template <ReduceOps R, Dims Axes>
struct Name<op::Reduce<R, Axes>> {
  template <class E>
  static std::string of(const E&) {
    using C = mp::mp_front<typename E::children_types>;
    return std::string("Reduce ") + name(R) + " over " + metagrad::to_string(Axes) + ": " + shape<C>() +
           " -> " + shape<E>();
  }
};
// "Op (child shapes, joined) -> (shape)".
template <class E>
std::string joined(const char* op, const char* join) {
  std::string s = op;
  mp::mp_for_each<mp::mp_iota_c<arity<E>>>([&](auto i) {
    s += (i == 0 ? " " : join) + shape<mp::mp_at_c<typename E::children_types, decltype(i)::value>>();
  });
  return s + " -> " + shape<E>();
}
template <>
struct Name<op::MatMul> {
  template <class E>
  static std::string of(const E&) {
    return joined<E>("MatMul", " @ ");
  }
};
template <index_t S, index_t P>
struct Name<op::Conv2d<S, P>> {
  template <class E>
  static std::string of(const E&) {
    return joined<E>(("Conv2d stride " + std::to_string(S) + " pad " + std::to_string(P)).c_str(), " * ");
  }
};
template <index_t S, index_t P, index_t H, index_t W>
struct Name<op::Conv2dGradInput<S, P, H, W>> {
  template <class E>
  static std::string of(const E&) {
    return joined<E>("Conv2dGradInput (gradient, weight)", ", ");
  }
};
template <index_t S, index_t P, index_t KH, index_t KW>
struct Name<op::Conv2dGradWeight<S, P, KH, KW>> {
  template <class E>
  static std::string of(const E&) {
    return joined<E>("Conv2dGradWeight (input, gradient)", ", ");
  }
};
template <class E>
std::string name_of(const E& e) {
  return Name<typename E::op_type>::of(e);
}

template <class Op>
struct Runs;  // how Materialise<Op> runs, step by step (below)

// Walks an expression as assign() evaluates it, recording steps and replaying the arena's scopes.
class Planner {
 public:
  FusionPlan out;

  // The arena: `used` grows by each allocation; a Scope gives back what was taken inside it.
  struct Scope {
    Planner& p;
    std::size_t used = p.used;
    ~Scope() { p.used = used; }
  };
  template <class T>
  void alloc(index_t n) {
    used += rounded<T>(n);
    ++out.temporaries;
    out.arena_bytes = std::max(out.arena_bytes, used);
  }
  void step(int depth, PlanStep::Role role, std::string what, std::size_t temp = 0) {
    out.steps.push_back({depth, role, std::move(what), temp});
  }
  template <class E>
  void temp(int depth, PlanStep::Role role, std::string what) {
    step(depth, role, std::move(what), rounded<typename E::value_type>(E::shape::size));
    alloc<typename E::value_type>(E::shape::size);
  }

  // assign(out, e), out a buffer e does not read: a materialised root is computed straight into it.
  template <class E>
  void assign(const E& e, int depth, bool root) {
    Scope scope{*this};
    if constexpr (root_reshape<E>::value) {  // its child straight into the buffer
      step(depth, PlanStep::INLINE, name_of(e) + " (its child into the same buffer)");
      assign(nth_child<0>(e), depth + 1, root);
    } else if constexpr (materialised<E>) {
      step(depth, PlanStep::MATERIALISE, name_of(e) + (root ? " [into destination]" : ""));
      Runs<typename E::op_type>::run(*this, e, depth + 1);
    } else if constexpr (added_into<E> >= 0) {  // eval.hpp's assign_big: the other addend, then the product
      step(depth, PlanStep::INLINE, name_of(e) + " (the product added in its own stores)");
      assign(nth_child<1 - added_into<E>>(e), depth + 1, root);
      const auto& p = nth_child<added_into<E>>(e);
      step(depth + 1, PlanStep::MATERIALISE, name_of(p) + (root ? " [added into destination]" : " [added]"));
      Runs<typename std::remove_cvref_t<decltype(p)>::op_type>::run(*this, p, depth + 2);
    } else {
      constexpr Dims I = iteration_shape(E::shape::dims, plan<mp::mp_list<>, E>::views);
      step(depth, PlanStep::LOOP,
           shape<E>() + " over " + metagrad::to_string(I) + (root ? " [into destination]" : ""));
      bind<mp::mp_list<op::Move<MovementOps::RESHAPE, I>>>(e, depth + 1);
    }
  }
  // A node evaluated into a temporary of its own: in the arena, or (a small one, eval.hpp's BOwn
  // and matmul.hpp's SmallOperand) an array on the stack.
  template <class E>
  void assign_temp(const E& e, int depth, const char* why, bool stack = false) {
    if (stack)
      step(depth, PlanStep::SCRATCH, std::string(why) + " " + shape<E>() + " [on the stack]");
    else
      temp<E>(depth, PlanStep::SCRATCH, std::string(why) + " " + shape<E>());
    assign(e, depth + 1, false);
  }

  // bind(): what the loop over E (below the movement ops Ops) reads.
  template <class Ops, class E>
  void bind(const E& e, int depth) {
    const std::string masked = has_pad<Ops> ? " (masked by a pad)" : "";
    if constexpr (kind<E>::leaf) {
      step(depth, PlanStep::READ, name_of(e));
    } else if constexpr (materialised<E>) {
      if constexpr (inline_size<typename E::value_type>(E::shape::size))
        step(depth, PlanStep::MATERIALISE, name_of(e) + " [on the stack]");
      else
        temp<E>(depth, PlanStep::MATERIALISE, name_of(e));
      Runs<typename E::op_type>::run(*this, e, depth + 1);
    } else if constexpr (kind<E>::gate) {
      step(depth, e.op.on ? PlanStep::INLINE : PlanStep::SKIPPED, name_of(e));
      if (e.op.on) bind<Ops>(nth_child<0>(e), depth + 1);
    } else if constexpr (kind<E>::move) {
      bind_move<Ops>(e, depth);
    } else if constexpr (hoisted<Ops, E>) {  // computed before the loop, read through the broadcast
      assign_temp(e, depth,
                  "evaluated once for the broadcast:", inline_size<typename E::value_type>(E::shape::size));
    } else {  // a constant, a map, a cast or a detach
      step(depth, PlanStep::INLINE, name_of(e) + (kind<E>::cast || kind<E>::detach ? "" : masked));
      mp::mp_for_each<mp::mp_iota_c<arity<E>>>(
          [&](auto i) { bind<Ops>(nth_child<decltype(i)::value>(e), depth + 1); });
    }
  }
  template <class Ops, class E>
  void bind_move(const E& e, int depth) {
    using Ops2 = mp::mp_push_front<Ops, typename E::op_type>;
    if constexpr (plan<Ops, E>::split) {  // a reshape no view expresses: its child evaluated first
      step(depth, PlanStep::INLINE, name_of(e) + " (reads a temporary)");
      using C = std::remove_cvref_t<decltype(nth_child<0>(e))>;
      assign_temp(nth_child<0>(e), depth + 1,
                  "evaluated for the reshape:", inline_size<typename C::value_type>(C::shape::size));
    } else {
      step(depth, PlanStep::INLINE, name_of(e));
      bind<Ops2>(nth_child<0>(e), depth + 1);
    }
  }

  // The operand readers of matmul.hpp and conv2d.hpp: in place through strides, or a temporary.
  template <class E>
  View operand(const E& e, int depth) {
    if constexpr (strided<E>::exists) {
      in_place(e, depth);
      return strided<E>::view;
    } else if constexpr (permuted<E>::exists) {
      step(depth, PlanStep::INLINE, name_of(e) + " (read through its strides)");
      assign_temp(nth_child<0>(e), depth + 1, "operand evaluated in its own order:");
      return permuted<E>::view;
    } else {
      assign_temp(e, depth, "operand evaluated:");
      return View(E::shape::dims);
    }
  }
  template <class E>
  void contiguous(const E& e, int depth) {
    if (!operand(e, depth).contiguous) assign_temp(e, depth, "operand made contiguous:");
  }
  // conv2d_vjp.hpp's channels_major: g (N, Cout, OH, OW) as (Cout, N * OH * OW).
  template <class G>
  void channels_major(const G& g, int depth) {
    constexpr Dims d = G::shape::dims;
    if constexpr (d[0] == 1) {
      contiguous(g, depth);
    } else {
      constexpr Dims nc_hw{d[0], d[1], d[2] * d[3]}, order{1, 0, 2};
      assign_temp(move<decltype(move<G, MovementOps::RESHAPE, nc_hw>(g)), MovementOps::PERMUTE, order>(
                      move<G, MovementOps::RESHAPE, nc_hw>(g)),
                  depth, "gradient channels first:");
    }
  }
  template <class T>
  void scratch(int depth, const std::string& what, index_t n) {
    step(depth, PlanStep::SCRATCH, what, rounded<T>(n));
    alloc<T>(n);
  }
  void gemm(int depth) {
    out.packing = true;
    step(depth, PlanStep::KERNEL, "blocked matmul (its packing buffers in the arena, sized by the caches)");
  }

 private:
  template <class E>
  void in_place(const E& e, int depth) {
    step(depth, PlanStep::IN_PLACE, name_of(e));
    if constexpr (!kind<E>::leaf) in_place(nth_child<0>(e), depth + 1);
  }
  std::size_t used = 0;
};

// An op this header does not know: named, its children not followed, its arena use not counted.
template <class Op>
struct Runs {
  template <class E>
  static void run(Planner& p, const E&, int depth) {
    p.out.modelled = false;
    p.step(depth, PlanStep::SKIPPED, "(not modelled by fixed::describe)");
  }
};
template <ReduceOps R, Dims Axes>
struct Runs<op::Reduce<R, Axes>> {  // one loop over the input, bound as reduce.hpp does
  template <class E>
  static void run(Planner& p, const E& e, int depth) {
    using C = mp::mp_front<typename E::children_types>;
    using L = ReduceLoop<R, typename E::shape, C>;
    p.step(
        depth, PlanStep::LOOP,
        metagrad::to_string(L::in) + " over " + metagrad::to_string(L::I) + " (reducing" +
            (L::halves ? ", each output's " + std::to_string(L::each) + " rows in halves" : std::string()) +
            ")");
    p.bind<typename L::Moves>(nth_child<0>(e), depth + 1);
    if constexpr (L::scratch_in_arena) {
      using T = typename E::value_type;
      Planner::Scope scope{p};
      p.step(depth + 1, PlanStep::SCRATCH, "scratch rows of the halves", rounded<T>(L::scratch));
      p.alloc<T>(L::scratch);
    }
  }
};
template <>
struct Runs<op::MatMul> {
  template <class E>
  static void run(Planner& p, const E& e, int depth) {
    using A = mp::mp_at_c<typename E::children_types, 0>;
    using B = mp::mp_at_c<typename E::children_types, 1>;
    Planner::Scope scope{p};
    if constexpr (small_product<A, B>) {  // matmul.hpp's small_matmul
      small_operand(p, nth_child<0>(e), depth);
      small_operand(p, nth_child<1>(e), depth);
      p.step(depth, PlanStep::KERNEL, "small matmul (unrolled loops, no packing)");
    } else {
      p.operand(nth_child<0>(e), depth);
      p.operand(nth_child<1>(e), depth);
      p.gemm(depth);
    }
  }
  template <class X>
  static void small_operand(Planner& p, const X& x, int depth) {
    if constexpr (strided<X>::exists)
      p.operand(x, depth);
    else
      p.assign_temp(x, depth, "operand evaluated:", true);
  }
};
template <index_t S, index_t P>
struct Runs<op::Conv2d<S, P>> {
  template <class E>
  static void run(Planner& p, const E& e, int depth) {
    using W = mp::mp_at_c<typename E::children_types, 1>;
    constexpr Dims dw = W::shape::dims, dout = E::shape::dims;
    Planner::Scope scope{p};
    p.contiguous(nth_child<0>(e), depth);
    p.contiguous(nth_child<1>(e), depth);
    p.scratch<typename E::value_type>(depth, "im2col of one image",
                                      dw[1] * dw[2] * dw[3] * dout[2] * dout[3]);
    p.gemm(depth);
  }
};
// The windows of the whole batch: (Cin * KH * KW) x (N * OH * OW).
template <class E, class X, class G>
constexpr index_t window_columns = E::shape::dims[1] * E::shape::dims[2] * E::shape::dims[3] *
                                   X::shape::dims[0] * G::shape::dims[2] * G::shape::dims[3];
template <index_t S, index_t P, index_t KH, index_t KW>
struct Runs<op::Conv2dGradWeight<S, P, KH, KW>> {
  template <class E>
  static void run(Planner& p, const E& e, int depth) {
    using X = mp::mp_at_c<typename E::children_types, 0>;
    using G = mp::mp_at_c<typename E::children_types, 1>;
    Planner::Scope scope{p};
    p.contiguous(nth_child<0>(e), depth);
    p.channels_major(nth_child<1>(e), depth);
    p.scratch<typename E::value_type>(depth, "im2col of the batch", window_columns<E, X, G>);
    p.gemm(depth);
  }
};
template <index_t S, index_t P, index_t H, index_t W>
struct Runs<op::Conv2dGradInput<S, P, H, W>> {  // a few images at a time, as many as a quarter of L2 holds
  template <class E>
  static void run(Planner& p, const E& e, int depth) {
    using T = typename E::value_type;
    using G = mp::mp_at_c<typename E::children_types, 0>;
    using Wt = mp::mp_at_c<typename E::children_types, 1>;
    constexpr index_t n = E::shape::dims[0], per_image = window_columns<Wt, E, G> / n;
    const index_t nb = std::clamp<index_t>(host_caches().l2 / 4 / (per_image * index_t(sizeof(T))), 1, n);
    Planner::Scope scope{p};
    p.channels_major(nth_child<0>(e), depth);
    p.contiguous(nth_child<1>(e), depth);
    p.scratch<T>(depth,
                 "columns before col2im, " + std::to_string(nb) + " of " + std::to_string(n) + " images",
                 per_image * nb);
    p.gemm(depth);
  }
};
}  // namespace metagrad::fixed::detail::describe
