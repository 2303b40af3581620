// Fused attention on the host devices: a CUSTOM load per direction, run by the scheduler as a host
// program (a replayable fill, so a TinyJit step replays it among its kernels). Each (batch, head) is one
// thread's work; its queries go in blocks of kBr rows against blocks of kBc keys, whose scores live in a
// tile of the L1 cache, never in memory. The products are the runtime GEMM's (CPUID's ISA).
#include "attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../lazy/replayable_fill.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/helpers.hpp"

namespace metagrad {

#if defined(__x86_64__)
namespace attention::avx {
void exp_row(float* x, std::int64_t end, std::int64_t n, float base);  // attention_avx2.cpp
}
#endif

namespace {

using i64 = std::int64_t;
constexpr i64 kBr = 64, kBc = 64;  // query rows and keys of a tile: 16 KiB of scores
constexpr float kInf = std::numeric_limits<float>::infinity();

// The sizes of one call: bh products of L queries and S keys, E wide (Ev for the values); the additive
// mask (L, S) shared by every head (mask_heads 1) or one per head (mask_heads bh), or none (0).
struct Shape {
  i64 bh, l, s, e, ev, mask_heads;
  bool causal;
  float scale;
  i64 o_size() const { return bh * l * ev; }
};

const float* in(const std::vector<RawBuffer*>& b, std::size_t i) {
  return static_cast<const float*>(dynamic_cast<RawMallocBuffer&>(*b.at(i)).data());
}
float* out(RawBuffer& b) { return static_cast<float*>(dynamic_cast<RawMallocBuffer&>(b).data()); }

// C (m x n, row stride ldc) = A B, or (acc) += A B through `tile` (the GEMM writes C, it does not add).
void product(i64 m, i64 n, i64 k, const float* a, i64 ars, i64 acs, const float* b, i64 brs, i64 bcs,
             float* c, i64 ldc, bool acc, std::vector<float>& tile, const gemm::GemmBlocking& bk) {
  if (!acc) return gemm::sgemm({m, n, k, a, ars, acs, b, brs, bcs, c, ldc}, bk);
  tile.resize(static_cast<std::size_t>(m * n));
  gemm::sgemm({m, n, k, a, ars, acs, b, brs, bcs, tile.data(), n}, bk);
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j) c[i * ldc + j] += tile[static_cast<std::size_t>(i * n + j)];
}

#include "attention_exp.inc"  // exp_poly, exp_row: this copy for CPUs without AVX2

// exp_row on the widest copy the CPU runs (METAGRAD_ISA chooses as it does for the GEMM).
void softmax_exp(float* x, i64 end, i64 n, float base) {
#if defined(__x86_64__)
  static const bool avx2 = gemm::isa() >= gemm::Isa::avx2;
  if (avx2) return attention::avx::exp_row(x, end, n, base);
#endif
  exp_row(x, end, n, base);
}

// Sums and maxima of a row in 8 lanes, which the compiler vectorises (one accumulator would be a chain
// it may not reorder).
constexpr i64 kLanes = 8;
float row_sum(const float* x, i64 n) {
  float acc[kLanes] = {};
  i64 c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (i64 u = 0; u < kLanes; ++u) acc[u] += x[c + u];
  for (; c < n; ++c) acc[0] += x[c];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}
float row_max(const float* x, i64 n, float init) {
  float acc[kLanes];
  std::fill(acc, acc + kLanes, init);
  i64 c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (i64 u = 0; u < kLanes; ++u) acc[u] = std::max(acc[u], x[c + u]);
  for (; c < n; ++c) acc[0] = std::max(acc[0], x[c]);
  return *std::max_element(acc, acc + kLanes);
}
float row_dot(const float* x, const float* y, i64 n) {
  float acc[kLanes] = {};
  i64 c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (i64 u = 0; u < kLanes; ++u) acc[u] += x[c + u] * y[c + u];
  for (; c < n; ++c) acc[0] += x[c] * y[c];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}
// The keys row i of a tile (keys j0 .. j0 + nc) may attend: [0, end).
i64 attended(const Shape& sh, i64 i, i64 j0, i64 nc) {
  return sh.causal ? std::clamp(i - j0 + 1, i64{0}, nc) : nc;
}

// The scores of queries i0 .. i0 + nb against keys j0 .. j0 + nc of head `h` into t (row stride kBc),
// scaled and masked (past a causal row's end: not written, its callers' exp_row writes 0 there).
void scores(const Shape& sh, i64 h, const float* q, const float* k, const float* mask, i64 i0, i64 nb, i64 j0,
            i64 nc, float* t, const gemm::GemmBlocking& bk) {
  gemm::sgemm({nb, nc, sh.e, q + i0 * sh.e, sh.e, 1, k + j0 * sh.e, 1, sh.e, t, kBc}, bk);
  const float* m = mask ? mask + (sh.mask_heads > 1 ? h : 0) * sh.l * sh.s : nullptr;
  for (i64 r = 0; r < nb; ++r) {
    float* row = t + r * kBc;
    const i64 end = attended(sh, i0 + r, j0, nc);
    if (m)
      for (i64 c = 0, at = (i0 + r) * sh.s + j0; c < end; ++c) row[c] = row[c] * sh.scale + m[at + c];
    else
      for (i64 c = 0; c < end; ++c) row[c] *= sh.scale;
  }
}

// The forward of heads [h0, h1): O (bh, L, Ev) then the log-sum-exp of each score row (bh, L).
void forward_heads(const Shape& sh, const std::vector<RawBuffer*>& bufs, float* o_all, i64 h0, i64 h1) {
  const float *q_all = in(bufs, 0), *k_all = in(bufs, 1), *v_all = in(bufs, 2);
  const float* mask = sh.mask_heads ? in(bufs, 3) : nullptr;
  float* lse_all = o_all + sh.o_size();
  const gemm::GemmBlocking bk = gemm::default_blocking();
  std::vector<float> t(static_cast<std::size_t>(kBr * kBc)), tile, m(kBr), l(kBr);
  for (i64 h = h0; h < h1; ++h) {
    const float *q = q_all + h * sh.l * sh.e, *k = k_all + h * sh.s * sh.e, *v = v_all + h * sh.s * sh.ev;
    float *o = o_all + h * sh.l * sh.ev, *lse = lse_all + h * sh.l;
    for (i64 i0 = 0; i0 < sh.l; i0 += kBr) {
      const i64 nb = std::min(kBr, sh.l - i0);
      const i64 keys = sh.causal ? std::min(sh.s, i0 + nb) : sh.s;  // (later keys: masked for every row)
      for (i64 j0 = 0; j0 < keys; j0 += kBc) {
        const i64 nc = std::min(kBc, keys - j0);
        scores(sh, h, q, k, mask, i0, nb, j0, nc, t.data(), bk);
        // The online softmax: each row's running max and sum, O's row rescaled when the max grows.
        for (i64 r = 0; r < nb; ++r) {
          float* row = t.data() + r * kBc;
          const i64 end = attended(sh, i0 + r, j0, nc);
          const float old = j0 == 0 ? -kInf : m[r], mx = row_max(row, end, old);
          const float base = mx == -kInf ? 0.0f : mx;  // (a row masked so far: its terms 0)
          softmax_exp(row, end, nc, base);
          const float sum = row_sum(row, end);
          if (j0 == 0) {
            l[r] = sum, m[r] = mx;
            continue;
          }
          const float corr = std::exp(old - base);
          l[r] = l[r] * corr + sum, m[r] = mx;
          if (corr != 1.0f)
            for (float *p = o + (i0 + r) * sh.ev, *e = p + sh.ev; p < e; ++p) *p *= corr;
        }
        product(nb, sh.ev, nc, t.data(), kBc, 1, v + j0 * sh.ev, sh.ev, 1, o + i0 * sh.ev, sh.ev, j0 > 0,
                tile, bk);
      }
      for (i64 r = 0; r < nb; ++r) {
        const float inv = 1.0f / l[r];
        for (float *p = o + (i0 + r) * sh.ev, *e = p + sh.ev; p < e; ++p) *p *= inv;
        lse[i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

// The backward of heads [h0, h1) into dQ (bh, L, E), dK (bh, S, E), dV (bh, S, Ev), one after another:
// P from the scores and the forward's log-sum-exp, dV += P^T dO, dS = P (dO V^T - rowsum(dO O)),
// dQ += dS K, dK += dS^T Q (dS scaled as the scores were). Each block of dQ, dK and dV is written by
// its first product and added to by the others (one block each where L and S fit one: no pass to add).
void backward_heads(const Shape& sh, const std::vector<RawBuffer*>& bufs, float* d_all, i64 h0, i64 h1) {
  const float *q_all = in(bufs, 0), *k_all = in(bufs, 1), *v_all = in(bufs, 2), *fwd = in(bufs, 3),
              *g_all = in(bufs, 4);
  const float* mask = sh.mask_heads ? in(bufs, 5) : nullptr;
  float *dq_all = d_all, *dk_all = dq_all + sh.bh * sh.l * sh.e, *dv_all = dk_all + sh.bh * sh.s * sh.e;
  const gemm::GemmBlocking bk = gemm::default_blocking();
  std::vector<float> p(static_cast<std::size_t>(kBr * kBc)), ds(p.size()), tile,
      rowdot(static_cast<std::size_t>(sh.l));
  std::vector<char> kv_written(static_cast<std::size_t>((sh.s + kBc - 1) / kBc));
  for (i64 h = h0; h < h1; ++h) {
    const float *q = q_all + h * sh.l * sh.e, *k = k_all + h * sh.s * sh.e, *v = v_all + h * sh.s * sh.ev;
    const float *o = fwd + h * sh.l * sh.ev, *lse = fwd + sh.o_size() + h * sh.l,
                *g = g_all + h * sh.l * sh.ev;
    float *dq = dq_all + h * sh.l * sh.e, *dk = dk_all + h * sh.s * sh.e, *dv = dv_all + h * sh.s * sh.ev;
    std::fill(kv_written.begin(), kv_written.end(), 0);
    for (i64 i = 0; i < sh.l; ++i)
      rowdot[static_cast<std::size_t>(i)] = row_dot(g + i * sh.ev, o + i * sh.ev, sh.ev);
    for (i64 i0 = 0; i0 < sh.l; i0 += kBr) {
      const i64 nb = std::min(kBr, sh.l - i0);
      const i64 keys = sh.causal ? std::min(sh.s, i0 + nb) : sh.s;
      for (i64 j0 = 0; j0 < keys; j0 += kBc) {
        const i64 nc = std::min(kBc, keys - j0);
        char& kv = kv_written[static_cast<std::size_t>(j0 / kBc)];
        scores(sh, h, q, k, mask, i0, nb, j0, nc, p.data(), bk);
        for (i64 r = 0; r < nb; ++r)
          softmax_exp(p.data() + r * kBc, attended(sh, i0 + r, j0, nc), nc, lse[i0 + r]);
        product(nc, sh.ev, nb, p.data(), 1, kBc, g + i0 * sh.ev, sh.ev, 1, dv + j0 * sh.ev, sh.ev, kv, tile,
                bk);
        gemm::sgemm({nb, nc, sh.ev, g + i0 * sh.ev, sh.ev, 1, v + j0 * sh.ev, 1, sh.ev, ds.data(), kBc}, bk);
        for (i64 r = 0; r < nb; ++r) {
          const float d = rowdot[static_cast<std::size_t>(i0 + r)];
          float* x = ds.data() + r * kBc;
          const float* pr = p.data() + r * kBc;
          for (i64 c = 0; c < nc; ++c) x[c] = pr[c] * (x[c] - d) * sh.scale;
        }
        product(nb, sh.e, nc, ds.data(), kBc, 1, k + j0 * sh.e, sh.e, 1, dq + i0 * sh.e, sh.e, j0 > 0, tile,
                bk);
        product(nc, sh.e, nb, ds.data(), 1, kBc, q + i0 * sh.e, sh.e, 1, dk + j0 * sh.e, sh.e, kv, tile, bk);
        kv = 1;
      }
    }
    for (std::size_t b = 0; b < kv_written.size(); ++b)  // keys no query attends (causal, S > L)
      if (!kv_written[b]) {
        const i64 j0 = static_cast<i64>(b) * kBc, nc = std::min(kBc, sh.s - j0);
        std::fill(dk + j0 * sh.e, dk + (j0 + nc) * sh.e, 0.0f);
        std::fill(dv + j0 * sh.ev, dv + (j0 + nc) * sh.ev, 0.0f);
      }
  }
}

// Heads split over the thread pool, whole heads a part.
template <class F>
void over_heads(const Shape& sh, i64 macs_per_head, F&& f) {
  cpu::parallel_products(sh.bh, macs_per_head, [&](i64 h0, i64 h1) { f(h0, h1); });
}

LazyBufferPtr fill(const Shape& sh, i64 size, const std::string& device, std::vector<LazyBufferPtr> src,
                   bool backward) {
  for (auto& s : src) s = s->contiguous();
  auto arg = std::make_shared<const CustomArg>(
      CustomArg{ReplayableFill{[sh, backward](RawBuffer& o, const std::vector<RawBuffer*>& bufs) {
        const i64 macs = sh.l * sh.s * (sh.e + sh.ev) * (backward ? 3 : 1);
        over_heads(sh, macs, [&](i64 h0, i64 h1) {
          (backward ? backward_heads : forward_heads)(sh, bufs, out(o), h0, h1);
        });
      }}});
  return LazyBuffer::loadop(LoadOps::CUSTOM, {size}, dtypes::float32, device, arg, std::move(src));
}

// `n` elements of the flat buffer `b` from `at`, as `shape`.
LazyBufferPtr part(const LazyBufferPtr& b, i64 at, i64 n, const Dims& shape) {
  return b->movement_op(MovementOps::SHRINK, Pairs{{at, at + n}})->movement_op(MovementOps::RESHAPE, shape);
}

// The autograd op on q (bh, L, E), k (bh, S, E), v (bh, S, Ev) and a mask that needs no gradient.
struct FusedAttention final : FunctionImpl<FusedAttention, 3> {
  Shape sh{};
  LazyBufferPtr q, k, v, mask, fwd;  // fwd: O, then the log-sum-exp rows
  LazyBufferPtr forward(const LazyBufferPtr& q_, const LazyBufferPtr& k_, const LazyBufferPtr& v_,
                        const LazyBufferPtr& mask_, const Shape& shape) {
    q = q_, k = k_, v = v_, mask = mask_, sh = shape;
    std::vector<LazyBufferPtr> src{q, k, v};
    if (mask) src.push_back(mask);
    fwd = fill(sh, sh.o_size() + sh.bh * sh.l, q->device, src, false);
    return part(fwd, 0, sh.o_size(), {sh.bh, sh.l, sh.ev});
  }
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override {
    std::vector<LazyBufferPtr> src{q, k, v, fwd, g};
    if (mask) src.push_back(mask);
    const i64 nq = sh.bh * sh.l * sh.e, nk = sh.bh * sh.s * sh.e, nv = sh.bh * sh.s * sh.ev;
    LazyBufferPtr d = fill(sh, nq + nk + nv, q->device, src, true);
    return {needs_input_grad[0] ? part(d, 0, nq, {sh.bh, sh.l, sh.e}) : nullptr,
            needs_input_grad[1] ? part(d, nq, nk, {sh.bh, sh.s, sh.e}) : nullptr,
            needs_input_grad[2] ? part(d, nq + nk, nv, {sh.bh, sh.s, sh.ev}) : nullptr};
  }
};

bool fused_device(const std::string& d) {
  const std::string c = Device::canonicalize(d.empty() ? Device::DEFAULT : d);
  return c == "CLANG" || c == "LLVM";
}

}  // namespace

std::optional<Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const std::optional<Tensor>& mask, bool causal, double dropout_p) {
  const bool enabled = getenv_int("METAGRAD_FUSED_ATTENTION", 1) != 0;
  const Dims& qs = q.shape();
  const std::size_t n = qs.size();
  if (!enabled || (dropout_p > 0 && Tensor::training) || q.dtype() != dtypes::float32 ||
      k.dtype() != dtypes::float32 || v.dtype() != dtypes::float32 || !fused_device(q.device()) ||
      k.device() != q.device() || v.device() != q.device() || k.ndim() != q.ndim() || v.ndim() != q.ndim() ||
      (mask && (mask->requires_grad.get().value_or(false) || mask->device() != q.device())))
    return std::nullopt;
  for (std::size_t d = 0; d + 2 < n; ++d)
    if (k.shape()[d] != qs[d] || v.shape()[d] != qs[d]) return std::nullopt;  // (broadcast: composed)
  Shape sh{};
  sh.l = qs[n - 2], sh.e = qs[n - 1], sh.s = k.shape()[n - 2], sh.ev = v.shape().back();
  sh.bh = 1;
  for (std::size_t d = 0; d + 2 < n; ++d) sh.bh *= qs[d];
  if (sh.bh == 0 || sh.l == 0 || sh.s == 0 || sh.e == 0 || sh.ev == 0) return std::nullopt;
  sh.causal = causal;
  sh.scale = static_cast<float>(1 / std::sqrt(static_cast<double>(sh.e)));
  std::vector<std::int64_t> batch(qs.begin(), qs.end() - 2);
  std::optional<Tensor> add;  // the mask as (1 or bh, L, S) float32 terms
  if (mask) {
    Tensor a = mask->dtype() == dtypes::bool_ ? mask->where(0.0, -INFINITY) : *mask;
    // (the caller checked that it broadcasts to the scores: at most their rank)
    std::vector<std::int64_t> as(n - a.shape().size(), 1), full(n - 2, 1);
    as.insert(as.end(), a.shape().begin(), a.shape().end());
    a = a.cast(dtypes::float32).reshape(as);
    const bool shared = std::all_of(as.begin(), as.end() - 2, [](std::int64_t x) { return x == 1; });
    if (!shared) full = batch;
    full.push_back(sh.l), full.push_back(sh.s);
    sh.mask_heads = shared ? 1 : sh.bh;
    add = a.expand(full).reshape({sh.mask_heads, sh.l, sh.s});
  }
  Tensor o =
      FusedAttention::apply(q.reshape({sh.bh, sh.l, sh.e}), k.reshape({sh.bh, sh.s, sh.e}),
                            v.reshape({sh.bh, sh.s, sh.ev}), add ? add->lazydata.get() : LazyBufferPtr{}, sh);
  batch.push_back(sh.l), batch.push_back(sh.ev);
  return o.reshape(batch);
}

}  // namespace metagrad
