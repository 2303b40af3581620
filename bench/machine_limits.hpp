#pragma once
// The hand-written loops behind bench_workloads' machine limits (docs/benchmarks.md): DRAM triad,
// copy and read, W1's a*b+c in cache, the FMA peak. A limit is what the best such loop reaches on
// this machine, and which loop that is differs between processors: a Zen 4 core reads DRAM faster
// walking 2-4 parts of its range at once than one, and a triad streaming its stores past the cache
// moves less than one that reads each line before writing it. So each limit kernel comes in several
// forms (streams per thread; AVX2 or AVX-512; plain or non-temporal stores) and `fastest` keeps the
// one that times best here.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace limits {

using ReadFn = float (*)(const float*, std::size_t);
using TriadFn = void (*)(float*, const float*, const float*, float, std::size_t);
using Fma4Fn = void (*)(float*, const float*, const float*, const float*, std::size_t);

inline bool has_avx512() { return __builtin_cpu_supports("avx512f"); }

// The length of each of S parts of [0, n) walked side by side (a multiple of 64 elements); the
// kernel does the tail n - S * length after them.
template <int S>
inline std::size_t part_length(std::size_t n) {
  return n / S / 64 * 64;
}

template <int S>
__attribute__((target("avx2,fma"))) float read_avx2(const float* a, std::size_t n) {
  std::size_t len = part_length<S>(n);
  __m256 acc[S][2];
  for (int j = 0; j < S; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (std::size_t i = 0; i < len; i += 16)
    for (int j = 0; j < S; ++j) {
      const float* p = a + j * len + i;
      acc[j][0] = _mm256_add_ps(acc[j][0], _mm256_loadu_ps(p));
      acc[j][1] = _mm256_add_ps(acc[j][1], _mm256_loadu_ps(p + 8));
    }
  __m256 s = _mm256_setzero_ps();
  for (int j = 0; j < S; ++j) s = _mm256_add_ps(s, _mm256_add_ps(acc[j][0], acc[j][1]));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float r = 0;
  for (float x : lanes) r += x;
  for (std::size_t i = S * len; i < n; ++i) r += a[i];
  return r;
}

template <int S>
__attribute__((target("avx512f"))) float read_avx512(const float* a, std::size_t n) {
  std::size_t len = part_length<S>(n);
  __m512 acc[S][2];
  for (int j = 0; j < S; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  for (std::size_t i = 0; i < len; i += 32)
    for (int j = 0; j < S; ++j) {
      const float* p = a + j * len + i;
      acc[j][0] = _mm512_add_ps(acc[j][0], _mm512_loadu_ps(p));
      acc[j][1] = _mm512_add_ps(acc[j][1], _mm512_loadu_ps(p + 16));
    }
  __m512 s = _mm512_setzero_ps();
  for (int j = 0; j < S; ++j) s = _mm512_add_ps(s, _mm512_add_ps(acc[j][0], acc[j][1]));
  alignas(64) float lanes[16];  // (g++ 12's _mm512_reduce_add_ps trips -Werror=uninitialized)
  _mm512_store_ps(lanes, s);
  float r = 0;
  for (float x : lanes) r += x;
  for (std::size_t i = S * len; i < n; ++i) r += a[i];
  return r;
}

// a = b + s*c; non-temporal stores (NT) from the first 32-byte-aligned element of a on.
template <int S, bool NT>
__attribute__((target("avx2,fma"))) void triad_avx2(float* a, const float* b, const float* c, float s,
                                                    std::size_t n) {
  std::size_t head = 0;
  if (NT)
    while (head < n && reinterpret_cast<std::uintptr_t>(a + head) % 32)
      a[head] = b[head] + s * c[head], ++head;
  a += head, b += head, c += head, n -= head;
  std::size_t len = part_length<S>(n);
  __m256 vs = _mm256_set1_ps(s);
  for (std::size_t i = 0; i < len; i += 8)
    for (int j = 0; j < S; ++j) {
      std::size_t o = j * len + i;
      __m256 v = _mm256_fmadd_ps(vs, _mm256_loadu_ps(c + o), _mm256_loadu_ps(b + o));
      if constexpr (NT)
        _mm256_stream_ps(a + o, v);
      else
        _mm256_storeu_ps(a + o, v);
    }
  if constexpr (NT) _mm_sfence();
  for (std::size_t i = S * len; i < n; ++i) a[i] = b[i] + s * c[i];
}

__attribute__((target("avx2,fma"))) inline void copy_avx2(float* a, const float* b, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_loadu_ps(b + i));
  for (; i < n; ++i) a[i] = b[i];
}

// o = a*b + c, W1 in cache.
template <int S>
__attribute__((target("avx2,fma"))) void fma4_avx2(float* o, const float* a, const float* b, const float* c,
                                                   std::size_t n) {
  std::size_t len = part_length<S>(n);
  for (std::size_t i = 0; i < len; i += 8)
    for (int j = 0; j < S; ++j) {
      std::size_t k = j * len + i;
      _mm256_storeu_ps(
          o + k, _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), _mm256_loadu_ps(c + k)));
    }
  for (std::size_t i = S * len; i < n; ++i) o[i] = a[i] * b[i] + c[i];
}

template <int S>
__attribute__((target("avx512f"))) void fma4_avx512(float* o, const float* a, const float* b, const float* c,
                                                    std::size_t n) {
  std::size_t len = part_length<S>(n);
  for (std::size_t i = 0; i < len; i += 16)
    for (int j = 0; j < S; ++j) {
      std::size_t k = j * len + i;
      _mm512_storeu_ps(
          o + k, _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), _mm512_loadu_ps(c + k)));
    }
  for (std::size_t i = S * len; i < n; ++i) o[i] = a[i] * b[i] + c[i];
}

inline std::vector<ReadFn> read_kernels() {
  std::vector<ReadFn> k{read_avx2<1>, read_avx2<2>, read_avx2<4>};
  if (has_avx512()) k.insert(k.end(), {read_avx512<1>, read_avx512<2>, read_avx512<4>});
  return k;
}
inline std::vector<TriadFn> triad_kernels() {
  return {triad_avx2<1, false>, triad_avx2<2, false>, triad_avx2<4, false>,
          triad_avx2<1, true>,  triad_avx2<2, true>,  triad_avx2<4, true>};
}
inline std::vector<Fma4Fn> fma4_kernels() {
  std::vector<Fma4Fn> k{fma4_avx2<1>, fma4_avx2<2>};
  if (has_avx512()) k.insert(k.end(), {fma4_avx512<1>, fma4_avx512<2>});
  return k;
}

// The kernel of `fns` whose best of three timings (seconds(fn)) is shortest.
template <class Fn, class Seconds>
Fn fastest(const std::vector<Fn>& fns, const Seconds& seconds) {
  Fn best = fns.front();
  double best_t = std::numeric_limits<double>::infinity();
  for (Fn f : fns) {
    double t = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 3; ++r) t = std::min(t, seconds(f));
    if (t < best_t) best_t = t, best = f;
  }
  return best;
}

// 12 independent accumulators (FMA latency 4 x 2 pipes needs >= 8): 12 FMAs of 8 lanes per trip.
__attribute__((target("avx2,fma"))) inline float fma_peak_avx2(long iters) {
  __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f), a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(0.1f * static_cast<float>(j));
  for (long i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}

// The same in AVX-512 (16 lanes), the limit wherever metagrad's GEMM runs AVX-512 kernels.
__attribute__((target("avx512f"))) inline float fma_peak_avx512(long iters) {
  __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f), a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(0.1f * static_cast<float>(j));
  for (long i = 0; i < iters; ++i)
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}

}  // namespace limits
