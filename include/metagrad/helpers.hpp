#pragma once
// The bottom layer (the seed's helpers.py): dtypes, environment flags, global counters.
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace metagrad {

// A scalar type. `priority` names it (and orders bool < ints < floats for the first nine, the seed's;
// promote_types decides between integers by kind and size); `kind` is 'b', 'i', 'u' or 'f'.
struct DType {
  int priority;
  int itemsize;
  const char* name;
  char kind;
  friend constexpr bool operator==(const DType& a, const DType& b) { return a.priority == b.priority; }
};

namespace dtypes {
inline constexpr DType bool_{0, 1, "bool", 'b'};
inline constexpr DType int8{1, 1, "int8", 'i'};
inline constexpr DType uint8{2, 1, "uint8", 'u'};
inline constexpr DType int32{4, 4, "int32", 'i'};
inline constexpr DType int64{5, 8, "int64", 'i'};
inline constexpr DType bfloat16{8, 2, "bfloat16", 'f'};  // float32's range, 8 bits of precision
inline constexpr DType float16{9, 2, "float16", 'f'};
inline constexpr DType float32{10, 4, "float32", 'f'};
inline constexpr DType float64{11, 8, "float64", 'f'};
// tinygrad's other integers.
inline constexpr DType int16{12, 2, "int16", 'i'};
inline constexpr DType uint16{13, 2, "uint16", 'u'};
inline constexpr DType uint32{14, 4, "uint32", 'u'};
inline constexpr DType uint64{15, 8, "uint64", 'u'};
inline constexpr DType all[] = {bool_,   int8,    uint8, int32,  int64,  float16, bfloat16,
                                float32, float64, int16, uint16, uint32, uint64};

constexpr bool is_float(DType d) { return d.kind == 'f'; }
constexpr bool is_int(DType d) { return d.kind == 'i' || d.kind == 'u'; }
constexpr bool is_unsigned(DType d) { return d.kind == 'u'; }
// The smallest value of a dtype (-inf for floats): the identity of a max reduction.
constexpr double min_value(DType d) {
  switch (d.priority) {
    case int8.priority:
      return -128;
    case int16.priority:
      return -32768;
    case int32.priority:
      return -2147483648.0;
    case int64.priority:
      return -9223372036854775808.0;
    case bool_.priority:
    case uint8.priority:
    case uint16.priority:
    case uint32.priority:
    case uint64.priority:
      return 0;
    default:
      return -__builtin_inf();
  }
}
// One past the largest value of an integer dtype: a power of two every float holds (int64: 2^63,
// uint64: 2^64).
constexpr double limit(DType d) {
  double m = 1;
  for (int b = 0; b < d.itemsize * 8 - (d.kind == 'u' ? 0 : 1); ++b) m *= 2;
  return d == bool_ ? 2 : m;
}
}  // namespace dtypes

// The result type of a binary op on a and b, as PyTorch and tinygrad promote:
// int + float -> float, bool + int -> int, and the wider of two of a kind. A signed and an unsigned
// integer give the narrowest signed one holding both (int8 + uint8 -> int16, int32 + uint32 -> int64);
// uint64 and a signed integer have none: tinygrad's lattice meets them in its default float, float32
// (numpy gives float64, PyTorch refuses). float16 + bfloat16 -> float32 (neither holds the other).
constexpr DType promote_types(DType a, DType b) {
  if ((a == dtypes::float16 && b == dtypes::bfloat16) || (a == dtypes::bfloat16 && b == dtypes::float16))
    return dtypes::float32;
  if (dtypes::is_int(a) && dtypes::is_int(b)) {
    if (a.kind == b.kind) return a.itemsize >= b.itemsize ? a : b;
    DType s = a.kind == 'i' ? a : b, u = a.kind == 'u' ? a : b;
    if (s.itemsize > u.itemsize) return s;
    if (u.itemsize == 8) return dtypes::float32;
    return u.itemsize == 1 ? dtypes::int16 : u.itemsize == 2 ? dtypes::int32 : dtypes::int64;
  }
  if (dtypes::is_float(a) != dtypes::is_float(b)) return dtypes::is_float(a) ? a : b;
  if (a == dtypes::bool_ || b == dtypes::bool_) return a == dtypes::bool_ ? b : a;
  return a.priority >= b.priority ? a : b;
}

// IEEE half precision storage. Arithmetic happens in float; conversions round to nearest even.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  half(float f) : bits(from_float(f)) {}             // NOLINT: implicit, like float16 in numpy
  operator float() const { return to_float(bits); }  // NOLINT

  static std::uint16_t from_float(float f) {
    std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    std::uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (m ? 0x200u : 0u));  // inf, nan
    int exp = static_cast<int>(e) - 127 + 15;
    if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (exp <= 0) {                                                    // subnormal or zero
      if (exp < -10) return static_cast<std::uint16_t>(sign);
      m |= 0x800000u;
      int shift = 14 - exp;
      std::uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
      return static_cast<std::uint16_t>(sign | r);
    }
    std::uint32_t r = (static_cast<std::uint32_t>(exp) << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: still right
    return static_cast<std::uint16_t>(sign | r);
  }
  static float to_float(std::uint16_t h) {
    std::uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
      float v = static_cast<float>(m) * (1.0f / 16777216.0f);  // m * 2^-24
      return sign ? -v : v;
    }
    return std::bit_cast<float>(sign | ((e - 15 + 127) << 23) | (m << 13));
  }
};

// bfloat16 storage: float32's upper 16 bits. Arithmetic happens in float; conversions from float
// round to nearest even, NaN stays a (quiet) NaN of the same sign.
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  bf16(float f) : bits(from_float(f)) {}             // NOLINT: implicit, like half
  operator float() const { return to_float(bits); }  // NOLINT

  static std::uint16_t from_float(float f) {
    std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // a carry is right too
  }
  static float to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
};

template <class T>
struct dtype_of_t;
template <>
struct dtype_of_t<bool> {
  static constexpr DType value = dtypes::bool_;
};
template <>
struct dtype_of_t<std::int8_t> {
  static constexpr DType value = dtypes::int8;
};
template <>
struct dtype_of_t<std::uint8_t> {
  static constexpr DType value = dtypes::uint8;
};
template <>
struct dtype_of_t<std::int16_t> {
  static constexpr DType value = dtypes::int16;
};
template <>
struct dtype_of_t<std::uint16_t> {
  static constexpr DType value = dtypes::uint16;
};
template <>
struct dtype_of_t<std::uint32_t> {
  static constexpr DType value = dtypes::uint32;
};
template <>
struct dtype_of_t<std::uint64_t> {
  static constexpr DType value = dtypes::uint64;
};
template <>
struct dtype_of_t<std::int32_t> {
  static constexpr DType value = dtypes::int32;
};
template <>
struct dtype_of_t<std::int64_t> {
  static constexpr DType value = dtypes::int64;
};
template <>
struct dtype_of_t<half> {
  static constexpr DType value = dtypes::float16;
};
template <>
struct dtype_of_t<bf16> {
  static constexpr DType value = dtypes::bfloat16;
};
template <>
struct dtype_of_t<float> {
  static constexpr DType value = dtypes::float32;
};
template <>
struct dtype_of_t<double> {
  static constexpr DType value = dtypes::float64;
};
template <class T>
inline constexpr DType dtype_of = dtype_of_t<T>::value;

// Environment flags, read each time (tests set them): DEBUG=2, DEVICE=CLANG, THREADS=1.
inline std::string getenv(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}
inline long getenv_int(const char* name, long fallback = 0) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

struct CacheEntry;  // ops.hpp: a compiled kernel and the buffers it ran on

// What has run on this thread since its last reset(), the seed's GlobalCounters. Per thread: a
// kernel runs on the thread that realizes it, so a capture (TinyJit, AOT) records only its own.
struct GlobalCounters {
  static inline thread_local std::int64_t kernel_count = 0;
  static inline thread_local std::int64_t global_ops = 0;
  static inline thread_local std::int64_t global_mem = 0;
  static inline thread_local double time_sum = 0;  // seconds
  // Seconds this thread waited for kernels to be generated and compiled (a cold realize's cost).
  static inline thread_local double compile_time = 0;
  // Bytes of the RawBuffers alive in the process (a device's pooled free buffers not counted), and
  // the most there were at once since the start or reset(). Atomic: buffers are freed on any thread.
  static inline std::atomic<std::int64_t> mem_used = 0, mem_peak = 0;
  // When set, every compiled kernel that runs is appended (the seed's JIT cache).
  static thread_local std::optional<std::vector<CacheEntry>> cache;
  static void reset() {
    kernel_count = global_ops = global_mem = 0, time_sum = compile_time = 0, mem_peak = mem_used.load();
  }
  // A buffer of n bytes comes into use: mem_used grows, and mem_peak with it.
  static void mem_alloc(std::int64_t n) {
    std::int64_t now = mem_used += n, peak = mem_peak.load(std::memory_order_relaxed);
    while (now > peak && !mem_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {}
  }
};

}  // namespace metagrad
