// What a realize says on stderr under DEBUG: the kernels it must build first and how many of them the
// disk cache has (DEBUG>=1), and its totals once it has run (DEBUG>=2). Each kernel's own line is
// ASTRunner::exec's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "schedule_plan.hpp"

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/env.hpp"

namespace metagrad::scheduler {

namespace {
std::string fixed3(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}
}  // namespace

namespace {
RealizeFlags read_flags() {
  RealizeFlags f;
  bool graph = false, debug = false, multi = false, cache = false;  // the first of each counts, as getenv
  constexpr std::size_t kMulti = sizeof "METAGRAD_MULTI_OUTPUT=" - 1;
  constexpr std::size_t kCache = sizeof "METAGRAD_SCHEDULE_CACHE=" - 1;
  for (char** e = environ; e && *e && !(graph && debug && multi && cache); ++e) {
    const char* v = *e;  // (the first letter first: most variables are none of them)
    if (v[0] == 'G' && !graph && std::strncmp(v, "GRAPH=", 6) == 0)
      f.graph = std::strtol(v + 6, nullptr, 10), graph = true;
    else if (v[0] == 'D' && !debug && std::strncmp(v, "DEBUG=", 6) == 0)
      f.debug = std::strtol(v + 6, nullptr, 10), debug = true;
    else if (v[0] == 'M' && !multi && std::strncmp(v, "METAGRAD_MULTI_OUTPUT=", kMulti) == 0)
      f.multi_output = std::strtol(v + kMulti, nullptr, 10), multi = true;
    else if (v[0] == 'M' && !cache && std::strncmp(v, "METAGRAD_SCHEDULE_CACHE=", kCache) == 0)
      f.schedule_cache = std::strtol(v + kCache, nullptr, 10), cache = true;
  }
  return f;
}
}  // namespace

RealizeFlags realize_flags() {
  return detail::env_cached([] { return read_flags(); });
}

RealizeReport::RealizeReport(long debug, bool cached)
    : debug_(debug),
      cached_(cached),
      kernels_(GlobalCounters::kernel_count),
      ops_(GlobalCounters::global_ops),
      mem_(GlobalCounters::global_mem),
      time_(GlobalCounters::time_sum),
      compile_(GlobalCounters::compile_time),
      start_(std::chrono::steady_clock::now()) {}

void RealizeReport::build(std::span<const Plan> order) const {
  std::map<std::string, std::vector<std::pair<const LazyOp*, DType>>> by_device;
  for (const Plan& p : order)
    if (runs_kernel(p)) by_device[p.buf->device].emplace_back(p.ast.get(), p.buf->dtype);
  for (const auto& [device, kernels] : by_device)
    if (auto* dev = dynamic_cast<Compiled*>(&Device::get(device)))
      dev->prebuild(kernels, [](std::size_t n, std::size_t from_disk) {
        std::fprintf(stderr, "compiling %zu kernel%s (%zu from cache)\n", n, n == 1 ? "" : "s", from_disk);
      });
}

void RealizeReport::finish() const {
  std::int64_t kernels = GlobalCounters::kernel_count - kernels_;
  if (debug_ < 2 || kernels < 2) return;  // one kernel's own line says it all
  double t = std::max(GlobalCounters::time_sum - time_, 1e-9);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // The wall time split: compiling (code generation and the compiler), running the kernels, and the
  // rest (scheduling the graph, allocating, launching).
  double compiling = GlobalCounters::compile_time - compile_;
  std::string split = compiling > 0 ? detail::cat(" (", fixed3(compiling * 1e3), " compiling, ",
                                                  fixed3(std::max(wall - compiling - t, 0.0) * 1e3),
                                                  " scheduling and launching)")
                                    : "";
  std::fprintf(stderr,
               "*** realize: %lld kernels%s, %.3f ms in kernels (%.2f GFLOP/s, %.2f GB/s), %.3f ms wall%s, "
               "mem %s in use, %s peak\n",
               static_cast<long long>(kernels), cached_ ? " (schedule from cache)" : "", t * 1e3,
               static_cast<double>(GlobalCounters::global_ops - ops_) / t * 1e-9,
               static_cast<double>(GlobalCounters::global_mem - mem_) / t * 1e-9, wall * 1e3, split.c_str(),
               human_bytes(GlobalCounters::mem_used).c_str(), human_bytes(GlobalCounters::mem_peak).c_str());
}

}  // namespace metagrad::scheduler
