// The few-row products of decoding (runtime/gemm/gemv.cpp, cpu::gemv_q_int8): f32 dot products
// through gemm::sgemm on every ISA, short rows (attention's k = 64) and ragged tails included, the
// same against bf16 weights (gemm::gemv_bf16), and
// the quantised GEMV with int8 activations on every path, against float64 references: the
// documented quantisation of A reproduced, and the bound it allows against the exact product.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/cpu/gemv_int8.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
// (the runtime's own: bf16 Linear layers at batch 1 run it, widening W as it is read)
#include "../runtime/gemm/gemv.hpp"

using namespace metagrad;
using cpu::LowpPath;
using cpu::QuantType;
using i64 = std::int64_t;

TEST_CASE("gemv: few rows against W^T on every ISA as dot products, short and ragged rows", "[gemv]") {
  std::mt19937 g(62);
  std::uniform_real_distribution<float> u(-1, 1);
  struct Shape {
    i64 m, n, k;
  };
  // attention's scores (1 x 576 x 64), k below a vector and off its multiples, n off a group of 4
  for (Shape s : std::vector<Shape>{
           {1, 576, 64}, {1, 1030, 1}, {2, 129, 17}, {3, 67, 100}, {4, 33, 1000}, {1, 7, 3000}})
    for (gemm::Isa isa : {gemm::Isa::generic, gemm::Isa::avx2, gemm::Isa::avx512}) {
      if (isa > gemm::best_isa()) continue;
      const i64 lda = s.k + 3, ldb = s.k + 5, ldc = s.n + 2;  // padded rows
      std::vector<float> a(static_cast<std::size_t>(s.m * lda)), b(static_cast<std::size_t>(s.n * ldb)),
          c(static_cast<std::size_t>(s.m * ldc), 7.f);
      for (float& x : a) x = u(g);
      for (float& x : b) x = u(g);
      gemm::sgemm({s.m, s.n, s.k, a.data(), lda, 1, b.data(), 1, ldb, c.data(), ldc}, {}, isa);
      int bad = 0;
      for (i64 i = 0; i < s.m; ++i)
        for (i64 j = 0; j < ldc; ++j) {
          const float got = c[static_cast<std::size_t>(i * ldc + j)];
          if (j >= s.n) {
            bad += got != 7.f;  // C's padding untouched
            continue;
          }
          double want = 0, mag = 0;
          for (i64 q = 0; q < s.k; ++q) {
            const double x =
                double(a[static_cast<std::size_t>(i * lda + q)]) * b[static_cast<std::size_t>(j * ldb + q)];
            want += x, mag += std::fabs(x);
          }
          bad += std::fabs(got - want) > static_cast<double>(s.k + 2) * std::ldexp(1.0, -24) * mag;
        }
      INFO(gemm::to_string(isa) << " " << s.m << "x" << s.n << "x" << s.k);
      CHECK(bad == 0);
    }
}

TEST_CASE("gemv_bf16: few rows against bf16 W^T on every ISA, tails and two threads", "[gemv]") {
  std::mt19937 g(16);
  std::uniform_real_distribution<float> u(-1, 1);
  struct Shape {
    i64 m, n, k;
  };
  const int threads = cpu::threads();
  // k under a vector, 32 + 8 + a tail, several trips, attention's 64, and rows enough for two parts
  for (Shape s : std::vector<Shape>{{1, 50, 7}, {2, 33, 45}, {3, 20, 200}, {4, 17, 64}, {1, 3000, 45}})
    for (gemm::Isa isa : {gemm::Isa::generic, gemm::Isa::avx2, gemm::Isa::avx512})
      for (int th : {1, 2}) {
        if (isa > gemm::best_isa()) continue;
        cpu::set_threads(th);
        std::vector<float> x(static_cast<std::size_t>(s.m * s.k)), y(static_cast<std::size_t>(s.m * s.n));
        std::vector<std::uint16_t> w(static_cast<std::size_t>(s.n * s.k));
        for (float& v : x) v = u(g);
        for (std::uint16_t& v : w) v = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(u(g)) >> 16);
        gemm::gemv_bf16(s.m, s.n, s.k, x.data(), w.data(), y.data(), isa);
        int bad = 0;
        for (i64 i = 0; i < s.m; ++i)
          for (i64 j = 0; j < s.n; ++j) {
            double want = 0, mag = 0;
            for (i64 q = 0; q < s.k; ++q) {
              const double wv =
                  std::bit_cast<float>(std::uint32_t{w[static_cast<std::size_t>(j * s.k + q)]} << 16);
              want += x[static_cast<std::size_t>(i * s.k + q)] * wv,
                  mag += std::fabs(x[static_cast<std::size_t>(i * s.k + q)] * wv);
            }
            bad += std::fabs(y[static_cast<std::size_t>(i * s.n + j)] - want) >
                   static_cast<double>(s.k + 2) * std::ldexp(1.0, -24) * mag;
          }
        INFO(gemm::to_string(isa) << " " << s.m << "x" << s.n << "x" << s.k << " threads " << th);
        CHECK(bad == 0);
      }
  cpu::set_threads(threads);
}

namespace {
std::vector<LowpPath> int8_paths() {
  std::vector<LowpPath> p{LowpPath::generic};
  if (gemm::best_isa() >= gemm::Isa::avx2) p.push_back(LowpPath::avx2);  // vpmaddubsw
  try {  // native where the CPU has VNNI and VBMI
    float a[32] = {}, c = 0;
    std::vector<unsigned char> w(cpu::quant_row_bytes(QuantType::q8_0, 32));
    cpu::gemv_q_int8(1, 1, 32, a, 32, QuantType::q8_0, w.data(), &c, 1, false, LowpPath::native);
    p.push_back(LowpPath::native);
  } catch (const std::runtime_error&) {}
  return p;
}
}  // namespace

TEST_CASE("gemv_q_int8: A quantised per block as documented, on every path, against float64", "[gemv]") {
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-1, 1);
  struct Shape {
    i64 m, n, k;
  };
  // one block, odd block counts (a pair's second block absent), several rows, a zero block of A,
  // block counts past the AVX2 kernel's four a trip with a remainder, rows enough for two threads
  const std::vector<Shape> shapes{{1, 1, 32}, {1, 70, 96},   {2, 33, 160},  {3, 17, 64},  {4, 40, 768},
                                  {5, 9, 32}, {1, 300, 224}, {2, 190, 416}, {1, 700, 512}};
  const int threads = cpu::threads();
  for (int th : {1, 2})
    for (QuantType t : {QuantType::q8_0, QuantType::q4_0})
      for (LowpPath path : int8_paths())
        for (const Shape& s : shapes) {
          cpu::set_threads(th);
          const bool acc = (s.n + s.m) % 2;
          const i64 lda = s.k + 5, ldc = s.n + 3;
          std::vector<float> a(static_cast<std::size_t>(s.m * lda)), wf(static_cast<std::size_t>(s.n * s.k)),
              c(static_cast<std::size_t>(s.m * ldc));
          for (float& x : a) x = u(g) * (g() % 3 ? 1.f : 50.f);  // blocks of different scales
          if (s.k > 32) std::fill_n(a.begin() + 32, 32, 0.f);    // row 0's second block all zero
          for (float& x : wf) x = u(g);
          for (float& x : c) x = u(g);
          std::vector<unsigned char> w(static_cast<std::size_t>(s.n) * cpu::quant_row_bytes(t, s.k));
          cpu::quantize(t, s.n, s.k, wf.data(), s.k, w.data());
          if (t == QuantType::q8_0)  // -128, which the quantiser never writes but a file may hold
            for (i64 j = 0; j < s.n; j += 3) w[static_cast<std::size_t>(j * (s.k / 32) * 34 + 2)] = 0x80;
          std::vector<float> wd(wf.size());
          cpu::dequantize(t, s.n, s.k, w.data(), wd.data(), s.k);
          const std::vector<float> c0 = c;
          cpu::gemv_q_int8(s.m, s.n, s.k, a.data(), lda, t, w.data(), c.data(), ldc, acc, path);
          // A as the header defines it: d = amax / 127, q = x / d rounded to nearest even
          std::vector<double> aq(static_cast<std::size_t>(s.m * s.k)), half_step(aq.size());
          for (i64 i = 0; i < s.m; ++i)
            for (i64 b = 0; b < s.k / 32; ++b) {
              const float* x = a.data() + i * lda + b * 32;
              float amax = 0;
              for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(x[e]));
              const float d = amax / 127, id = d != 0 ? 1 / d : 0;
              for (int e = 0; e < 32; ++e) {
                const auto at = static_cast<std::size_t>(i * s.k + b * 32 + e);
                aq[at] = static_cast<double>(d) * std::nearbyint(x[e] * id);
                half_step[at] = d / 2.0;
              }
            }
          INFO("type " << static_cast<int>(t) << " path " << static_cast<int>(path) << " " << s.m << "x"
                       << s.n << "x" << s.k << " acc " << acc << " threads " << th);
          int bad = 0, loose = 0;
          for (i64 i = 0; i < s.m; ++i)
            for (i64 j = 0; j < ldc; ++j) {
              const auto at = static_cast<std::size_t>(i * ldc + j);
              if (j >= s.n) {
                bad += c[at] != c0[at];
                continue;
              }
              double ref = acc ? c0[at] : 0, exact = ref, mag = std::fabs(ref), bound = 0;
              for (i64 p = 0; p < s.k; ++p) {
                const double wv = wd[static_cast<std::size_t>(j * s.k + p)];
                const auto ap = static_cast<std::size_t>(i * s.k + p);
                ref += aq[ap] * wv, mag += std::fabs(aq[ap] * wv);
                exact += double(a[static_cast<std::size_t>(i * lda + p)]) * wv,
                    bound += half_step[ap] * std::fabs(wv);
              }
              // against A quantised: the block sums are exact integers, each scaled once and summed in f32
              const double f32 = static_cast<double>(s.k / 32 + 4) * std::ldexp(1.0, -22) * mag;
              bad += std::fabs(c[at] - ref) > f32;
              // against the exact product: no more than each value's half step allows
              loose += std::fabs(c[at] - exact) > bound * 1.0001 + f32;
            }
          CHECK(bad == 0);
          CHECK(loose == 0);
        }
  cpu::set_threads(threads);
}

TEST_CASE("gemv_q_int8: bad shapes and paths name the op", "[gemv]") {
  std::vector<float> a(64), c(4);
  std::vector<unsigned char> w(256);
  CHECK_THROWS_WITH(cpu::gemv_q_int8(1, 2, 48, a.data(), 48, QuantType::q4_0, w.data(), c.data(), 2),
                    Catch::Contains("cpu::gemv_q_int8") && Catch::Contains("k=48"));
  CHECK_THROWS_WITH(cpu::gemv_q_int8(2, 2, 32, a.data(), 32, QuantType::q8_0, w.data(), c.data(), 1),
                    Catch::Contains("cpu::gemv_q_int8") && Catch::Contains("ldc"));
}
