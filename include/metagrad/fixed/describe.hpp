#pragma once
// fixed::describe: the fusion plan of a static expression, as inline evaluation (eval.hpp) runs it
// into a fresh tensor: each loop nest, the nodes it computes element by element, the nodes
// materialised whole before it (reductions, matmuls, convolutions and their gradients) and the
// arena temporaries they take. The walk is assign()'s own, with the same compile-time plan, and it
// replays the arena's scopes, so `arena_bytes` is the high-water mark the evaluation reaches
// (the blocked matmul's packing buffers aside: their size depends on the host's caches).
//
//   std::cout << fx::describe(fx::matmul(x, w).relu());   // x (4, 3), w (3, 5)
//   loop (4, 5) over (20,) [into destination]
//     inline Map relu (4, 5)
//       materialise MatMul (4, 3) @ (3, 5) -> (4, 5) [temp 128 B]
//   ...
#include <cstddef>
#include <string>
#include <utility>

#include "metagrad/detail/fixed/describe.hpp"
#include "metagrad/fixed/fusion_plan.hpp"
#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

// The plan of evaluating e into a fresh tensor.
template <Operand E>
FusionPlan fusion_plan(const E& e) {
  detail::describe::Planner p;
  p.assign(e.expr(), 0, true);
  return std::move(p.out);
}

// The plan as text: one line per step, indented by nesting (see the top of this file).
template <Operand E>
std::string describe(const E& e) {
  return fusion_plan(e).str();
}
// Each gradient's plan, under a line naming its parameter's position and shape.
template <class E, class... P>
std::string describe(const Gradients<E, P...>& g) {
  std::string out;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((out += "gradient " + std::to_string(K) + " " + metagrad::to_string(TensorOf<P>::shape::dims) + ":\n" +
             describe(g.template get<K>())),
     ...);
  }
  (std::index_sequence_for<P...>{});
  return out;
}

}  // namespace metagrad::fixed
