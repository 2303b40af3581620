#pragma once
// BufferPool: a compiled device's freed buffers, kept for reuse by size and dtype (tinygrad's LRU
// allocator). A realize that repeats (an eager loop, a training step) gets back the memory its last
// run freed: no page faults on fresh pages, no driver allocation. Bounded by what the device has
// needed: the buffers in use and those kept stay, together, within the most that was ever in use
// at once plus `slack` bytes (env METAGRAD_POOL_MB, default 1024; negative keeps none). A freed buffer
// is kept while that holds; an allocation the pool cannot serve first frees kept buffers, the
// most recently kept first, until the new one fits (a step that repeats next needs what it freed
// earliest: freeing the longest kept first missed on every buffer of a training step). So a step that needs
// gigabytes (GPT-2 small's AdamW writes each parameter, moment and gradient anew) keeps them from step to
// step, and the pool never makes the device hold more than its peak and the slack: buffers kept by size would
// otherwise add up to more than the peak, each size's most at once, where different sizes peak at different
// times. An allocation that fails empties the pool and is tried once more. Pooled buffers are free
// memory, counted neither in RawBuffer::live_count nor in GlobalCounters::mem_used.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "metagrad/device/raw_buffer.hpp"

namespace metagrad {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  using Factory = std::function<std::shared_ptr<RawBuffer>(std::size_t, DType)>;
  BufferPool(Factory make, std::int64_t slack_bytes) : make_(std::move(make)), slack_(slack_bytes) {}
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
    std::int64_t evicted = 0;                      // kept buffers freed to make room for a fresh one
    std::size_t in_use_bytes = 0, peak_bytes = 0;  // handed out and not yet back; the most at once
  };
  Stats stats() const;

 private:
  struct Kept {
    std::uint64_t since;  // give-backs before this one: the largest was kept last
    std::shared_ptr<RawBuffer> buf;
  };
  void give_back(std::shared_ptr<RawBuffer> b);
  void in_use(std::int64_t bytes);  // (under mu_) bytes handed out (+) or given back (-)
  // (under mu_) Moves kept buffers into `out`, most recently kept first, until `bytes` more in use fit.
  void make_room(std::size_t bytes, std::vector<std::shared_ptr<RawBuffer>>& out);

  Factory make_;
  std::int64_t slack_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::vector<Kept>> free_;  // each oldest first
  std::uint64_t returns_ = 0;
  Stats stats_;
};

}  // namespace metagrad
