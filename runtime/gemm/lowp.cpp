// The low-precision products' entry points (cpu/gemm_lowp.hpp, cpu/quant.hpp, cpu/narrow.hpp): the
// checks, the choice of path, the conversions and quantisers, the portable kernels, and the
// emulated paths that widen to f32 a panel at a time and run the f32 GEMM (device/gemm.hpp). The
// AVX-512 and AVX2 kernels are in lowp_avx512.cpp and lowp_avx2.cpp, compiled with their flags.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "lowp_isa.hpp"
#include "metagrad/cpu/gemv_int8.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/helpers.hpp"

namespace metagrad::cpu {

namespace {

using i64 = std::int64_t;
using lowp::GemvArgs;

bool cpu_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return gemm::best_isa() == gemm::Isa::avx512 && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}
bool cpu_vnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return gemm::best_isa() == gemm::Isa::avx512 && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The AVX2 quantised GEMVs convert W's fp16 scales by vcvtph2ps (every AVX2 CPU has F16C).
bool cpu_f16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

const char* path_name(LowpPath p) {
  switch (p) {
    case LowpPath::native:
      return "native";
    case LowpPath::avx2:
      return "avx2";
    case LowpPath::generic:
      return "generic";
    default:
      return "best";
  }
}

// `best` made concrete; a path the CPU cannot run throws.
LowpPath resolve(LowpPath p, bool native_ok, const char* op, const char* native_needs) {
  const bool avx2_ok = gemm::best_isa() >= gemm::Isa::avx2;
  if (p == LowpPath::best)
    return native_ok && gemm::isa() == gemm::Isa::avx512 ? LowpPath::native
           : gemm::isa() >= gemm::Isa::avx2              ? LowpPath::avx2
                                                         : LowpPath::generic;
  if ((p == LowpPath::native && !native_ok) || (p == LowpPath::avx2 && !avx2_ok))
    throw std::runtime_error(std::string(op) + ": path " + path_name(p) + " needs " +
                             (p == LowpPath::native ? native_needs : "AVX2") + ", which this CPU lacks");
  return p;
}

gemm::Isa f32_isa(LowpPath p) {
  return p == LowpPath::native ? gemm::Isa::avx512
         : p == LowpPath::avx2 ? gemm::Isa::avx2
                               : gemm::Isa::generic;
}

std::string shape(i64 m, i64 n, i64 k) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

// Shapes and strides of C (m x n) = A (m x k) B (k x n), row-major with leading dimensions.
void check_gemm(const char* op, i64 m, i64 n, i64 k, const void* a, i64 lda, const void* b, i64 ldb,
                const void* c, i64 ldc, i64 b_cols) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(std::string(op) + ": " + shape(m, n, k) + ": " + why);
  };
  if (m < 0 || n < 0 || k < 0) fail("negative size");
  if (m > 0 && k > 0 && (!a || lda < k)) fail("A needs lda >= k, got lda=" + std::to_string(lda));
  if (n > 0 && k > 0 && (!b || ldb < b_cols))
    fail("B needs ldb >= " + std::to_string(b_cols) + ", got ldb=" + std::to_string(ldb));
  if (m > 0 && n > 0 && (!c || ldc < n)) fail("C needs ldc >= n, got ldc=" + std::to_string(ldc));
}

// f(j0, j1) over column ranges (multiples of `align`), a part per thread where the product is big
// enough: each part packs only its own columns of B (docs/gemm.md, "Threads", the column split).
template <class F>
void split_columns(i64 m, i64 n, i64 k, i64 align, F&& f) {
  const i64 grain = std::max<i64>(align, kParallelMacs / std::max<i64>(1, m * k));
  parallel_for(n, align, grain, f);
}

// The emulated paths: C (+)= A B where A and B's columns are widened to f32 by `a_row(i, out)` and
// `b_panel(j0, w, out)` (k x w, row stride w; or w x k with `b_t`), a panel of B at a time of at most
// 4 MiB, each product the f32 GEMM of `isa`.
template <class BPanel>
void f32_panels(i64 m, i64 n, i64 k, const float* a, i64 lda, BPanel&& b_panel, bool b_t, float* c, i64 ldc,
                bool accumulate, gemm::Isa isa) {
  if (k == 0) {
    if (!accumulate)
      for (i64 i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    return;
  }
  const i64 w_max = std::min(n, std::max<i64>(32, (i64{4} << 20) / (4 * k) / 32 * 32));
  std::vector<float> panel(static_cast<std::size_t>(w_max * k)),
      t(accumulate ? static_cast<std::size_t>(m * w_max) : 0);
  for (i64 j0 = 0; j0 < n; j0 += w_max) {
    const i64 w = std::min(w_max, n - j0);
    b_panel(j0, w, panel.data());
    float* out = accumulate ? t.data() : c + j0;
    const i64 ldo = accumulate ? w : ldc;
    gemm::Problem p{m, w, k, a, lda, 1, panel.data(), b_t ? 1 : w, b_t ? k : 1, out, ldo};
    gemm::sgemm(p, {}, isa);
    if (accumulate)
      for (i64 i = 0; i < m; ++i)
        for (i64 j = 0; j < w; ++j) c[i * ldc + j0 + j] += t[static_cast<std::size_t>(i * w + j)];
  }
}

void s8_generic(const lowp::S8Args& p) {
  for (i64 i = 0; i < p.m; ++i) {
    std::int32_t* cr = p.c + i * p.ldc;
    if (!p.accumulate) std::fill_n(cr, p.n, 0);
    for (i64 q = 0; q < p.k; ++q) {
      const std::int32_t x = p.a[i * p.lda + q];
      const std::int8_t* br = p.b + q * p.ldb;
      for (i64 j = 0; j < p.n; ++j) cr[j] += x * br[j];
    }
  }
}

// The quantised formats, one block at a time, as ggml's reference code.
void quantize_block(const float* x, BlockQ8_0& y) {
  float amax = 0;
  for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127, id = d != 0 ? 1 / d : 0;
  y.d = half::from_float(d);
  for (int j = 0; j < kQuantBlock; ++j)
    y.qs[j] = static_cast<std::int8_t>(std::clamp(std::round(x[j] * id), -127.0f, 127.0f));
}
void quantize_block(const float* x, BlockQ4_0& y) {
  float amax = 0, max = 0;  // max: the value of largest magnitude, with its sign
  for (int j = 0; j < kQuantBlock; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -8, id = d != 0 ? 1 / d : 0;
  y.d = half::from_float(d);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const auto q = [&](float v) {
      return static_cast<std::uint8_t>(
          std::min(15, static_cast<int>(static_cast<std::int8_t>(v * id + 8.5f))));
    };
    y.qs[j] = static_cast<std::uint8_t>(q(x[j]) | q(x[j + kQuantBlock / 2]) << 4);
  }
}
void dequantize_block(const BlockQ8_0& x, float* y) {
  const float d = half::to_float(x.d);
  for (int j = 0; j < kQuantBlock; ++j) y[j] = d * static_cast<float>(x.qs[j]);
}
void dequantize_block(const BlockQ4_0& x, float* y) {
  const float d = half::to_float(x.d);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    y[j] = d * static_cast<float>((x.qs[j] & 15) - 8);
    y[j + kQuantBlock / 2] = d * static_cast<float>((x.qs[j] >> 4) - 8);
  }
}

template <class Block>
void dequantize_rows(i64 rows, i64 k, const void* q, float* y, i64 ldy) {
  const Block* b = static_cast<const Block*>(q);
  const i64 blocks = k / kQuantBlock;
  for (i64 r = 0; r < rows; ++r)
    for (i64 j = 0; j < blocks; ++j) dequantize_block(b[r * blocks + j], y + r * ldy + j * kQuantBlock);
}
void dequantize_any(QuantType t, i64 rows, i64 k, const void* q, float* y, i64 ldy) {
  if (t == QuantType::q8_0)
    dequantize_rows<BlockQ8_0>(rows, k, q, y, ldy);
  else
    dequantize_rows<BlockQ4_0>(rows, k, q, y, ldy);
}

// The portable GEMV: each row of W dequantised a block at a time into the L1 and dotted with
// every row of A.
template <class Block>
void gemv_generic(const GemvArgs& g) {
  const i64 blocks = g.k / kQuantBlock;
  const Block* w = static_cast<const Block*>(g.w);
  float x[kQuantBlock];
  for (i64 j = g.n0; j < g.n1; ++j) {
    float s[4] = {};
    for (i64 i0 = 0; i0 < g.m; i0 += 4) {
      const i64 rows = std::min<i64>(4, g.m - i0);
      std::fill_n(s, 4, 0.0f);
      for (i64 b = 0; b < blocks; ++b) {
        dequantize_block(w[j * blocks + b], x);
        for (i64 i = 0; i < rows; ++i) {
          const float* a = g.a + (i0 + i) * g.lda + b * kQuantBlock;
          float t = 0;
          for (int e = 0; e < kQuantBlock; ++e) t += a[e] * x[e];
          s[i] += t;
        }
      }
      for (i64 i = 0; i < rows; ++i) {
        float& c = g.c[(i0 + i) * g.ldc + j];
        c = g.accumulate ? c + s[i] : s[i];
      }
    }
  }
}

// gemv_q_int8's A (lowp::GemvInt8Args): each row's blocks quantised as Q8_0 with a float scale,
// d = amax / 127, q = x / d rounded to nearest even.
struct Int8Rows {
  i64 pairs;
  std::vector<std::int8_t> qa;
  std::vector<std::int32_t> init;
  std::vector<float> da;
  Int8Rows(QuantType t, i64 m, i64 k, const float* a, i64 lda)
      : pairs((k / kQuantBlock + 1) / 2),
        qa(static_cast<std::size_t>(m * pairs * 64)),
        init(static_cast<std::size_t>(m * pairs * 16)),
        da(static_cast<std::size_t>(m * pairs * 16)) {
    const int off = t == QuantType::q8_0 ? 128 : 8;  // what makes W's values unsigned
    for (i64 i = 0; i < m; ++i)
      for (i64 b = 0; b < k / kQuantBlock; ++b) {
        const float* x = a + i * lda + b * kQuantBlock;
        float amax = 0;
        for (int e = 0; e < kQuantBlock; ++e) amax = std::max(amax, std::fabs(x[e]));
        const float d = amax / 127, id = d != 0 ? 1 / d : 0;
        const auto at = static_cast<std::size_t>(i * pairs * 64 + b * kQuantBlock);
        std::int32_t sum = 0;
        for (int e = 0; e < kQuantBlock; ++e) {
          const auto q = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[e] * id), -127.0f, 127.0f));
          qa[at + static_cast<std::size_t>(e)] = q, sum += q;
        }
        const auto lanes = static_cast<std::size_t>(i * pairs * 16 + b * 8);  // block b's 8 lanes
        init[lanes] = -off * sum;
        std::fill_n(da.begin() + static_cast<std::ptrdiff_t>(lanes), 8, d);
      }
  }
};
// The portable gemv_q_int8: each block's integer dot product, scaled.
template <class Block>
void gemv_int8_generic(const lowp::GemvInt8Args& g) {
  const i64 blocks = g.k / kQuantBlock;
  const Block* w = static_cast<const Block*>(g.w);
  for (i64 j = g.n0; j < g.n1; ++j)
    for (i64 i = 0; i < g.m; ++i) {
      float s = 0;
      for (i64 b = 0; b < blocks; ++b) {
        const Block& x = w[j * blocks + b];
        const std::int8_t* q = g.qa + (i * g.pairs * 64 + b * kQuantBlock);
        std::int32_t t = 0;
        for (int e = 0; e < kQuantBlock; ++e) {
          if constexpr (std::is_same_v<Block, BlockQ8_0>)
            t += x.qs[e] * q[e];
          else
            t += ((e < 16 ? x.qs[e] & 15 : x.qs[e - 16] >> 4) - 8) * q[e];
        }
        s += half::to_float(x.d) * g.da[i * g.pairs * 16 + b * 8] * static_cast<float>(t);
      }
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + s : s;
    }
}
bool cpu_int8_gemv() {
#if defined(__x86_64__)
  return cpu_vnni() && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}
// METAGRAD_QUANT_ACT=int8: gemm_q's few-row products run gemv_q_int8.
bool int8_activations() {
  static const bool on = metagrad::getenv("METAGRAD_QUANT_ACT") == "int8";
  return on;
}

// f(n0, n1) over W's rows (C's columns), split over the threads. The GEMV reads each weight byte
// once at the memory's pace: a part is worth a thread from 32 KiB of W (GPT-2's 768 x 768 Q4_0 is
// 324 KiB, a few tens of microseconds, long past a wake-up; by multiply-adds alone it was one part).
template <class F>
void split_rows(i64 m, i64 n, i64 k, QuantType t, F&& f) {
  const i64 row = static_cast<i64>(quant_row_bytes(t, k));
  const i64 grain =
      std::min(kParallelMacs / std::max<i64>(1, m * k), (i64{32} << 10) / std::max<i64>(1, row));
  parallel_for(n, 16, std::max<i64>(16, grain), f);
}

void check_quant(const char* op, QuantType t, i64 k) {
  if (t != QuantType::q8_0 && t != QuantType::q4_0)
    throw std::invalid_argument(std::string(op) + ": unknown QuantType");
  if (k < 0 || k % kQuantBlock)
    throw std::invalid_argument(std::string(op) + ": k=" + std::to_string(k) +
                                " is not a multiple of 32 (the block)");
}

}  // namespace

LowpPath best_bf16_path() { return resolve(LowpPath::best, cpu_bf16(), "", ""); }
LowpPath best_s8_path() { return resolve(LowpPath::best, cpu_vnni(), "", ""); }
LowpPath best_quant_path() { return resolve(LowpPath::best, gemm::best_isa() == gemm::Isa::avx512, "", ""); }

void f32_to_bf16(const float* x, std::uint16_t* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = bf16::from_float(x[i]);
}
void bf16_to_f32(const std::uint16_t* x, float* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = bf16::to_float(x[i]);
}
void f32_to_f16(const float* x, std::uint16_t* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = half::from_float(x[i]);
}
void f16_to_f32(const std::uint16_t* x, float* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = half::to_float(x[i]);
}

void gemm_bf16(i64 m, i64 n, i64 k, const std::uint16_t* a, i64 lda, const std::uint16_t* b, i64 ldb,
               float* c, i64 ldc, bool accumulate, LowpPath path) {
  check_gemm("cpu::gemm_bf16", m, n, k, a, lda, b, ldb, c, ldc, n);
  path = resolve(path, cpu_bf16(), "cpu::gemm_bf16", "AVX-512 BF16");
  if (m == 0 || n == 0) return;
  if (path != LowpPath::generic) {  // native: vdpbf16ps; avx2: widened as packed, f32 FMAs
    split_columns(m, n, k, 32, [&](i64 j0, i64 j1) {
      const lowp::Bf16Args p{m, j1 - j0, k, a, lda, b + j0, ldb, c + j0, ldc, accumulate};
      path == LowpPath::native ? lowp::avx512::gemm_bf16(p) : lowp::avx::gemm_bf16(p);
    });
    return;
  }
  std::vector<float> af(static_cast<std::size_t>(m * k));  // A widened once, B a panel at a time
  for (i64 i = 0; i < m; ++i) bf16_to_f32(a + i * lda, af.data() + i * k, k);
  auto b_panel = [&](i64 j0, i64 w, float* out) {
    for (i64 q = 0; q < k; ++q) bf16_to_f32(b + q * ldb + j0, out + q * w, w);
  };
  f32_panels(m, n, k, af.data(), k, b_panel, false, c, ldc, accumulate, f32_isa(path));
}

void gemm_s8(i64 m, i64 n, i64 k, const std::int8_t* a, i64 lda, const std::int8_t* b, i64 ldb,
             std::int32_t* c, i64 ldc, bool accumulate, LowpPath path) {
  check_gemm("cpu::gemm_s8", m, n, k, a, lda, b, ldb, c, ldc, n);
  path = resolve(path, cpu_vnni(), "cpu::gemm_s8", "AVX-512 VNNI");
  if (m == 0 || n == 0) return;
  if (path == LowpPath::generic) return s8_generic({m, n, k, a, lda, b, ldb, c, ldc, accumulate});
  std::vector<std::int32_t> bias;
  if (path == LowpPath::native) {  // vpdpbusd's A is unsigned: (a + 128) b, less 128 b's column sums
    bias.assign(static_cast<std::size_t>(n), 0);
    for (i64 q = 0; q < k; ++q)
      for (i64 j = 0; j < n; ++j) bias[static_cast<std::size_t>(j)] -= 128 * b[q * ldb + j];
  }
  split_columns(m, n, k, 32, [&](i64 j0, i64 j1) {
    const lowp::S8Args p{m, j1 - j0, k, a, lda, b + j0, ldb, c + j0, ldc, accumulate};
    if (path == LowpPath::native)
      lowp::avx512::gemm_s8(p, bias.data() + j0);
    else
      lowp::avx::gemm_s8(p);
  });
}

void dequantize_s32(i64 m, i64 n, const std::int32_t* c, i64 ldc, const float* scale_row,
                    const float* scale_col, float* y, i64 ldy) {
  if (m < 0 || n < 0 || (m > 0 && n > 0 && (!c || !y || ldc < n || ldy < n)))
    throw std::invalid_argument("cpu::dequantize_s32: m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                " needs ldc, ldy >= n");
  for (i64 i = 0; i < m; ++i) {
    const float r = scale_row ? scale_row[i] : 1.0f;
    for (i64 j = 0; j < n; ++j)
      y[i * ldy + j] = r * (scale_col ? scale_col[j] : 1.0f) * static_cast<float>(c[i * ldc + j]);
  }
}

void quantize_s8(i64 rows, i64 cols, const float* x, i64 ldx, std::int8_t* q, i64 ldq, float* scale,
                 bool per_column) {
  if (rows < 0 || cols < 0 || (rows > 0 && cols > 0 && (!x || !q || !scale || ldx < cols || ldq < cols)))
    throw std::invalid_argument("cpu::quantize_s8: rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols) + " needs ldx, ldq >= cols");
  const i64 groups = per_column ? cols : rows;
  for (i64 g = 0; g < groups; ++g) scale[g] = 0;
  for (i64 i = 0; i < rows; ++i)
    for (i64 j = 0; j < cols; ++j) {
      float& s = scale[per_column ? j : i];
      s = std::max(s, std::fabs(x[i * ldx + j]));
    }
  for (i64 g = 0; g < groups; ++g) scale[g] /= 127;
  for (i64 i = 0; i < rows; ++i)
    for (i64 j = 0; j < cols; ++j) {
      const float s = scale[per_column ? j : i];
      const float v = s != 0 ? std::round(x[i * ldx + j] / s) : 0.0f;
      q[i * ldq + j] = static_cast<std::int8_t>(std::clamp(v, -127.0f, 127.0f));  // saturated
    }
}

std::size_t quant_row_bytes(QuantType t, i64 k) {
  check_quant("cpu::quant_row_bytes", t, k);
  return static_cast<std::size_t>(k / kQuantBlock) *
         (t == QuantType::q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
}

void quantize(QuantType t, i64 rows, i64 k, const float* x, i64 ldx, void* out) {
  check_quant("cpu::quantize", t, k);
  if (rows < 0 || (rows > 0 && k > 0 && (!x || !out || ldx < k)))
    throw std::invalid_argument("cpu::quantize: rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                                " needs ldx >= k");
  const i64 blocks = k / kQuantBlock;
  for (i64 r = 0; r < rows; ++r)
    for (i64 j = 0; j < blocks; ++j) {
      const float* xs = x + r * ldx + j * kQuantBlock;
      if (t == QuantType::q8_0)
        quantize_block(xs, static_cast<BlockQ8_0*>(out)[r * blocks + j]);
      else
        quantize_block(xs, static_cast<BlockQ4_0*>(out)[r * blocks + j]);
    }
}

void dequantize(QuantType t, i64 rows, i64 k, const void* q, float* y, i64 ldy) {
  check_quant("cpu::dequantize", t, k);
  if (rows < 0 || (rows > 0 && k > 0 && (!q || !y || ldy < k)))
    throw std::invalid_argument("cpu::dequantize: rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                                " needs ldy >= k");
  dequantize_any(t, rows, k, q, y, ldy);
}

void gemv_q(i64 m, i64 n, i64 k, const float* a, i64 lda, QuantType t, const void* w, float* c, i64 ldc,
            bool accumulate, LowpPath path) {
  check_quant("cpu::gemv_q", t, k);
  check_gemm("cpu::gemv_q", m, n, k, a, lda, w, k, c, ldc, k);
  path = resolve(path, gemm::best_isa() == gemm::Isa::avx512, "cpu::gemv_q", "AVX-512");
  if (m == 0 || n == 0) return;
  const bool avx2 = path == LowpPath::avx2 && cpu_f16c();
  split_rows(m, n, k, t, [&](i64 n0, i64 n1) {
    const GemvArgs g{m, n0, n1, k, a, lda, w, c, ldc, accumulate};
    if (path == LowpPath::native)
      lowp::avx512::gemv_q(t, g);
    else if (avx2)
      lowp::avx::gemv_q(t, g);
    else if (t == QuantType::q8_0)
      gemv_generic<BlockQ8_0>(g);
    else
      gemv_generic<BlockQ4_0>(g);
  });
}

void gemv_q_int8(i64 m, i64 n, i64 k, const float* a, i64 lda, QuantType t, const void* w, float* c, i64 ldc,
                 bool accumulate, LowpPath path) {
  check_quant("cpu::gemv_q_int8", t, k);
  check_gemm("cpu::gemv_q_int8", m, n, k, a, lda, w, k, c, ldc, k);
  path = resolve(path, cpu_int8_gemv(), "cpu::gemv_q_int8", "AVX-512 VNNI and VBMI");
  if (m == 0 || n == 0) return;
  const Int8Rows x(t, m, k, a, lda);
  const bool avx2 = path == LowpPath::avx2 && cpu_f16c();
  split_rows(m, n, k, t, [&](i64 n0, i64 n1) {
    const lowp::GemvInt8Args g{m,           n0, n1, k,   x.pairs,   x.qa.data(), x.init.data(),
                               x.da.data(), w,  c,  ldc, accumulate};
    if (path == LowpPath::native) return lowp::avx512::gemv_q_int8(t, g);
    if (avx2) return lowp::avx::gemv_q_int8(t, g);
    (t == QuantType::q8_0 ? gemv_int8_generic<BlockQ8_0> : gemv_int8_generic<BlockQ4_0>)(g);
  });
}

void gemm_q(i64 m, i64 n, i64 k, const float* a, i64 lda, QuantType t, const void* w, float* c, i64 ldc,
            bool accumulate, LowpPath path) {
  check_quant("cpu::gemm_q", t, k);
  check_gemm("cpu::gemm_q", m, n, k, a, lda, w, k, c, ldc, k);
  if (m <= 4 && int8_activations()) return gemv_q_int8(m, n, k, a, lda, t, w, c, ldc, accumulate, path);
  if (m <= 4) return gemv_q(m, n, k, a, lda, t, w, c, ldc, accumulate, path);
  path = resolve(path, gemm::best_isa() == gemm::Isa::avx512, "cpu::gemm_q", "AVX-512");
  if (n == 0) return;
  const std::size_t row_bytes = quant_row_bytes(t, k);
  if (path == LowpPath::native && k > 0) {  // W dequantised inside the packing of its panels
    split_columns(m, n, k, 32, [&](i64 j0, i64 j1) {
      lowp::avx512::gemm_q(
          t, {m, j1 - j0, k, a, lda, static_cast<const char*>(w) + static_cast<std::size_t>(j0) * row_bytes,
              k, c + j0, ldc, accumulate});
    });
    return;
  }
  auto w_panel = [&](i64 j0, i64 rows, float* out) {  // rows j0.. of W, dequantised: W^T's columns
    dequantize_any(t, rows, k, static_cast<const char*>(w) + static_cast<std::size_t>(j0) * row_bytes, out,
                   k);
  };
  f32_panels(m, n, k, a, lda, w_panel, true, c, ldc, accumulate, f32_isa(path));
}

// f16 has no product instruction on x86 short of AVX-512 FP16 (not on Zen 4): A widened once and B a
// panel at a time, as gemm_bf16's avx2 path, through the f32 GEMM of the path's ISA. Every product of
// two halves (11 x 11 significant bits) is exact in f32.
LowpPath best_f16_path() { return resolve(LowpPath::best, gemm::best_isa() == gemm::Isa::avx512, "", ""); }

void gemm_f16(i64 m, i64 n, i64 k, const std::uint16_t* a, i64 lda, const std::uint16_t* b, i64 ldb, float* c,
              i64 ldc, bool accumulate, LowpPath path) {
  check_gemm("cpu::gemm_f16", m, n, k, a, lda, b, ldb, c, ldc, n);
  path = resolve(path, gemm::best_isa() == gemm::Isa::avx512, "cpu::gemm_f16", "AVX-512");
  if (m == 0 || n == 0) return;
  std::vector<float> af(static_cast<std::size_t>(m * k));
  for (i64 i = 0; i < m; ++i) f16_to_f32(a + i * lda, af.data() + i * k, k);
  auto b_panel = [&](i64 j0, i64 w, float* out) {
    for (i64 q = 0; q < k; ++q) f16_to_f32(b + q * ldb + j0, out + q * w, w);
  };
  f32_panels(m, n, k, af.data(), k, b_panel, false, c, ldc, accumulate, f32_isa(path));
}

}  // namespace metagrad::cpu
