// The fused attention of the host devices (runtime/tensor/attention.cpp): its output and the gradients of
// query, key and value against float64 loops, causal or not, with a shared bool mask or a float mask per
// head, over odd lengths and head sizes, at 1 and 2 threads; against the CPU device's composition
// (products and a softmax); and the gradient against central differences of the fused op itself.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <metagrad/cpu/parallel.hpp>
#include <string>
#include <vector>

#include "device_scope.hpp"
#include "gradcheck.hpp"

using namespace metagrad;
using metagrad::test::random_values;
using metagrad::test::require_close;
using i64 = std::int64_t;

namespace {

enum class Mask { none, causal, shared_bool, per_head_float };

struct Case {
  i64 b, h, l, s, e, ev;
  Mask mask;
};

// The reference: output and gradients (of sum(O * probe)) in float64, head by head.
struct Ref {
  std::vector<double> o, dq, dk, dv;
};
Ref reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
              const std::vector<double>& v, const std::vector<double>& add,
              const std::vector<double>& probe) {
  const i64 bh = c.b * c.h, L = c.l, S = c.s, E = c.e, Ev = c.ev;
  const double scale = 1 / std::sqrt(static_cast<double>(E));
  Ref r{std::vector<double>(static_cast<std::size_t>(bh * L * Ev)),
        std::vector<double>(static_cast<std::size_t>(bh * L * E)),
        std::vector<double>(static_cast<std::size_t>(bh * S * E)),
        std::vector<double>(static_cast<std::size_t>(bh * S * Ev))};
  auto at = [](auto& vec, i64 i) -> auto& { return vec[static_cast<std::size_t>(i)]; };
  std::vector<double> p(static_cast<std::size_t>(S)), dp(p.size());
  for (i64 n = 0; n < bh; ++n)
    for (i64 i = 0; i < L; ++i) {
      double mx = -INFINITY;
      for (i64 j = 0; j < S; ++j) {
        double s = 0;
        for (i64 x = 0; x < E; ++x) s += at(q, (n * L + i) * E + x) * at(k, (n * S + j) * E + x);
        s *= scale;
        if (c.mask == Mask::causal && j > i) s = -INFINITY;
        if (c.mask == Mask::shared_bool || c.mask == Mask::per_head_float)
          s += at(add, (c.mask == Mask::per_head_float ? n * L * S : 0) + i * S + j);
        at(p, j) = s, mx = std::max(mx, s);
      }
      double z = 0;
      for (double& x : p) z += (x = std::exp(x - mx));
      for (double& x : p) x /= z;
      double rowdot = 0;
      for (i64 j = 0; j < S; ++j) {
        double d = 0;
        for (i64 x = 0; x < Ev; ++x) {
          const double g = at(probe, (n * L + i) * Ev + x), vv = at(v, (n * S + j) * Ev + x);
          at(r.o, (n * L + i) * Ev + x) += at(p, j) * vv;
          at(r.dv, (n * S + j) * Ev + x) += at(p, j) * g;
          d += g * vv;
        }
        at(dp, j) = d, rowdot += at(p, j) * d;
      }
      for (i64 j = 0; j < S; ++j) {
        const double ds = at(p, j) * (at(dp, j) - rowdot) * scale;
        for (i64 x = 0; x < E; ++x) {
          at(r.dq, (n * L + i) * E + x) += ds * at(k, (n * S + j) * E + x);
          at(r.dk, (n * S + j) * E + x) += ds * at(q, (n * L + i) * E + x);
        }
      }
    }
  return r;
}

struct Inputs {
  std::vector<double> q, k, v, add, probe;
  std::vector<bool> allow;  // the shared bool mask
};
Inputs inputs(const Case& c, std::uint64_t seed) {
  const i64 bh = c.b * c.h;
  Inputs in{random_values(bh * c.l * c.e, seed),      random_values(bh * c.s * c.e, seed + 1),
            random_values(bh * c.s * c.ev, seed + 2), {},
            random_values(bh * c.l * c.ev, seed + 3), {}};
  if (c.mask == Mask::shared_bool) {
    for (i64 i = 0; i < c.l * c.s; ++i) {  // each row keeps its first key: none fully masked
      const bool keep = i % c.s == 0 || (i * 7 + seed) % 3 != 0;
      in.allow.push_back(keep), in.add.push_back(keep ? 0.0 : -INFINITY);
    }
  } else if (c.mask == Mask::per_head_float) {
    in.add = random_values(bh * c.l * c.s, seed + 4, -3, 1);
  }
  return in;
}

// The fused op's output and gradients (float32 on the default device), and whether it ran fused.
struct Got {
  std::vector<double> o, dq, dk, dv;
  bool fused;
};
Got run(const Case& c, const Inputs& in, DType dt = dtypes::float32) {
  const TensorOptions g{.dtype = dt, .requires_grad = true};
  Tensor q(in.q, {c.b, c.h, c.l, c.e}, g), k(in.k, {c.b, c.h, c.s, c.e}, g),
      v(in.v, {c.b, c.h, c.s, c.ev}, g);
  std::optional<Tensor> mask;
  if (c.mask == Mask::shared_bool) mask = Tensor(in.allow, {c.l, c.s});
  if (c.mask == Mask::per_head_float) mask = Tensor(in.add, {c.b, c.h, c.l, c.s}, {.dtype = dt});
  Tensor o = q.scaled_dot_product_attention(k, v, mask, 0, c.mask == Mask::causal);
  const bool fused = o.lazydata.get()->base()->op && o.lazydata.get()->base()->op->op == LoadOps::CUSTOM;
  (o * Tensor(in.probe, o.shape(), {.dtype = dt})).sum().backward();
  return {o.to_vector<double>(), q.grad->to_vector<double>(), k.grad->to_vector<double>(),
          v.grad->to_vector<double>(), fused};
}

const std::vector<Case> kCases = {
    {1, 1, 1, 1, 8, 8, Mask::none},
    {2, 2, 7, 7, 32, 32, Mask::causal},
    {1, 2, 64, 64, 64, 64, Mask::causal},
    {2, 1, 65, 65, 8, 8, Mask::causal},
    {1, 2, 130, 130, 32, 32, Mask::causal},
    {2, 2, 65, 65, 8, 8, Mask::none},
    {1, 1, 130, 130, 64, 64, Mask::none},
    {2, 1, 7, 65, 8, 5, Mask::shared_bool},
    {1, 2, 65, 130, 32, 16, Mask::shared_bool},
    {2, 2, 7, 7, 8, 8, Mask::per_head_float},
    {1, 2, 130, 65, 8, 8, Mask::per_head_float},
    {2, 1, 65, 7, 64, 64, Mask::causal},
};

}  // namespace

TEST_CASE("fused attention: output and gradients against float64 on CLANG and LLVM at 1 and 2 threads",
          "[attention]") {
  const int threads = cpu::threads();
  for (const char* device : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(device);
    if (!scope.ok) continue;
    for (int t : {1, 2}) {
      cpu::set_threads(t);
      for (std::size_t n = 0; n < kCases.size(); ++n) {
        const Case& c = kCases[n];
        INFO(device << " threads " << t << " case " << n << ": L " << c.l << " S " << c.s << " E " << c.e
                    << " Ev " << c.ev << " mask " << static_cast<int>(c.mask));
        const Inputs in = inputs(c, 100 + n);
        const Ref want = reference(c, in.q, in.k, in.v, in.add, in.probe);
        const Got got = run(c, in);
        CHECK(got.fused);
        require_close(got.o, want.o, 2e-5, 1e-4);
        require_close(got.dq, want.dq, 1e-4, 1e-3);
        require_close(got.dk, want.dk, 1e-4, 1e-3);
        require_close(got.dv, want.dv, 1e-4, 1e-3);
      }
    }
  }
  cpu::set_threads(threads);
}

TEST_CASE("fused attention: the same as the CPU device's composition, float64 not fused", "[attention]") {
  const Case c{2, 2, 9, 11, 8, 8, Mask::shared_bool};
  const Inputs in = inputs(c, 7);
  Got composed;
  {
    test::DeviceScope cpu("CPU");
    composed = run(c, in);
    CHECK_FALSE(composed.fused);
  }
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  const Got fused = run(c, in);
  CHECK(fused.fused);
  for (auto [a, b] : {std::pair{&fused.o, &composed.o},
                      {&fused.dq, &composed.dq},
                      {&fused.dk, &composed.dk},
                      {&fused.dv, &composed.dv}})
    require_close(*a, *b, 1e-5, 1e-4);
  CHECK_FALSE(run(c, in, dtypes::float64).fused);  // (float64: the composition)
}

TEST_CASE("fused attention: the gradient against central differences of the fused op", "[attention]") {
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  const Case c{1, 2, 13, 13, 8, 8, Mask::causal};
  const Inputs in = inputs(c, 21);
  const Got got = run(c, in);
  REQUIRE(got.fused);
  // Along a random direction of (q, k, v) in turn: (f(x + h d) - f(x - h d)) / 2h against <grad, d>.
  auto loss = [&](const Inputs& x) {
    Tensor q(x.q, {c.b, c.h, c.l, c.e}), k(x.k, {c.b, c.h, c.s, c.e}), v(x.v, {c.b, c.h, c.s, c.ev});
    Tensor o = q.scaled_dot_product_attention(k, v, {}, 0, true);
    return (o.cast(dtypes::float64) * Tensor(x.probe, o.shape(), {.dtype = dtypes::float64}))
        .sum()
        .item<double>();
  };
  const double h = 1e-2;
  for (int which = 0; which < 3; ++which) {
    Inputs up = in, down = in;
    std::vector<double>& xu = which == 0 ? up.q : which == 1 ? up.k : up.v;
    std::vector<double>& xd = which == 0 ? down.q : which == 1 ? down.k : down.v;
    const std::vector<double>& g = which == 0 ? got.dq : which == 1 ? got.dk : got.dv;
    const std::vector<double> d = random_values(static_cast<i64>(g.size()), 300 + which);
    double want = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      want += g[i] * d[i];
      xu[i] = static_cast<float>(xu[i] + h * d[i]), xd[i] = static_cast<float>(xd[i] - h * d[i]);
    }
    const double fd = (loss(up) - loss(down)) / (2 * h);
    INFO("input " << which << ": finite difference " << fd << ", gradient " << want);
    CHECK(std::abs(fd - want) <= 1e-2 * (1 + std::abs(want)));
  }
}
