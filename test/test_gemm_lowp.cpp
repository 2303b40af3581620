// The low-precision products (cpu/gemm_lowp.hpp, cpu/quant.hpp, cpu/narrow.hpp): every kernel path
// (native bf16 and its f32 emulation, VNNI, AVX2 and plain int8, the quantised GEMM and GEMV)
// against float64 or exact integer references over random shapes, with tolerances from the
// formats; the 16-bit conversions against a rounding computed from the formats' definitions;
// GGUF's block layouts and the quantisers' bounds; the GGUF reader on files written here, then
// truncated at every length and corrupted field by field.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/cpu/gemm_lowp.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/cpu/quant.hpp"
#include "metagrad/nn/gguf.hpp"

using metagrad::cpu::LowpPath;
using metagrad::cpu::QuantType;
namespace cpu = metagrad::cpu;

namespace {

// The paths to test on this CPU: the native one where it runs, the fallbacks always.
std::vector<LowpPath> paths(LowpPath best) {
  std::vector<LowpPath> p{LowpPath::generic};
  if (best == LowpPath::native || best == LowpPath::avx2) p.push_back(LowpPath::avx2);
  if (best == LowpPath::native) p.push_back(LowpPath::native);
  return p;
}

// The value of 16-bit float bits with `mbits` mantissa bits and exponent bias `bias`, in double
// (exact); all-ones exponent with a zero mantissa is the next power of two past the largest finite
// value, so that rounding past it means infinity.
double decode16(std::uint32_t bits, int mbits, int bias) {
  const std::uint32_t e = bits >> mbits, m = bits & ((1u << mbits) - 1);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return std::ldexp(static_cast<double>(m + (1u << mbits)), static_cast<int>(e) - bias - mbits);
}

// x rounded to nearest even in that format (bits of the magnitude, the sign apart): the largest
// pattern not above |x| (a binary search: the patterns increase with their value) or the next.
std::uint16_t round16(float x, int mbits, int bias) {
  const std::uint32_t inf = ((1u << (15 - mbits)) - 1) << mbits;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double ax = std::fabs(static_cast<double>(x));
  std::uint32_t lo = 0, hi = inf;  // decode(lo) <= ax
  if (ax >= decode16(inf, mbits, bias)) return static_cast<std::uint16_t>(sign | inf);
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    (decode16(mid, mbits, bias) <= ax ? lo : hi) = mid;
  }
  const double dl = ax - decode16(lo, mbits, bias), dh = decode16(lo + 1, mbits, bias) - ax;
  const std::uint32_t r = dl < dh || (dl == dh && (lo & 1) == 0) ? lo : lo + 1;
  return static_cast<std::uint16_t>(sign | r);
}

float bf16_value(std::uint16_t b) {
  const double v = decode16(b & 0x7fffu, 7, 127);
  return static_cast<float>(b & 0x8000u ? -v : v);
}

}  // namespace

TEST_CASE("lowp: f32 <-> bf16 and fp16 round to nearest even: ties, NaN, inf, subnormals", "[gemm_lowp]") {
  std::vector<float> xs{0.0f,
                        -0.0f,
                        1.0f,
                        -1.5f,
                        65504.0f,
                        65519.99f,
                        65520.0f,
                        1e-8f,
                        3e38f,
                        -3.4028235e38f,
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::denorm_min(),
                        1e-40f,
                        -2.5e-39f,
                        5.96e-8f,
                        2.98e-8f,
                        2.99e-8f};
  // Exact ties of both formats: midpoints of neighbours, normal and subnormal, each parity.
  for (std::uint32_t b : {0x3f80u, 0x3f81u, 0x0001u, 0x0002u, 0x7f7eu, 0x7f7fu, 0x0080u, 0x1234u})
    xs.push_back(static_cast<float>((decode16(b, 7, 127) + decode16(b + 1, 7, 127)) / 2));
  for (std::uint32_t h : {0x3c00u, 0x3c01u, 0x0001u, 0x0002u, 0x03ffu, 0x0400u, 0x7bfeu, 0x7bffu})
    xs.push_back(static_cast<float>((decode16(h, 10, 15) + decode16(h + 1, 10, 15)) / 2));
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {  // random bit patterns: every exponent, subnormals included
    std::uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) xs.push_back(f);
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  std::vector<std::uint16_t> b(xs.size()), h(xs.size());
  cpu::f32_to_bf16(xs.data(), b.data(), n);
  cpu::f32_to_f16(xs.data(), h.data(), n);
  std::vector<float> bb(xs.size()), hh(xs.size());
  cpu::bf16_to_f32(b.data(), bb.data(), n);
  cpu::f16_to_f32(h.data(), hh.data(), n);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i] << " (bits " << std::hexfloat << xs[i] << ")");
    CHECK(b[i] == round16(xs[i], 7, 127));
    CHECK(h[i] == round16(xs[i], 10, 15));
    CHECK(bb[i] == bf16_value(b[i]));  // widening is exact
    const double hv = decode16(h[i] & 0x7fffu, 10, 15);
    if ((h[i] & 0x7fffu) != 0x7c00u)
      CHECK(static_cast<double>(hh[i]) == (h[i] & 0x8000u ? -hv : hv));
    else
      CHECK(std::isinf(hh[i]));
  }
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN()};
  for (float x : nans) {
    std::uint16_t y;
    float back;
    cpu::f32_to_bf16(&x, &y, 1);
    cpu::bf16_to_f32(&y, &back, 1);
    CHECK((std::isnan(back) && std::signbit(back) == std::signbit(x)));
    cpu::f32_to_f16(&x, &y, 1);
    cpu::f16_to_f32(&y, &back, 1);
    CHECK((std::isnan(back) && std::signbit(back) == std::signbit(x)));
  }
}

namespace {

// A 16-bit float format and its product: bf16 (8 significant bits) or IEEE half (11).
struct Format16 {
  int mbits, bias;
  void (*gemm)(std::int64_t, std::int64_t, std::int64_t, const std::uint16_t*, std::int64_t,
               const std::uint16_t*, std::int64_t, float*, std::int64_t, bool, LowpPath);
  LowpPath best;
  double value(std::uint16_t b) const {  // exact
    const double v = decode16(b & 0x7fffu, mbits, bias);
    return b & 0x8000u ? -v : v;
  }
};

// The format's GEMM on every path and random shapes, strides and accumulation, its inputs rounded
// to nearest even from f32, against float64 over their exact values: every product of two inputs
// is exact in f32, so the error is the f32 sums' alone.
void check_gemm16(const Format16& f) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  struct Shape {
    std::int64_t m, n, k;
  };
  std::vector<Shape> shapes{{1, 1, 1},     {1, 77, 513},  {3, 5, 0},      {14, 32, 2},   {15, 33, 3},
                            {29, 95, 257}, {1, 4200, 40}, {1100, 40, 90}, {40, 70, 1100}};
  for (int t = 0; t < 12; ++t)
    shapes.push_back({1 + static_cast<std::int64_t>(rng() % 45), 1 + static_cast<std::int64_t>(rng() % 100),
                      static_cast<std::int64_t>(rng() % 300)});
  for (LowpPath path : paths(f.best))
    for (const Shape& s : shapes)
      for (bool acc : {false, true}) {
        const std::int64_t lda = s.k + 3, ldb = s.n + 1, ldc = s.n + 2;
        std::vector<std::uint16_t> a(static_cast<std::size_t>(s.m * lda)),
            b(static_cast<std::size_t>(s.k * ldb));
        std::vector<float> c(static_cast<std::size_t>(s.m * ldc));
        for (std::uint16_t& x : a) x = round16(u(rng), f.mbits, f.bias);
        for (std::uint16_t& x : b) x = round16(u(rng), f.mbits, f.bias);
        for (float& x : c) x = u(rng);
        const std::vector<float> c0 = c;
        f.gemm(s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc, path);
        INFO("path " << static_cast<int>(path) << " " << s.m << "x" << s.n << "x" << s.k << " acc " << acc);
        int bad = 0;
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < ldc; ++j) {
            const auto at = static_cast<std::size_t>(i * ldc + j);
            if (j >= s.n) {  // past n: untouched
              bad += c[at] != c0[at];
              continue;
            }
            double ref = acc ? c0[at] : 0, mag = std::fabs(ref);
            for (std::int64_t p = 0; p < s.k; ++p) {
              const double x = f.value(a[static_cast<std::size_t>(i * lda + p)]) *
                               f.value(b[static_cast<std::size_t>(p * ldb + j)]);
              ref += x, mag += std::fabs(x);
            }
            // at most k + 2 roundings of sums
            bad += std::fabs(c[at] - ref) > static_cast<double>(s.k + 2) * std::ldexp(1.0, -24) * mag;
          }
        CHECK(bad == 0);
      }
}

}  // namespace

TEST_CASE("lowp: gemm_bf16 on every path against float64, accumulation error only", "[gemm_lowp]") {
  check_gemm16({7, 127, cpu::gemm_bf16, cpu::best_bf16_path()});
}

TEST_CASE("lowp: gemm_f16 on every path against float64, accumulation error only", "[gemm_lowp]") {
  check_gemm16({10, 15, cpu::gemm_f16, cpu::best_f16_path()});
  std::vector<std::uint16_t> a(32), b(32);
  std::vector<float> c(16);
  CHECK_THROWS_WITH(
      cpu::gemm_f16(4, 4, 8, a.data(), 4, b.data(), 4, c.data(), 4),
      Catch::Contains("cpu::gemm_f16") && Catch::Contains("m=4 n=4 k=8") && Catch::Contains("lda"));
}

TEST_CASE("lowp: gemm_s8 on every path is exact, -128 included", "[gemm_lowp]") {
  std::mt19937 rng(5);
  struct Shape {
    std::int64_t m, n, k;
  };
  std::vector<Shape> shapes{{1, 1, 1},  {1, 65, 1025},  {2, 3, 0},     {14, 32, 4},   {15, 33, 5},
                            {7, 17, 6}, {1100, 40, 70}, {9, 4200, 30}, {33, 70, 1500}};
  for (int t = 0; t < 12; ++t)
    shapes.push_back({1 + static_cast<std::int64_t>(rng() % 45), 1 + static_cast<std::int64_t>(rng() % 100),
                      static_cast<std::int64_t>(rng() % 300)});
  for (LowpPath path : paths(cpu::best_s8_path()))
    for (const Shape& s : shapes)
      for (bool acc : {false, true}) {
        const std::int64_t lda = s.k + 1, ldb = s.n + 5, ldc = s.n + 1;
        std::vector<std::int8_t> a(static_cast<std::size_t>(s.m * lda)),
            b(static_cast<std::size_t>(s.k * ldb));
        for (auto& x : a)
          x = static_cast<std::int8_t>(rng() % 8 == 0 ? -128 : static_cast<int>(rng() % 256) - 128);
        for (auto& x : b)
          x = static_cast<std::int8_t>(rng() % 8 == 0 ? -128 : static_cast<int>(rng() % 256) - 128);
        std::vector<std::int32_t> c(static_cast<std::size_t>(s.m * ldc));
        for (auto& x : c) x = static_cast<std::int32_t>(rng() % 100000) - 50000;
        const std::vector<std::int32_t> c0 = c;
        cpu::gemm_s8(s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), ldc, acc, path);
        INFO("path " << static_cast<int>(path) << " " << s.m << "x" << s.n << "x" << s.k << " acc " << acc);
        int bad = 0;
        for (std::int64_t i = 0; i < s.m; ++i)
          for (std::int64_t j = 0; j < ldc; ++j) {
            const auto at = static_cast<std::size_t>(i * ldc + j);
            std::int64_t ref = j >= s.n || acc ? c0[at] : 0;
            for (std::int64_t p = 0; p < s.k && j < s.n; ++p)
              ref += std::int64_t{a[static_cast<std::size_t>(i * lda + p)]} *
                     b[static_cast<std::size_t>(p * ldb + j)];
            bad += c[at] != ref;
          }
        CHECK(bad == 0);
      }
}

TEST_CASE("lowp: int8 quantisation saturates, and the dequantising epilogue", "[gemm_lowp]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0, 1);
  const std::int64_t m = 9, k = 70, n = 13;
  std::vector<float> x(static_cast<std::size_t>(m * k)), w(static_cast<std::size_t>(k * n));
  for (float& v : x) v = g(rng);
  for (float& v : w) v = g(rng);
  x[5] = 1e30f, x[6] = -1e30f, x[k + 1] = 1e-30f;         // the extremes: q must be +-127, never wrap
  std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);  // a zero row
  std::vector<std::int8_t> qx(x.size()), qw(w.size());
  std::vector<float> sx(m), sw(n);
  cpu::quantize_s8(m, k, x.data(), k, qx.data(), k, sx.data(), false);
  cpu::quantize_s8(k, n, w.data(), n, qw.data(), n, sw.data(), true);
  CHECK(qx[5] == 127);
  CHECK(qx[6] == -127);
  CHECK(sx[2] == 0.0f);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p) {
      const auto at = static_cast<std::size_t>(i * k + p);
      CHECK(qx[at] >= -127);
      CHECK(std::fabs(static_cast<double>(x[at]) - static_cast<double>(sx[i]) * qx[at]) <= 0.5000001 * sx[i]);
    }
  for (std::int64_t p = 0; p < k; ++p)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(p * n + j);
      CHECK(std::fabs(static_cast<double>(w[at]) - static_cast<double>(sw[j]) * qw[at]) <= 0.5000001 * sw[j]);
    }
  std::vector<std::int32_t> c(static_cast<std::size_t>(m * n));
  cpu::gemm_s8(m, n, k, qx.data(), k, qw.data(), n, c.data(), n);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  cpu::dequantize_s32(m, n, c.data(), n, sx.data(), sw.data(), y.data(), n);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const auto at = static_cast<std::size_t>(i * n + j);
      const double ref = static_cast<double>(sx[i]) * sw[j] * c[at];
      CHECK(std::fabs(y[at] - ref) <= 3 * std::ldexp(std::fabs(ref), -24) + 1e-300);
    }
}

TEST_CASE("lowp: GGUF Q8_0 and Q4_0 blocks: layout, quantiser bounds", "[gemm_lowp]") {
  // Layout, built by hand: Q4_0's value i is byte i's low nibble (i < 16), byte i-16's high one.
  cpu::BlockQ4_0 b4{};
  cpu::f32_to_f16(std::vector<float>{0.25f}.data(), &b4.d, 1);
  for (int i = 0; i < 16; ++i) b4.qs[i] = static_cast<std::uint8_t>(i | (15 - i) << 4);
  cpu::BlockQ8_0 b8{};
  cpu::f32_to_f16(std::vector<float>{-0.5f}.data(), &b8.d, 1);
  for (int i = 0; i < 32; ++i) b8.qs[i] = static_cast<std::int8_t>(i * 8 - 128);
  float y4[32], y8[32];
  cpu::dequantize(QuantType::q4_0, 1, 32, &b4, y4, 32);
  cpu::dequantize(QuantType::q8_0, 1, 32, &b8, y8, 32);
  for (int i = 0; i < 32; ++i) {
    CHECK(y4[i] == 0.25f * static_cast<float>((i < 16 ? i : 15 - (i - 16)) - 8));
    CHECK(y8[i] == -0.5f * static_cast<float>(i * 8 - 128));
  }
  CHECK(cpu::quant_row_bytes(QuantType::q8_0, 64) == 68);
  CHECK(cpu::quant_row_bytes(QuantType::q4_0, 64) == 36);
  CHECK_THROWS_WITH(cpu::quantize(QuantType::q8_0, 1, 33, y8, 33, &b8), Catch::Contains("k=33"));

  std::mt19937 rng(9);
  std::normal_distribution<float> g(0, 1);
  const std::int64_t rows = 7, k = 96;
  std::vector<float> x(static_cast<std::size_t>(rows * k));
  for (float& v : x) v = g(rng) * (1 + static_cast<float>(rng() % 1000));
  std::fill(x.begin() + k, x.begin() + k + 32, 0.0f);  // a zero block
  for (QuantType t : {QuantType::q8_0, QuantType::q4_0}) {
    std::vector<unsigned char> q(static_cast<std::size_t>(rows) * cpu::quant_row_bytes(t, k));
    std::vector<float> y(x.size());
    cpu::quantize(t, rows, k, x.data(), k, q.data());
    cpu::dequantize(t, rows, k, q.data(), y.data(), k);
    for (std::int64_t blk = 0; blk < rows * k / 32; ++blk) {
      const float* xb = x.data() + blk * 32;
      float amax = 0, max = 0;
      for (int j = 0; j < 32; ++j)
        if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), max = xb[j];
      // d as the format says, rounded to fp16; each value within half a step of d (a whole step
      // at Q4_0's clamped top), plus what d's own rounding moves the largest q
      const double d = t == QuantType::q8_0 ? amax / 127.0 : max / -8.0;
      std::uint16_t dh;
      const float df = static_cast<float>(d);
      cpu::f32_to_f16(&df, &dh, 1);
      float d16;
      cpu::f16_to_f32(&dh, &d16, 1);
      const double qmax = t == QuantType::q8_0 ? 127 : 8, step = t == QuantType::q8_0 ? 0.5 : 1.0;
      for (int j = 0; j < 32; ++j) {
        INFO("type " << static_cast<int>(t) << " block " << blk << " value " << j);
        CHECK(std::fabs(static_cast<double>(y[static_cast<std::size_t>(blk * 32 + j)]) - xb[j]) <=
              step * std::fabs(d) * 1.0001 + qmax * std::fabs(d16 - d) + 1e-30);
      }
    }
  }
}

TEST_CASE("lowp: gemm_q and gemv_q on every path against float64 over the dequantised W", "[gemm_lowp]") {
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-1, 1);
  struct Shape {
    std::int64_t m, n, k;
  };
  std::vector<Shape> shapes{{1, 1, 32},   {1, 257, 320}, {2, 31, 64},    {3, 33, 96},   {4, 5, 32},
                            {5, 47, 160}, {23, 70, 128}, {9, 300, 1056}, {300, 40, 64}, {1, 40, 0}};
  const int threads = cpu::threads();
  for (int th : {1, 2})  // (the GEMV splits W's rows by bytes: a few hundred rows are two parts)
    for (QuantType t : {QuantType::q8_0, QuantType::q4_0})
      for (LowpPath path : paths(cpu::best_quant_path()))
        for (const Shape& s : shapes)
          for (int gemv = 0; gemv < 2; ++gemv) {
            cpu::set_threads(th);
            const bool acc = (s.m + s.n + gemv) % 2;
            const std::int64_t lda = s.k + 7, ldc = s.n + 3;
            std::vector<float> a(static_cast<std::size_t>(s.m * lda)),
                wf(static_cast<std::size_t>(s.n * s.k));
            std::vector<float> c(static_cast<std::size_t>(s.m * ldc));
            for (float& x : a) x = u(rng);
            for (float& x : wf) x = u(rng);
            for (float& x : c) x = u(rng);
            std::vector<unsigned char> w(static_cast<std::size_t>(s.n) * cpu::quant_row_bytes(t, s.k) + 1);
            cpu::quantize(t, s.n, s.k, wf.data(), s.k, w.data());
            std::vector<float> wd(wf.size());
            cpu::dequantize(t, s.n, s.k, w.data(), wd.data(), s.k);
            const std::vector<float> c0 = c;
            if (gemv)
              cpu::gemv_q(s.m, s.n, s.k, a.data(), lda, t, w.data(), c.data(), ldc, acc, path);
            else
              cpu::gemm_q(s.m, s.n, s.k, a.data(), lda, t, w.data(), c.data(), ldc, acc, path);
            INFO("type " << static_cast<int>(t) << " path " << static_cast<int>(path) << " " << s.m << "x"
                         << s.n << "x" << s.k << " gemv " << gemv << " acc " << acc << " threads " << th);
            int bad = 0;
            for (std::int64_t i = 0; i < s.m; ++i)
              for (std::int64_t j = 0; j < ldc; ++j) {
                const auto at = static_cast<std::size_t>(i * ldc + j);
                if (j >= s.n) {
                  bad += c[at] != c0[at];
                  continue;
                }
                double ref = acc ? c0[at] : 0, mag = std::fabs(ref);
                for (std::int64_t p = 0; p < s.k; ++p) {
                  const double x = static_cast<double>(a[static_cast<std::size_t>(i * lda + p)]) *
                                   wd[static_cast<std::size_t>(j * s.k + p)];
                  ref += x, mag += std::fabs(x);
                }
                // the GEMV scales each block's sum by d: one more rounding a term than the sums
                bad += std::fabs(c[at] - ref) > static_cast<double>(s.k + 4) * std::ldexp(1.0, -24) * mag;
              }
            CHECK(bad == 0);
          }
  cpu::set_threads(threads);
}

TEST_CASE("lowp: bad shapes and paths give clear errors", "[gemm_lowp]") {
  std::vector<std::uint16_t> a(64), b(64);
  std::vector<float> c(64);
  CHECK_THROWS_WITH(
      cpu::gemm_bf16(4, 4, 8, a.data(), 4, b.data(), 4, c.data(), 4),
      Catch::Contains("cpu::gemm_bf16") && Catch::Contains("m=4 n=4 k=8") && Catch::Contains("lda"));
  std::vector<std::int8_t> s(64);
  std::vector<std::int32_t> ci(64);
  CHECK_THROWS_AS(cpu::gemm_s8(-1, 4, 4, s.data(), 4, s.data(), 4, ci.data(), 4), std::invalid_argument);
  CHECK_THROWS_WITH(cpu::gemm_s8(2, 4, 4, s.data(), 4, s.data(), 4, ci.data(), 3), Catch::Contains("ldc"));
  std::vector<float> af(64);
  CHECK_THROWS_WITH(cpu::gemm_q(2, 2, 48, af.data(), 48, QuantType::q8_0, s.data(), c.data(), 2),
                    Catch::Contains("cpu::gemm_q") && Catch::Contains("k=48"));
  if (cpu::best_bf16_path() != LowpPath::native)
    CHECK_THROWS_WITH(cpu::gemm_bf16(1, 1, 1, a.data(), 1, b.data(), 1, c.data(), 1, false, LowpPath::native),
                      Catch::Contains("needs"));
}

namespace {

// A GGUF v3 file, byte by byte as the format says (independent of the reader).
struct GgufBytes {
  std::string b;
  template <class T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b += s;
  }
};

struct TestTensor {
  std::string name;
  std::vector<std::uint64_t> dims;
  std::uint32_t type;
  std::string data;
};

std::string gguf_file(const std::vector<TestTensor>& ts, std::uint32_t align) {
  GgufBytes g;
  g.put<std::uint32_t>(0x46554747);
  g.put<std::uint32_t>(3);
  g.put<std::uint64_t>(ts.size());
  g.put<std::uint64_t>(3);
  g.str("general.name");
  g.put<std::uint32_t>(8);
  g.str("tiny");
  g.str("general.alignment");
  g.put<std::uint32_t>(4);
  g.put<std::uint32_t>(align);
  g.str("tokenizer.scores");
  g.put<std::uint32_t>(9);
  g.put<std::uint32_t>(6);
  g.put<std::uint64_t>(2);
  g.put<float>(1.5f);
  g.put<float>(-2.0f);
  std::uint64_t off = 0;
  std::vector<std::uint64_t> offs;
  for (const TestTensor& t : ts) {
    g.str(t.name);
    g.put<std::uint32_t>(static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) g.put<std::uint64_t>(d);
    g.put<std::uint32_t>(t.type);
    g.put<std::uint64_t>(off);
    offs.push_back(off);
    off = (off + t.data.size() + align - 1) / align * align;
  }
  g.b.resize((g.b.size() + align - 1) / align * align, '\0');
  const std::size_t data = g.b.size();
  for (std::size_t t = 0; t < ts.size(); ++t) {
    g.b.resize(data + offs[t], '\0');
    g.b += ts[t].data;
  }
  return g.b;
}

struct TempFile {
  std::string path =
      (std::filesystem::temp_directory_path() / ("metagrad_gguf_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  void write(const std::string& bytes) const { std::ofstream(path, std::ios::binary) << bytes; }
  ~TempFile() { std::filesystem::remove(path); }
};

std::string error_of(const std::string& path) {
  try {
    metagrad::nn::GgufFile f(path);
  } catch (const std::runtime_error& e) { return e.what(); }
  return "";
}

}  // namespace

TEST_CASE("lowp: GGUF v3 read in place, and truncated or corrupted files name what is wrong", "[gemm_lowp]") {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(3 * 64), bias(7);
  for (float& x : w) x = u(rng);
  for (float& x : bias) x = u(rng);
  std::string q8(3 * cpu::quant_row_bytes(QuantType::q8_0, 64), '\0'),
      q4(5 * cpu::quant_row_bytes(QuantType::q4_0, 32), '\0');
  cpu::quantize(QuantType::q8_0, 3, 64, w.data(), 64, q8.data());
  cpu::quantize(QuantType::q4_0, 5, 32, w.data(), 32, q4.data());
  std::string h(6, '\0');
  const std::vector<TestTensor> ts{
      {"blk.0.w", {64, 3}, 8, q8},
      {"blk.0.w4", {32, 5}, 2, q4},
      {"bias", {7}, 0, std::string(reinterpret_cast<const char*>(bias.data()), 28)},
      {"h16", {3}, 1, h},
      {"hb16", {1, 3}, 30, h}};
  const std::string file = gguf_file(ts, 64);
  TempFile tmp;
  tmp.write(file);
  {
    metagrad::nn::GgufFile f(tmp.path);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 64);
    CHECK(f.metadata().at("general.name").s == "tiny");
    CHECK(f.metadata().at("tokenizer.scores").array.size() == 2);
    CHECK(f.metadata().at("tokenizer.scores").array[1].f == -2.0);
    REQUIRE(f.tensors().size() == ts.size());
    for (std::size_t t = 0; t < ts.size(); ++t) {
      const auto& x = f.tensors()[t];
      CHECK(x.name == ts[t].name);
      CHECK(x.bytes == ts[t].data.size());
      CHECK(reinterpret_cast<std::uintptr_t>(x.data) % 64 == 0);
      CHECK(std::memcmp(x.data, ts[t].data.data(), x.bytes) == 0);
    }
    const auto& wt = f.tensor("blk.0.w");
    CHECK(wt.dims == std::vector<std::int64_t>{64, 3});
    CHECK(wt.type == metagrad::nn::GgufType::q8_0);
    std::vector<float> a(64), c1(3), c2(3);
    for (float& x : a) x = u(rng);
    cpu::gemv_q(1, 3, 64, a.data(), 64, QuantType::q8_0, wt.data, c1.data(), 3);  // the weights as they lie
    cpu::gemv_q(1, 3, 64, a.data(), 64, QuantType::q8_0, q8.data(), c2.data(), 3);
    CHECK(c1 == c2);
    CHECK_THROWS_WITH(f.tensor("nope"), Catch::Contains("nope"));
  }
  // Every truncation fails cleanly (each length through the tensor infos, every 7th in the data
  // and the last); one inside a tensor's data names that tensor.
  const std::size_t infos_end = file.find("hb16") + 4 + 4 + 16 + 4 + 8;
  for (std::size_t n = 0; n < file.size(); n += n < infos_end || n + 7 >= file.size() ? 1 : 7) {
    tmp.write(file.substr(0, n));
    const std::string e = error_of(tmp.path);
    INFO("truncated to " << n << " of " << file.size() << " bytes: " << e);
    REQUIRE(e.find("gguf: '" + tmp.path + "'") == 0);
    if (n == file.size() - 1) CHECK(e.find("tensor 'hb16' (BF16)") != std::string::npos);
  }
  // Field by field: the magic, the version, a tensor's type, its dimension count and its offset.
  auto corrupt = [&](std::size_t at, const std::string& bytes) {
    std::string f2 = file;
    f2.replace(at, bytes.size(), bytes);
    tmp.write(f2);
    return error_of(tmp.path);
  };
  CHECK_THAT(corrupt(0, "GGUX"), Catch::Contains("not a GGUF file"));
  CHECK_THAT(corrupt(4, std::string("\2\0\0\0", 4)), Catch::Contains("version 2"));
  const std::size_t info = file.find("blk.0.w4") + 8;  // its n_dims, dims, type, offset follow
  CHECK_THAT(corrupt(info, std::string("\x09\0\0\0", 4)),
             Catch::Contains("tensor 'blk.0.w4'") && Catch::Contains("dimensions"));
  CHECK_THAT(corrupt(info + 4 + 16, std::string("\x63\0\0\0", 4)),
             Catch::Contains("tensor 'blk.0.w4'") && Catch::Contains("type 99"));
  CHECK_THAT(corrupt(info + 4 + 16 + 4, std::string("\x08\0\0\0\0\0\0\0", 8)),
             Catch::Contains("'blk.0.w4'") && Catch::Contains("not aligned"));
  CHECK_THAT(corrupt(info + 4, std::string("\x21\0\0\0\0\0\0\0", 8)),
             Catch::Contains("'blk.0.w4'") && Catch::Contains("multiple of 32"));
}
