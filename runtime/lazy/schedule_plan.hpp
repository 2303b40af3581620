#pragma once
// The scheduler's plan of one buffer (schedule.cpp), and what a realize tells its user about its
// plans (realize_report.cpp: DEBUG's notices and totals; graph.cpp: GRAPH=1's picture). Private to
// the library's sources.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "metagrad/lazy.hpp"

namespace metagrad::scheduler {

// A kernel (`ast`, reading `leaves`) or a direct load (EMPTY, CONST, FROM, RAND, CUSTOM).
struct Plan {
  LazyBufferPtr buf;
  std::shared_ptr<LazyOp> ast;        // a kernel; null for a direct load
  std::vector<LazyBufferPtr> leaves;  // the kernel's inputs: leaves[i] is its buffer i + 1
  std::vector<LazyBufferPtr> deps;
  // A multi-store kernel's other outputs (ast.hpp), its buffers after the inputs, in order: buffers
  // of its shape it computes as well, each once a kernel of its own (schedule.cpp, merge_stores).
  std::vector<LazyBufferPtr> stores;
  LazyBufferPtr from;       // FROM: the contiguous source on its own device
  std::int64_t launch = 0;  // a kernel's number once it ran (GlobalCounters::kernel_count, DEBUG=2's)
  // A cached schedule's kernel (schedule_cache.hpp): its device's runner, found by its first run and
  // kept, so later steps do not key the AST again. Shared by the plans made from one cache entry.
  struct Runner {
    const Backend* dev = nullptr;
    const ASTRunner* runner = nullptr;  // (a Compiled's runners are never dropped)
  };
  std::shared_ptr<Runner> runner;
};

// A CONTIGUOUS whose source is already its values in order: it shares the source's memory, no kernel.
bool shares_source(const Plan& p);
// Whether the plan launches a kernel: an AST with a non-empty result that is not a shared source.
inline bool runs_kernel(const Plan& p) { return p.ast && p.buf->st.size() != 0 && !shares_source(p); }

// Env GRAPH, DEBUG, METAGRAD_MULTI_OUTPUT and METAGRAD_SCHEDULE_CACHE, read in one pass over the environment:
// realize reads them on every op.
struct RealizeFlags {
  long graph = 0, debug = 0;
  long multi_output = 1;    // 0: no multi-output kernels (schedule.cpp, merge_stores)
  long schedule_cache = 1;  // 0: every realize schedules its graph (schedule_cache.hpp)
};
RealizeFlags realize_flags();

// GRAPH=1: adds a realize's plans to the graph file, rewritten as DOT after every realize and laid
// out as SVG by Graphviz's `dot` when the process exits. Drawn before the plans run (running them
// drops what a load was), written once they ran (or failed): a kernel's cluster is then labelled
// with its number and name as DEBUG=2 prints them.
struct GraphDraft {
  std::string body;
};
GraphDraft graph(std::span<const Plan> order);
void graph(GraphDraft draft, std::span<const Plan> order);

// DEBUG>=1: build() compiles a realize's kernels not built yet before any runs, saying
// "compiling N kernels (M from cache)" per device, M of them found in the disk cache. DEBUG>=2:
// finish(), when the realize ran more than one kernel, prints a line of totals (kernels, time,
// GFLOP/s, memory in use and at peak).
class RealizeReport {
 public:
  // cached: the schedule came from the schedule cache (said in the totals).
  explicit RealizeReport(long debug, bool cached = false);
  void build(std::span<const Plan> order) const;
  void finish() const;  // the totals

 private:
  long debug_;
  bool cached_;
  std::int64_t kernels_, ops_, mem_;
  double time_, compile_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace metagrad::scheduler
