#pragma once
// Internal to runtime/dist: a tensor's bytes as the collectives need them. A device whose buffers
// are RawMallocBuffers (CPU, CLANG, LLVM) is read and written in place; any other goes through
// RawBuffer::copyout / copyin.
#include <cstring>
#include <memory>

#include "metagrad/detail/cat.hpp"
#include "metagrad/dist/comm.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::dist {

// Collectives are not kernels, so a TinyJit capture would silently drop them: refuse.
inline void not_in_jit(const char* op) {
  if (CaptureLog::active)
    throw Error(metagrad::detail::cat(
        "dist: ", op,
        " cannot run inside a TinyJit step (a replay repeats kernels, not collectives): return the "
        "gradients from one jitted step, reduce them, and pass them to a second (docs/distributed.md)"));
}

// t realized, as a base buffer of exactly its elements (a contiguous copy for a view of more).
inline std::shared_ptr<RawBuffer> realized_whole(const Tensor& t) {
  Tensor r = t;
  r.realize();
  LazyBufferPtr lb = r.lazydata;
  if (lb->base() == lb && lb->realized && static_cast<std::int64_t>(lb->realized->size) == t.numel())
    return lb->realized;
  LazyBufferPtr c = LazyBuffer::loadop(LoadOps::CONTIGUOUS, t.shape(), t.dtype(), t.device(), {}, {lb});
  c->realize();
  return c->realized;
}

inline void* host_pointer(RawBuffer& b) {
  auto* m = dynamic_cast<RawMallocBuffer*>(&b);
  return m ? m->data() : nullptr;
}

inline void copy_to_host(RawBuffer& b, void* host) {
  if (b.nbytes() == 0) return;  // (an empty vector's data() may be null, which memcpy may not get)
  if (const void* p = host_pointer(b))
    std::memcpy(host, p, b.nbytes());
  else
    b.copyout(host);
}

inline void copy_from_host(RawBuffer& b, const void* host) {
  if (b.nbytes() == 0) return;
  if (void* p = host_pointer(b))
    std::memcpy(p, host, b.nbytes());
  else
    b.copyin(host);
}

// t now reads `buf` (as Tensor::assign replaces the data: every copy of the handle sees it).
inline void rebind(Tensor& t, std::shared_ptr<RawBuffer> buf) {
  t.lazydata = LazyBuffer::from_raw(std::move(buf), t.shape(), t.device());
}

}  // namespace metagrad::dist
