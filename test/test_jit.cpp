// TinyJit on a compiled device (CLANG): replays agree with the step run without the JIT (results
// computed here in double, and an MLP trained both ways), replays do no scheduling, the capture
// describes the step, and what cannot be replayed is refused with a clear error.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using i64 = std::int64_t;

namespace {

Tensor f32(const std::vector<double>& v, const Dims& shape) {
  return Tensor(v, shape, {.dtype = dtypes::float32});
}

struct Mlp {
  nn::Linear l1{12, 16}, l2{16, 4};
  Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
  std::vector<Tensor> params() const { return {l1.weight, *l1.bias, l2.weight, *l2.bias}; }
};

}  // namespace

TEST_CASE("TinyJit replays an elementwise and reduce step on new inputs", "[jit]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  int traced = 0;
  TinyJit jit([&](const Tensor& a, const Tensor& b) {
    ++traced;
    return std::vector<Tensor>{(a * b + 1).relu(), (a - b).sum(1)};
  });
  for (unsigned call = 0; call < 6; ++call) {
    auto va = test::random_floats(15, call), vb = test::random_floats(15, 100 + call);
    // Even calls pass a transposed view: the JIT binds a copy of its elements (one more kernel).
    Tensor a = f32(va, {3, 5});
    if (call % 2 == 0) {
      std::vector<double> t(15);
      for (i64 i = 0; i < 3; ++i)
        for (i64 j = 0; j < 5; ++j) t[j * 3 + i] = va[i * 5 + j];
      a = f32(t, {5, 3}).permute({1, 0});
    }
    Tensor b = f32(vb, {3, 5});
    a.realize(), b.realize();
    i64 before = GlobalCounters::kernel_count;
    std::vector<Tensor> out = jit(a, b);
    if (call >= 2)
      REQUIRE(GlobalCounters::kernel_count - before ==
              static_cast<i64>(jit.captured()->kernels.size()) + (call % 2 ? 0 : 1));
    auto r0 = out[0].to_vector<float>(), r1 = out[1].to_vector<float>();
    for (std::size_t i = 0; i < 15; ++i)
      REQUIRE(r0[i] == Approx(std::max(0.0, va[i] * vb[i] + 1)).margin(1e-6));
    for (std::size_t r = 0; r < 3; ++r) {
      double s = 0;
      for (std::size_t j = 0; j < 5; ++j) s += va[r * 5 + j] - vb[r * 5 + j];
      REQUIRE(r1[r] == Approx(s).margin(1e-5));
    }
  }
  REQUIRE(traced == 2);  // a plain call, a captured one; the other four replayed
  const CapturedStep& c = *jit.captured();
  REQUIRE(c.inputs.size() == 2);
  REQUIRE(c.outputs.size() == 2);
  REQUIRE(c.state.empty());
  REQUIRE(c.kernels.size() == 2);
  for (const auto& k : c.kernels) REQUIRE(!k.runner.prg.empty());
  for (std::size_t i = 0; i < 2; ++i) {
    REQUIRE(c.inputs[i]);
    REQUIRE(c.slots[*c.inputs[i]].role == CapturedStep::Role::Input);
    REQUIRE(c.slots[c.outputs[i]].role == CapturedStep::Role::Output);
  }
}

TEST_CASE("TinyJit replays host kernels by direct calls, and through ASTRunner under DEBUG=2", "[jit]") {
  // A small kernel (one thread), a large one (split across the pool) and a GEMM with an epilogue
  // (a program, not a host function); the same tensors again, new ones, and a state that moves
  // between buffers on every call. DEBUG=2 at capture takes the ASTRunner path (timed and
  // printed); both must compute the same and count the same work.
  const char* saved = std::getenv("DEBUG");
  std::string restore = saved ? saved : "";
  for (const char* device : {"CLANG", "LLVM"}) {
    test::DeviceScope dev(device);
    if (!dev.ok) continue;
    for (const char* debug : {"0", "2"}) {
      INFO(device << ", DEBUG=" << debug);
      setenv("DEBUG", debug, 1);
      constexpr i64 n = 1 << 17;
      Tensor acc = Tensor::zeros({4});
      acc.realize();
      const std::vector<double> vw = test::random_floats(6 * 3, 99);
      Tensor w = f32(vw, {6, 3}).realize();
      TinyJit jit([&](const Tensor& small, const Tensor& big, const Tensor& m) {
        acc.assign(acc + small);
        return std::vector<Tensor>{small * 3 - 1, (big * big + big).exp2() * 0.5, (m.matmul(w) + 1).relu()};
      });
      std::vector<double> want_acc(4, 0.0);
      std::vector<double> vs, vb, vm;
      std::optional<Tensor> s, b, m, kept;
      for (unsigned call = 0; call < 7; ++call) {
        if (call % 3 != 2) {  // every third call passes the previous call's tensors again
          vs = test::random_floats(4, call), vb = test::random_floats(static_cast<std::size_t>(n), 50 + call);
          vm = test::random_floats(5 * 6, 80 + call);
          s = f32(vs, {4}).realize(), b = f32(vb, {n}).realize(), m = f32(vm, {5, 6}).realize();
        }
        i64 kernels = GlobalCounters::kernel_count, ops = GlobalCounters::global_ops;
        std::vector<Tensor> out = jit(*s, *b, *m);
        if (call == 1)
          REQUIRE(std::ranges::any_of(jit.captured()->kernels, [](const auto& k) {
            return k.runner.name.find("gemm") != std::string::npos;
          }));
        if (call >= 2) {
          REQUIRE(GlobalCounters::kernel_count - kernels == static_cast<i64>(jit.captured()->kernels.size()));
          i64 step_ops = 0;
          for (const auto& k : jit.captured()->kernels) step_ops += k.runner.op_estimate;
          REQUIRE(GlobalCounters::global_ops - ops == step_ops);
        }
        // An output still held from the last call keeps its own LazyBuffer (one nothing holds is
        // returned again); both name the JIT's memory, which this call overwrote.
        if (kept) {
          REQUIRE(kept->lazydata.get() != out[0].lazydata.get());
          REQUIRE(kept->lazydata->realized == out[0].lazydata->realized);
          REQUIRE(kept->shape() == Dims{4});
        }
        kept = call % 2 ? std::optional<Tensor>(out[0]) : std::nullopt;
        for (std::size_t i = 0; i < 4; ++i) want_acc[i] += vs[i];
        auto r0 = out[0].to_vector<float>(), r1 = out[1].to_vector<float>(), ra = acc.to_vector<float>();
        for (std::size_t i = 0; i < 4; ++i) {
          REQUIRE(r0[i] == Approx(vs[i] * 3 - 1).margin(1e-6));
          REQUIRE(ra[i] == Approx(want_acc[i]).margin(1e-5));
        }
        for (std::size_t i = 0; i < vb.size(); i += 997)
          REQUIRE(r1[i] == Approx(std::exp2(vb[i] * vb[i] + vb[i]) * 0.5).epsilon(1e-6));
        auto r2 = out[2].to_vector<float>();
        for (std::size_t i = 0; i < 5; ++i)
          for (std::size_t j = 0; j < 3; ++j) {
            double want = 1;
            for (std::size_t p = 0; p < 6; ++p) want += vm[i * 6 + p] * vw[p * 3 + j];
            REQUIRE(r2[i * 3 + j] == Approx(std::max(want, 0.0)).margin(1e-5));
          }
      }
    }
  }
  if (saved)
    setenv("DEBUG", restore.c_str(), 1);
  else
    unsetenv("DEBUG");
}

TEST_CASE("TinyJit updates a state in place unless a kernel reads its old value after the update", "[jit]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  constexpr i64 n = 64;
  Tensor a = Tensor::zeros({n}), b = Tensor::zeros({n}), q = f32(test::random_floats(n, 7), {8, 8});
  a.realize(), b.realize(), q.realize();
  TinyJit jit([&](const Tensor& x) {
    Tensor next_b = b + a;              // a's old value, read by b's update, which runs after a's
    a.assign(a + x);                    // the same element of a: in place, were it not for b's update
    b.assign(next_b);                   // in place
    q.assign(q.transpose() * 0.5 + 1);  // other elements than it writes: never in place
    return std::vector<Tensor>{a * 2};
  });
  std::vector<double> wa(n, 0.0), wb(n, 0.0), wq = test::random_floats(n, 7);
  for (unsigned call = 0; call < 6; ++call) {
    INFO("call " << call);
    auto vx = test::random_floats(n, 20 + call);
    Tensor out = jit(f32(vx, {n}).realize())[0];
    std::vector<double> tq(n);
    for (i64 i = 0; i < 8; ++i)
      for (i64 j = 0; j < 8; ++j) tq[i * 8 + j] = wq[j * 8 + i] * 0.5 + 1;
    wq = tq;
    for (i64 i = 0; i < n; ++i) wb[i] += wa[i], wa[i] += vx[i];
    auto ra = a.to_vector<float>(), rb = b.to_vector<float>(), rq = q.to_vector<float>(),
         ro = out.to_vector<float>();
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      REQUIRE(ra[i] == Approx(wa[i]).margin(1e-5));
      REQUIRE(rb[i] == Approx(wb[i]).margin(1e-5));
      REQUIRE(rq[i] == Approx(wq[i]).margin(1e-5));
      REQUIRE(ro[i] == Approx(2 * wa[i]).margin(1e-5));
    }
  }
  const CapturedStep& c = *jit.captured();
  REQUIRE(c.state.size() == 3);
  for (const auto& u : c.state) {
    LazyBufferPtr h = u.holder.lock();
    INFO((h == a.lazydata.get() ? "a" : h == b.lazydata.get() ? "b" : "q"));
    REQUIRE(u.in_place == (h == b.lazydata.get()));
    REQUIRE((c.slots[u.read].buf == c.slots[u.write].buf) == u.in_place);
  }
}

TEST_CASE("TinyJit refuses arguments whose shape, dtype or device changed", "[jit]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit jit([](const Tensor& a) { return a * 2; });
  for (int i = 0; i < 3; ++i) jit(Tensor::ones({4, 2}));
  REQUIRE_THROWS_WITH(jit(Tensor::ones({2, 4})), Contains("(2, 4)") && Contains("(4, 2)"));
  REQUIRE_THROWS_WITH(jit(Tensor::ones({4, 2}, {.dtype = dtypes::float64})),
                      Contains("float64") && Contains("float32"));
  REQUIRE_THROWS_WITH(jit(Tensor::ones({4, 2}, {.device = "CPU"})), Contains("CPU"));
  REQUIRE(jit(Tensor::full({4, 2}, 3.0)).to_vector<float>() == std::vector<float>(8, 6.0f));
}

TEST_CASE("TinyJit refuses an interpreted device and work a replay would not repeat", "[jit]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  TinyJit on_cpu([](const Tensor& a) { return a + 1; });
  REQUIRE_THROWS_WITH(on_cpu(Tensor::ones({3}, {.device = "CPU"})), Contains("interpreted"));
  TinyJit random([](const Tensor& a) { return a + Tensor::rand({3}); });
  random(Tensor::ones({3}));
  REQUIRE_THROWS_WITH(random(Tensor::ones({3})), Contains("random numbers"));
  TinyJit copy([](const Tensor& a) { return a + Tensor::ones({3}, {.device = "CPU"}).exp().to("CLANG"); });
  copy(Tensor::ones({3}));
  REQUIRE_THROWS_WITH(copy(Tensor::ones({3})), Contains("interpreted device"));
}

TEST_CASE("an MLP trained with TinyJit matches the same training without it", "[jit]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  const i64 batch = 8, steps = 12;
  std::vector<Tensor> xs, ys;
  for (i64 s = 0; s < 3; ++s) {  // three batches in turn; the label is the largest of 4 features
    auto v = test::random_floats(batch * 12, static_cast<unsigned>(s));
    xs.push_back(f32(v, {batch, 12}).realize());
    std::vector<std::int32_t> labels;
    for (i64 i = 0; i < batch; ++i)
      labels.push_back(static_cast<std::int32_t>(std::max_element(&v[i * 12], &v[i * 12 + 4]) - &v[i * 12]));
    ys.push_back(Tensor(labels, {batch}).realize());
  }
  auto train = [&](bool use_jit, std::vector<float>& losses) {
    Tensor::manual_seed(11);
    Mlp model;
    nn::optim::SGD opt(model.params(), 0.05, 0.9);
    Tensor::TrainingGuard training;
    auto step = [&](const Tensor& x, const Tensor& y) {
      Tensor loss = model(x).sparse_categorical_crossentropy(y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    TinyJit jit(step);
    for (i64 s = 0; s < steps; ++s)
      losses.push_back((use_jit ? jit(xs[s % 3], ys[s % 3]) : step(xs[s % 3], ys[s % 3])).item<float>());
    if (use_jit) {
      const CapturedStep& c = *jit.captured();
      REQUIRE(c.state.size() == 8);  // 4 parameters, 4 momentum buffers
      for (const auto& u : c.state) REQUIRE(c.slots[u.read].role == CapturedStep::Role::State);
    }
    std::vector<std::vector<float>> weights;
    for (const Tensor& p : model.params()) weights.push_back(p.to_vector<float>());
    return weights;
  };
  std::vector<float> plain_losses, jit_losses;
  auto plain = train(false, plain_losses);
  auto jitted = train(true, jit_losses);
  REQUIRE(plain_losses.size() == jit_losses.size());
  for (std::size_t s = 0; s < plain_losses.size(); ++s) {
    INFO("step " << s);
    REQUIRE(jit_losses[s] == Approx(plain_losses[s]).epsilon(1e-5));
  }
  REQUIRE(plain_losses[9] < plain_losses[0]);  // it trained (the same batch, 9 steps later)
  for (std::size_t p = 0; p < plain.size(); ++p)
    for (std::size_t i = 0; i < plain[p].size(); ++i)
      REQUIRE(jitted[p][i] == Approx(plain[p][i]).margin(1e-5));
}

TEST_CASE("TinyJit replays AdamW's multi-output kernels: parameters and states updated in place", "[jit]") {
  for (const char* d : {"CLANG", "LLVM"}) {
    test::DeviceScope dev(d);
    if (!dev.ok) continue;
    INFO(d);
    const i64 batch = 8, steps = 8;
    auto x = f32(test::random_floats(batch * 12, 3), {batch, 12}).realize();
    auto y = Tensor(std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3}, {batch}).realize();
    auto train = [&](bool use_jit, std::vector<float>& losses) {
      Tensor::manual_seed(5);
      Mlp model;
      nn::optim::AdamW opt(model.params(), 0.01);
      Tensor::TrainingGuard training;
      auto step = [&](const Tensor& xb, const Tensor& yb) {
        Tensor loss = model(xb).sparse_categorical_crossentropy(yb);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return loss;
      };
      TinyJit jit(step);
      for (i64 s = 0; s < steps; ++s) losses.push_back((use_jit ? jit(x, y) : step(x, y)).item<float>());
      if (use_jit) {
        const CapturedStep& c = *jit.captured();
        std::size_t in_place = 0;  // each parameter, m and v: read and written at the same elements
        for (const auto& u : c.state) in_place += u.in_place;
        REQUIRE(in_place >= 12);
      }
      std::vector<std::vector<float>> out;
      for (const Tensor& p : model.params()) out.push_back(p.to_vector<float>());
      for (const Tensor& m : opt.m) out.push_back(m.to_vector<float>());
      return out;
    };
    std::vector<float> plain_losses, jit_losses;
    auto plain = train(false, plain_losses);
    auto jitted = train(true, jit_losses);
    for (std::size_t s = 0; s < plain_losses.size(); ++s)
      REQUIRE(jit_losses[s] == Approx(plain_losses[s]).epsilon(1e-5));
    REQUIRE(plain_losses.back() < plain_losses.front());
    for (std::size_t p = 0; p < plain.size(); ++p)
      for (std::size_t i = 0; i < plain[p].size(); ++i)
        REQUIRE(jitted[p][i] == Approx(plain[p][i]).margin(1e-5));
  }
}
