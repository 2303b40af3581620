// Host memory for RawMallocBuffer, and host conversions of a RawBuffer's elements to and from
// double, whatever its dtype.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "metagrad/device/raw_buffer.hpp"

namespace metagrad {

namespace {
constexpr std::size_t kMappedFrom = std::size_t{1} << 20;
// From here on a buffer starts on a huge-page boundary and asks for transparent huge pages: the
// first write to each 4 KiB page is a fault (about 20 us each on a virtual machine: 5 ms per MiB,
// where the kernel writes at 10 GB/s), and a model whose step makes more than the pool keeps
// (GPT-2 small's AdamW) paid it every step.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}  // namespace

std::byte* RawMallocBuffer::host_alloc(std::size_t bytes) {
  if (bytes < kMappedFrom)
    return static_cast<std::byte*>(::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{64}));
  const bool huge = bytes >= kHugePage;
  const std::size_t len = (bytes + kPage - 1) / kPage * kPage, span = huge ? len + kHugePage : len;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (!huge) return static_cast<std::byte*>(p);
  // The mapping trimmed to [start, start + len), start aligned: host_free unmaps just that.
  auto* base = static_cast<std::byte*>(p);
  const std::size_t head = (kHugePage - reinterpret_cast<std::uintptr_t>(base) % kHugePage) % kHugePage;
  if (head) munmap(base, head);
  if (span - head > len) munmap(base + head + len, span - head - len);
#if defined(MADV_HUGEPAGE)
  madvise(base + head, len, MADV_HUGEPAGE);  // (advice: ignored where huge pages are off)
#endif
  return base + head;
}

void RawMallocBuffer::host_free(std::byte* p, std::size_t bytes) noexcept {
  if (bytes < kMappedFrom)
    ::operator delete (p, std::align_val_t{64});
  else
    munmap(p, bytes);
}

namespace {

// A host value of a realized buffer's element i, as double.
double element_as_double(const std::byte* p, DType dt, std::size_t i) {
  switch (dt.priority) {
    case dtypes::bool_.priority:
      return reinterpret_cast<const bool*>(p)[i];
    case dtypes::int8.priority:
      return reinterpret_cast<const std::int8_t*>(p)[i];
    case dtypes::uint8.priority:
      return reinterpret_cast<const std::uint8_t*>(p)[i];
    case dtypes::int16.priority:
      return reinterpret_cast<const std::int16_t*>(p)[i];
    case dtypes::uint16.priority:
      return reinterpret_cast<const std::uint16_t*>(p)[i];
    case dtypes::int32.priority:
      return reinterpret_cast<const std::int32_t*>(p)[i];
    case dtypes::uint32.priority:
      return reinterpret_cast<const std::uint32_t*>(p)[i];
    case dtypes::int64.priority:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
    case dtypes::uint64.priority:
      return static_cast<double>(reinterpret_cast<const std::uint64_t*>(p)[i]);
    case dtypes::float16.priority:
      return half::to_float(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case dtypes::bfloat16.priority:
      return bf16::to_float(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case dtypes::float32.priority:
      return reinterpret_cast<const float*>(p)[i];
    default:
      return reinterpret_cast<const double*>(p)[i];
  }
}

}  // namespace

void write_from_double(RawBuffer& buf, const std::vector<double>& v) {
  std::vector<std::byte> bytes(buf.nbytes());
  auto put = [&]<class T>(T*) {
    for (std::size_t i = 0; i < buf.size; ++i) reinterpret_cast<T*>(bytes.data())[i] = static_cast<T>(v[i]);
  };
  switch (buf.dtype.priority) {
    case dtypes::bool_.priority:
      for (std::size_t i = 0; i < buf.size; ++i) reinterpret_cast<bool*>(bytes.data())[i] = v[i] != 0;
      break;
    case dtypes::int8.priority:
      put(static_cast<std::int8_t*>(nullptr));
      break;
    case dtypes::uint8.priority:
      put(static_cast<std::uint8_t*>(nullptr));
      break;
    case dtypes::int16.priority:
      put(static_cast<std::int16_t*>(nullptr));
      break;
    case dtypes::uint16.priority:
      put(static_cast<std::uint16_t*>(nullptr));
      break;
    case dtypes::int32.priority:
      put(static_cast<std::int32_t*>(nullptr));
      break;
    case dtypes::uint32.priority:
      put(static_cast<std::uint32_t*>(nullptr));
      break;
    case dtypes::int64.priority:
      put(static_cast<std::int64_t*>(nullptr));
      break;
    case dtypes::uint64.priority:  // saturating: a plain conversion of a negative or of 2^64 is undefined
      for (std::size_t i = 0; i < buf.size; ++i)
        reinterpret_cast<std::uint64_t*>(bytes.data())[i] = !(v[i] > 0) ? 0
                                                            : v[i] >= 0x1p64
                                                                ? ~std::uint64_t{0}
                                                                : static_cast<std::uint64_t>(v[i]);
      break;
    case dtypes::float16.priority:
      for (std::size_t i = 0; i < buf.size; ++i)
        reinterpret_cast<std::uint16_t*>(bytes.data())[i] = half::from_float(static_cast<float>(v[i]));
      break;
    case dtypes::bfloat16.priority:
      for (std::size_t i = 0; i < buf.size; ++i)
        reinterpret_cast<std::uint16_t*>(bytes.data())[i] = bf16::from_float(static_cast<float>(v[i]));
      break;
    case dtypes::float32.priority:
      put(static_cast<float*>(nullptr));
      break;
    default:
      put(static_cast<double*>(nullptr));
      break;
  }
  buf.copyin(bytes.data());
}

std::vector<double> read_as_double(const RawBuffer& buf) {
  std::vector<std::byte> bytes(buf.nbytes());
  buf.copyout(bytes.data());
  std::vector<double> out(buf.size);
  for (std::size_t i = 0; i < buf.size; ++i) out[i] = element_as_double(bytes.data(), buf.dtype, i);
  return out;
}

}  // namespace metagrad
