#pragma once
// The schedule cache: a realize's plans kept by the graph they were made from, so a graph that
// comes again (an eager training loop's step) is not scheduled again (tinygrad's schedule cache).
// Private to the library's sources.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "metagrad/lazy.hpp"
#include "schedule_plan.hpp"

namespace metagrad::scheduler {

// The unrealized graph below a realize's targets, down to realized buffers, written out as tokens:
// each buffer once, with everything the scheduler reads of it (op and argument, dtype, device,
// views, whether it is realized, its live consumers), later visits as a reference to its number.
// Two graphs with equal tokens are scheduled alike, their buffers standing in for each other by
// number. Buffers are numbered by first visit (`nodes`, and `number` back); both are valid while
// the graph is unchanged. The flags that change how a graph is scheduled are tokens too. A graph
// past the cache's largest is not written out: its key has no nodes.
struct GraphKey {
  std::string tokens;
  std::vector<LazyBuffer*> nodes;
  std::unordered_map<const LazyBuffer*, std::uint32_t> number;
  std::size_t hash = 0;
};
GraphKey graph_key(const std::vector<LazyBufferPtr>& targets, const RealizeFlags& flags);

// Process-wide, under the realize lock.
class ScheduleCache {
 public:
  // The plans for key's graph when an equal graph was scheduled before (loads made anew, kernels
  // with their ASTs), or nothing.
  std::optional<std::vector<Plan>> find(const GraphKey& key);
  // Keeps order, made from key's graph, when the graph was scheduled before, unless a plan names a
  // buffer outside it (a FROM's contiguous copy made while scheduling).
  void add(GraphKey key, const std::vector<Plan>& order);
  static ScheduleCache& get();

 private:
  struct Entry {
    std::string tokens;
    struct Step {
      std::uint32_t buf;
      std::shared_ptr<LazyOp> ast;  // null for a load
      std::vector<std::uint32_t> leaves, stores;
      std::int64_t from = -1;
      std::shared_ptr<Plan::Runner> runner;
    };
    std::vector<Step> steps;
    std::uint64_t used;  // the lookup that last found or made it
  };
  std::unordered_multimap<std::size_t, Entry> entries_;
  std::unordered_set<std::size_t> seen_;  // graphs scheduled once, by hash
  std::uint64_t clock_ = 0;               // lookups so far
  std::size_t bytes_ = 0;                 // of all entries' tokens
};

// The plans of eager ops: one elementwise op over up to three realized buffers read whole (W6's
// a + b), whose kernel is its op over its sources as they are. Such a plan is found by the op, its
// output's dtype and device and its sources' dtypes and views (and which of them are one buffer),
// without building its AST and its kernel cache key again (a third of an eager op's time).
// Process-wide, under the realize lock.
class EagerCache {
 public:
  // target's plan, from the cache when target is such an op, else made by `make` (and kept when
  // target is such an op).
  Plan plan(const LazyBufferPtr& target, Plan (*make)(const LazyBufferPtr&));
  static EagerCache& get();

 private:
  static constexpr std::size_t kMaxSrc = 3, kSlots = 64;
  struct Entry {
    Op op{UnaryOps::NOOP};
    DType dtype{};
    std::optional<DType> cast;  // the op's argument (a CAST's dtype), or none
    std::string device;
    std::size_t n = 0;
    std::array<std::uint8_t, kMaxSrc> same{};  // source i is source same[i] (the first of them)
    std::array<DType, kMaxSrc> dtypes{};
    std::vector<ShapeTracker> views;
    std::array<std::uint8_t, kMaxSrc> leaf{};  // the kernel's buffer k + 1 is source leaf[k]
    std::size_t leaves = 0;
    std::shared_ptr<LazyOp> ast;
    std::shared_ptr<Plan::Runner> runner;
  };
  std::array<std::optional<Entry>, kSlots> slots_;  // direct-mapped by a hash of the op and shapes
};

}  // namespace metagrad::scheduler
