#pragma once
// fixed::FusionPlan, what fixed::fusion_plan returns (describe.hpp, which also defines str()): the
// steps of evaluating an expression into a fresh tensor, and the arena memory they take.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace metagrad::fixed {

// One node (or one loop, or one scratch buffer) of a plan.
struct PlanStep {
  enum Role { LOOP, INLINE, READ, MATERIALISE, IN_PLACE, SCRATCH, SKIPPED, KERNEL };
  int depth = 0;  // nesting, for the tree
  Role role = INLINE;
  std::string what;      // op and shapes: "MatMul (4, 3) @ (3, 5) -> (4, 5)"
  std::size_t temp = 0;  // arena bytes this step allocates (0: none)
};

// What evaluating an expression into a fresh tensor does.
struct FusionPlan {
  std::vector<PlanStep> steps;  // preorder
  std::size_t arena_bytes = 0;  // the arena's high-water mark, packing buffers aside
  std::size_t temporaries = 0;  // blocks taken from the arena (steps with a temp), packing aside
  bool packing = false;         // a blocked matmul runs, adding its packing buffers
  bool modelled = true;         // false: an op fixed::describe does not know (its arena use is not counted)

  std::size_t count(PlanStep::Role r) const {
    return static_cast<std::size_t>(
        std::count_if(steps.begin(), steps.end(), [&](const PlanStep& s) { return s.role == r; }));
  }
  std::string str() const;  // the plan as text, as fixed::describe prints it (defined in describe.hpp)
};

}  // namespace metagrad::fixed
