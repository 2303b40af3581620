#pragma once
// BufferPool: a compiled device's freed buffers, kept for reuse by size and dtype (tinygrad's LRU
// allocator). A realize that repeats (an eager loop, a training step) gets back the memory its last
// run freed: no page faults on fresh pages, no driver allocation. Bounded by what the device has
// needed: a freed buffer is kept while the buffers in use and those kept, together, stay within
// the most that was ever in use at once plus `cap` bytes (env METAGRAD_POOL_MB, default 1024; 0
// keeps none), and freed otherwise. So a step that needs gigabytes (GPT-2 small's AdamW writes
// each parameter, moment and gradient anew) keeps them from step to step, and the pool never makes
// the device hold more than its peak and the cap. An allocation that fails empties the pool and is
// tried once more. Pooled buffers are free memory, counted neither in RawBuffer::live_count nor in
// GlobalCounters::mem_used.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "metagrad/runtime/lib.hpp"

namespace metagrad {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  using Factory = std::function<std::shared_ptr<RawBuffer>(std::size_t, DType)>;
  BufferPool(Factory make, std::size_t cap_bytes) : make_(std::move(make)), cap_(cap_bytes) {}
  ~BufferPool() { clear(); }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // `size` elements of `dtype` (contents unspecified); back to the pool when its last owner drops it.
  // The pool must be owned by a shared_ptr: its buffers keep it alive.
  std::shared_ptr<RawBuffer> alloc(std::size_t size, DType dtype);
  void clear();  // frees every pooled buffer

  struct Stats {
    std::size_t pooled = 0, pooled_bytes = 0;      // buffers waiting for reuse
    std::int64_t reused = 0, fresh = 0;            // allocations served from the pool / by the device
    std::size_t in_use_bytes = 0, peak_bytes = 0;  // handed out and not yet back; the most at once
  };
  Stats stats() const;

 private:
  void give_back(std::shared_ptr<RawBuffer> b);
  void in_use(std::int64_t bytes);  // (under mu_) bytes handed out (+) or given back (-)

  Factory make_;
  std::size_t cap_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::vector<std::shared_ptr<RawBuffer>>> free_;
  Stats stats_;
};

}  // namespace metagrad
