#pragma once
// The types of a fusion plan, and no planning: fixed::FusionPlan, what fixed::fusion_plan returns
// (describe.hpp), the steps of evaluating an expression into a fresh tensor and the arena memory
// they take. What fuses is decided by the inline evaluator (eval.hpp), and reported by the planner
// (detail/.../fixed/describe.hpp), which holds a FusionPlan: hence a header of its own.
#include <algorithm>
#include <cstddef>
#include <cstdio>
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
  // The plan as text, as fixed::describe prints it.
  std::string str() const {
    using R = PlanStep::Role;
    static constexpr const char* roles[] = {"loop",     "inline", "read", "materialise",
                                            "in place", "temp",   "skip", "kernel"};
    std::string out;
    for (const PlanStep& s : steps) {
      out.append(2 * static_cast<std::size_t>(s.depth), ' ');
      out += s.role == R::SCRATCH ? s.what : roles[s.role] + (" " + s.what);
      if (s.temp) out += " [temp " + bytes(s.temp) + "]";
      out += '\n';
    }
    out += "arena: " + std::to_string(temporaries) + (temporaries == 1 ? " temporary, " : " temporaries, ") +
           bytes(arena_bytes) + " at peak";
    if (packing) out += ", plus the matmul's packing buffers";
    if (!modelled) out += ", plus what the unmodelled ops take";
    return out + "\n";
  }

 private:
  // Bytes below 10 KiB, then the largest unit that keeps three significant digits before the point:
  // "512 B", "12.5 KiB", "3 MiB", "1.5 GiB".
  static std::string bytes(std::size_t b) {
    char buf[32];
    if (b < 10240) {
      std::snprintf(buf, sizeof buf, "%zu B", b);
      return buf;
    }
    double v = static_cast<double>(b) / 1024;
    const char* unit = "KiB";
    for (const char* next : {"MiB", "GiB", "TiB"})
      if (v >= 999.5) v /= 1024, unit = next;  // (999.5 would print as 1e+03)
    std::snprintf(buf, sizeof buf, "%.3g %s", v, unit);
    return buf;
  }
};

}  // namespace metagrad::fixed
