#pragma once
// RawBuffer: where data actually lives (the seed's runtime/lib.py). `size` elements of `dtype`.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "metagrad/helpers.hpp"

namespace metagrad {

class RawBuffer {
 public:
  std::size_t size;
  DType dtype;

  RawBuffer(std::size_t size_, DType dtype_) : size(size_), dtype(dtype_) {
    ++live_count;
    GlobalCounters::mem_alloc(static_cast<std::int64_t>(nbytes()));
  }
  RawBuffer(const RawBuffer&) = delete;
  RawBuffer& operator=(const RawBuffer&) = delete;
  virtual ~RawBuffer() {
    if (!counted_) return;
    --live_count;
    GlobalCounters::mem_used -= static_cast<std::int64_t>(nbytes());
  }

  std::size_t nbytes() const { return size * static_cast<std::size_t>(dtype.itemsize); }
  // Byte copies between this buffer and host memory of nbytes().
  virtual void copyin(const void* host) = 0;
  virtual void copyout(void* host) const = 0;

  // The contents as host values; T must be the buffer's own element type.
  template <class T>
  std::vector<T> toCPU() const {
    if (dtype_of<T> != dtype)
      throw std::invalid_argument(std::string("RawBuffer.toCPU: the buffer holds ") + dtype.name + ", not " +
                                  dtype_of<T>.name);
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: go through bytes
      std::vector<std::uint8_t> bytes(size);
      copyout(bytes.data());
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(size);
      copyout(out.data());
      return out;
    }
  }

  // Buffers alive right now, of every device: tests check it stays flat across training steps.
  // (Their bytes are GlobalCounters::mem_used.)
  static inline std::atomic<std::int64_t> live_count = 0;

 protected:
  // A move takes over the memory, and with it its place in live_count and mem_used.
  RawBuffer(RawBuffer&& o) noexcept
      : size(o.size), dtype(o.dtype), counted_(std::exchange(o.counted_, false)) {}

 private:
  bool counted_ = true;
};

// Host memory (64-byte aligned): the buffer of CPU, CLANG and LLVM. From 1 MiB up it is a mapping
// of its own, so that freeing it gives the memory back to the system at once (malloc keeps large
// blocks once some have been freed, and a step's freed activations would stay resident).
class RawMallocBuffer : public RawBuffer {
 public:
  RawMallocBuffer(std::size_t size_, DType dtype_) : RawBuffer(size_, dtype_), ptr_(host_alloc(nbytes())) {}
  RawMallocBuffer(RawMallocBuffer&& o) noexcept
      : RawBuffer(std::move(o)), ptr_(std::exchange(o.ptr_, nullptr)) {}
  ~RawMallocBuffer() override {
    if (ptr_) host_free(ptr_, nbytes());
  }
  static std::byte* host_alloc(std::size_t bytes);  // throws std::bad_alloc
  static void host_free(std::byte* p, std::size_t bytes) noexcept;

  template <class T>
  static RawMallocBuffer fromCPU(const std::vector<T>& host) {
    RawMallocBuffer buf(host.size(), dtype_of<T>);
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<std::uint8_t> bytes(host.begin(), host.end());
      buf.copyin(bytes.data());
    } else {
      buf.copyin(host.data());
    }
    return buf;
  }

  // Empty buffers copy nothing (and an empty vector's data() may be null).
  void copyin(const void* host) override {
    if (nbytes()) std::memcpy(ptr_, host, nbytes());
  }
  void copyout(void* host) const override {
    if (nbytes()) std::memcpy(host, ptr_, nbytes());
  }
  void* data() { return ptr_; }
  const void* data() const { return ptr_; }

 private:
  std::byte* ptr_;
};

// Reads a buffer's elements as doubles (host copy), for to_vector, the interpreter and tests.
std::vector<double> read_as_double(const RawBuffer& buf);
// Writes doubles (one per element) into a buffer of any dtype, converting as C does.
void write_from_double(RawBuffer& buf, const std::vector<double>& values);

}  // namespace metagrad
