// BufferPool: freed buffers by (size, dtype), handed out again before the device allocates.
#include "metagrad/device/buffer_pool.hpp"

#include <algorithm>
#include <new>

namespace metagrad {

namespace {
std::uint64_t key(std::size_t size, DType dtype) {
  return static_cast<std::uint64_t>(size) << 4 | static_cast<std::uint64_t>(dtype.priority);
}
}  // namespace

std::shared_ptr<RawBuffer> BufferPool::alloc(std::size_t size, DType dtype) {
  std::shared_ptr<RawBuffer> inner;
  // Kept buffers let go to make room for a fresh one, freed outside the lock.
  std::vector<std::shared_ptr<RawBuffer>> room;
  {
    std::lock_guard lock(mu_);
    if (auto it = free_.find(key(size, dtype)); it != free_.end() && !it->second.empty()) {
      inner = std::move(it->second.back().buf);  // the warmest in cache
      it->second.pop_back();
      stats_.pooled -= 1, stats_.pooled_bytes -= inner->nbytes(), stats_.reused += 1;
      in_use(static_cast<std::int64_t>(inner->nbytes()));
      ++RawBuffer::live_count;  // in use again
      GlobalCounters::mem_alloc(static_cast<std::int64_t>(inner->nbytes()));
    } else {
      make_room(size * static_cast<std::size_t>(dtype.itemsize), room);
    }
  }
  room.clear();
  if (!inner) {
    try {
      inner = make_(size, dtype);
    } catch (const std::exception&) {  // out of memory (host or device): free what is pooled, retry
      if (stats().pooled == 0) throw;
      clear();
      inner = make_(size, dtype);
    }
    std::lock_guard lock(mu_);
    stats_.fresh += 1;
    in_use(static_cast<std::int64_t>(inner->nbytes()));
  }
  RawBuffer* raw = inner.get();
  return {raw, [pool = shared_from_this(), inner = std::move(inner)](RawBuffer*) mutable {
            pool->give_back(std::move(inner));
          }};
}

void BufferPool::in_use(std::int64_t bytes) {
  stats_.in_use_bytes = static_cast<std::size_t>(static_cast<std::int64_t>(stats_.in_use_bytes) + bytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes);
}

void BufferPool::make_room(std::size_t bytes, std::vector<std::shared_ptr<RawBuffer>>& out) {
  if (slack_ < 0) return;
  const std::size_t slack = static_cast<std::size_t>(slack_),
                    limit = std::max(stats_.peak_bytes, stats_.in_use_bytes + bytes) + slack;
  while (stats_.pooled > 0 && stats_.in_use_bytes + stats_.pooled_bytes + bytes > limit) {
    auto newest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (!it->second.empty() &&
          (newest == free_.end() || it->second.back().since > newest->second.back().since))
        newest = it;
    std::vector<Kept>& v = newest->second;
    out.push_back(std::move(v.back().buf));
    v.pop_back();
    stats_.pooled -= 1, stats_.pooled_bytes -= out.back()->nbytes(), stats_.evicted += 1;
    // Counted out by its destructor, like a buffer never pooled (added back without a new peak).
    ++RawBuffer::live_count;
    GlobalCounters::mem_used += static_cast<std::int64_t>(out.back()->nbytes());
  }
}

void BufferPool::give_back(std::shared_ptr<RawBuffer> b) {
  std::unique_lock lock(mu_);
  // Kept only while what is in use and kept (b among them) is within the peak in use and the slack.
  const bool keep = slack_ >= 0 && stats_.in_use_bytes + stats_.pooled_bytes <=
                                       stats_.peak_bytes + static_cast<std::size_t>(slack_);
  in_use(-static_cast<std::int64_t>(b->nbytes()));
  if (!keep) {
    lock.unlock();  // freed here, outside the lock
    return;
  }
  stats_.pooled += 1, stats_.pooled_bytes += b->nbytes();
  --RawBuffer::live_count;  // free memory now, though the object lives on
  GlobalCounters::mem_used -= static_cast<std::int64_t>(b->nbytes());
  free_[key(b->size, b->dtype)].push_back({returns_++, std::move(b)});
}

void BufferPool::clear() {
  decltype(free_) dropped;
  std::lock_guard lock(mu_);
  dropped.swap(free_);
  // Their destructors count them out (added back without touching mem_peak: never in use).
  RawBuffer::live_count += static_cast<std::int64_t>(stats_.pooled);
  GlobalCounters::mem_used += static_cast<std::int64_t>(stats_.pooled_bytes);
  stats_.pooled = stats_.pooled_bytes = 0;
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace metagrad
