// The scheduler's fusion, counted: how many kernels typical graphs become on a compiled device
// (CLANG), each result checked against the same formula computed here in double. (GRAPH=1's
// picture of them: test_graph.cpp.)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"
#include "stderr_capture.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

// Kernels launched while realizing t (its inputs realized beforehand).
i64 kernels_for(Tensor t) {
  i64 before = GlobalCounters::kernel_count;
  t.realize();
  return GlobalCounters::kernel_count - before;
}

Tensor on_device(const std::vector<double>& v, const Dims& shape) {
  return Tensor(v, shape, {.dtype = dtypes::float32}).realize();
}

void require_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - want[i]) <= 1e-4 * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("(a*b+c).relu() is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (unsigned seed = 0; seed < 4; ++seed) {
    const i64 n = 7 + 61 * seed;
    auto va = test::random_floats(n, seed), vb = test::random_floats(n, seed + 10),
         vc = test::random_floats(n, seed + 20);
    Tensor a = on_device(va, {n}), b = on_device(vb, {n}), c = on_device(vc, {n});
    Tensor out = (a * b + c).relu();
    REQUIRE(kernels_for(out) == 1);
    std::vector<double> want(va.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::max(0.0, va[i] * vb[i] + vc[i]);
    require_close(out.to_vector<float>(), want);
  }
}

TEST_CASE("(a*b).sum(1) is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (i64 rows : {1, 5, 33})
    for (i64 cols : {1, 16, 45}) {
      auto va = test::random_floats(rows * cols, 1), vb = test::random_floats(rows * cols, 2);
      Tensor out = (on_device(va, {rows, cols}) * on_device(vb, {rows, cols})).sum(1);
      REQUIRE(kernels_for(out) == 1);
      std::vector<double> want(static_cast<std::size_t>(rows), 0.0);
      for (i64 r = 0; r < rows; ++r)
        for (i64 k = 0; k < cols; ++k) want[r] += va[r * cols + k] * vb[r * cols + k];
      require_close(out.to_vector<float>(), want);
    }
}

TEST_CASE("softmax over the last axis is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (i64 rows : {1, 4, 17})
    for (i64 cols : {2, 10, 100}) {
      auto v = test::random_floats(rows * cols, static_cast<unsigned>(rows * cols));
      Tensor out = on_device(v, {rows, cols}).softmax(-1);
      i64 k = kernels_for(out);
      INFO(rows << "x" << cols << ": " << k << " kernels");
      REQUIRE(k == 1);  // a row kernel: the max, the sum and the quotient per row
      std::vector<double> want(v.size());
      for (i64 r = 0; r < rows; ++r) {
        double m = -INFINITY, s = 0;
        for (i64 j = 0; j < cols; ++j) m = std::max(m, v[r * cols + j]);
        for (i64 j = 0; j < cols; ++j) s += std::exp(v[r * cols + j] - m);
        for (i64 j = 0; j < cols; ++j) want[r * cols + j] = std::exp(v[r * cols + j] - m) / s;
      }
      require_close(out.to_vector<float>(), want);
    }
}

TEST_CASE("matmul is one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  for (auto [m, k, n] : std::vector<std::array<i64, 3>>{{1, 1, 1}, {16, 32, 8}, {9, 70, 13}}) {
    auto va = test::random_floats(m * k, 3), vb = test::random_floats(k * n, 4);
    Tensor out = on_device(va, {m, k}).matmul(on_device(vb, {k, n}));
    REQUIRE(kernels_for(out) == 1);
    std::vector<double> want(static_cast<std::size_t>(m * n), 0.0);
    for (i64 i = 0; i < m; ++i)
      for (i64 j = 0; j < n; ++j)
        for (i64 x = 0; x < k; ++x) want[i * n + j] += va[i * k + x] * vb[x * n + j];
    require_close(out.to_vector<float>(), want);
  }
}

// An MLP training step (784-128-10, batch 16: forward, sparse cross-entropy, backward, SGD with
// momentum) launched 33 kernels when this test was written (29 without momentum). Fusion work may
// lower this bound; nothing may raise it.
constexpr i64 kMlpStepKernels = 33;

TEST_CASE("an MLP training step launches at most the documented number of kernels", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  Tensor::manual_seed(3);
  nn::Linear l1(784, 128), l2(128, 10);
  nn::optim::SGD opt({l1.weight, *l1.bias, l2.weight, *l2.bias}, 0.01, 0.9);
  Tensor x = Tensor::randn({16, 784}).realize();
  Tensor y =
      Tensor(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}, {16}).realize();
  Tensor::TrainingGuard training;
  auto step = [&] {
    Tensor loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.realize();
  };
  step();  // the first step differs (momentum buffers start at zero)
  i64 before = GlobalCounters::kernel_count;
  step();
  i64 k = GlobalCounters::kernel_count - before;
  INFO("MLP step: " << k << " kernels");
  REQUIRE(k <= kMlpStepKernels);
  REQUIRE(k >= 8);  // forward 2 matmuls, backward 3, 4 parameter updates: fewer means work went missing
}

TEST_CASE("a scalar cast and broadcast is inlined; AdamW updates a parameter in one kernel", "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  // An optimizer's float64 scalar (a learning rate, a bias correction) cast to float32 and broadcast
  // over a parameter: read inside the parameter's kernel, not a kernel of its own.
  auto va = test::random_floats(100, 7);
  Tensor a = on_device(va, {100});
  Tensor s = Tensor(std::vector<double>{0.25}, {}, {.dtype = dtypes::float64}).realize();
  Tensor out = a * s.cast(dtypes::float32);
  REQUIRE(kernels_for(out) == 1);
  std::vector<double> want(va.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = va[i] * 0.25;
  require_close(out.to_vector<float>(), want);
  // AdamW: the step count and its two bias corrections once a step (one kernel), then m, v and the
  // parameter (another); the same steps on CPU (a kernel per buffer) agree.
  auto run = [](const std::string& device, std::vector<i64>& kernels) {
    Tensor w = Tensor(test::random_floats(64, 8), {64},
                      {.device = device, .dtype = dtypes::float32, .requires_grad = true});
    w.realize();
    nn::optim::AdamW opt({w}, 1e-2);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      (w * w).sum().backward();
      w.grad->realize();
      i64 before = GlobalCounters::kernel_count;
      opt.step();
      kernels.push_back(GlobalCounters::kernel_count - before);
    }
    return std::vector<std::vector<float>>{w.to_vector<float>(), opt.m[0].to_vector<float>(),
                                           opt.v[0].to_vector<float>()};
  };
  std::vector<i64> k, k_cpu;
  auto got = run("CLANG", k), ref = run("CPU", k_cpu);
  for (std::size_t step = 0; step < k.size(); ++step) {
    INFO("AdamW step " << step << ": " << k[step] << " kernels");
    REQUIRE(k[step] == 2);
  }
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t i = 0; i < got[t].size(); ++i) REQUIRE(got[t][i] == Approx(ref[t][i]).epsilon(1e-6));
}

TEST_CASE("schedule: realize_all computes several buffers in one schedule, what they share once",
          "[schedule]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  std::vector<double> v = test::random_floats(64 * 32, 5);
  Tensor x = on_device(v, {64, 32});
  Tensor shared = (x * 0.5).exp().sum(1, true);  // a row sum both results read: computed once
  Tensor s = (x - shared).square().sum(1), m = (x * shared).max(0), done = (x + 1).realize();
  i64 before = GlobalCounters::kernel_count;
  LazyBuffer::realize_all({s.lazydata, m.lazydata, done.lazydata});  // `done` is realized already
  REQUIRE(GlobalCounters::kernel_count - before == 3);
  std::vector<float> gs = s.to_vector<float>(), gm = m.to_vector<float>();
  std::vector<double> row(64, 0.0);
  for (i64 r = 0; r < 64; ++r)
    for (i64 c = 0; c < 32; ++c) row[r] += std::exp(0.5 * v[r * 32 + c]);
  for (i64 r = 0; r < 64; ++r) {
    double sum = 0;
    for (i64 c = 0; c < 32; ++c) sum += (v[r * 32 + c] - row[r]) * (v[r * 32 + c] - row[r]);
    REQUIRE(gs[r] == Approx(sum).epsilon(1e-5));
  }
  for (i64 c = 0; c < 32; ++c) {
    double mx = -INFINITY;
    for (i64 r = 0; r < 64; ++r) mx = std::max(mx, v[r * 32 + c] * row[r]);
    REQUIRE(gm[c] == Approx(mx).epsilon(1e-5));
  }
  REQUIRE(GlobalCounters::kernel_count - before == 3);  // reading them back ran nothing more
}

// ---- multi-output kernels (schedule.cpp, merge_stores) ----

namespace {

// Kernels launched while realizing these tensors together, in one schedule.
i64 kernels_for_all(const std::vector<Tensor>& ts) {
  std::vector<LazyBufferPtr> bufs;
  for (const Tensor& t : ts) bufs.push_back(t.lazydata);
  i64 before = GlobalCounters::kernel_count;
  LazyBuffer::realize_all(bufs);
  return GlobalCounters::kernel_count - before;
}

// A random elementwise graph over `in`: each node one of a few ops on two earlier nodes, so nodes
// are read by several others, by none, or by one.
std::vector<Tensor> random_graph(const std::vector<Tensor>& in, unsigned seed, int nodes) {
  std::mt19937 g(seed);
  std::vector<Tensor> v = in;
  for (int k = 0; k < nodes; ++k) {
    auto pick = [&] { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(g)]; };
    Tensor a = pick(), b = pick();
    switch (g() % 6) {
      case 0:
        v.push_back(a + b);
        break;
      case 1:
        v.push_back(a * b * 0.5);
        break;
      case 2:
        v.push_back((a - b).relu());
        break;
      case 3:
        v.push_back(a.sigmoid() + b);
        break;
      case 4:
        v.push_back(a.maximum(b) * 0.75 - 0.25);
        break;
      default:  // a read through a view
        v.push_back(a.flip({0}) * 0.5 + b);
        break;
    }
  }
  return {v.begin() + static_cast<std::ptrdiff_t>(in.size()), v.end()};
}

// Beyond cheap_to_recompute's budget: a buffer several kernels read is computed once.
Tensor costly(const Tensor& x) { return ((x * 2 + 1).sigmoid() * x - x * 0.5 + 1).relu().sqrt() * x; }

}  // namespace

TEST_CASE("multi-output kernels: random elementwise graphs realized together agree with CPU",
          "[schedule][multi_output]") {
  for (const char* d : {"CLANG", "LLVM", "OPENCL", "CUDA"}) {
    if (!test::available(d)) continue;
    i64 merged = 0, single = 0;
    for (unsigned seed = 0; seed < 24; ++seed) {
      INFO(d << ", seed " << seed);
      const Dims shape = seed % 3 == 0 ? Dims{37} : Dims{5, 19};
      std::vector<Tensor> dev_in, cpu_in;
      for (unsigned i = 0; i < 3; ++i) {
        auto v = test::random_floats(static_cast<std::size_t>(prod(shape)), seed * 7 + i);
        dev_in.push_back(Tensor(v, shape, {.device = d, .dtype = dtypes::float32}).realize());
        cpu_in.push_back(Tensor(v, shape, {.device = "CPU", .dtype = dtypes::float32}).realize());
      }
      std::vector<Tensor> on_dev = random_graph(dev_in, seed, 10), on_cpu = random_graph(cpu_in, seed, 10);
      std::mt19937 g(seed + 100);
      std::vector<std::size_t> picked;
      for (std::size_t k = 0; k < on_dev.size(); ++k)
        if (k + 1 == on_dev.size() || g() % 2) picked.push_back(k);
      std::vector<Tensor> targets;
      for (std::size_t k : picked) targets.push_back(on_dev[k]);
      i64 k = kernels_for_all(targets);
      // The same graph with a kernel per buffer: never fewer kernels.
      std::vector<Tensor> again = random_graph(dev_in, seed, 10), same;
      for (std::size_t j : picked) same.push_back(again[j]);
      setenv("METAGRAD_MULTI_OUTPUT", "0", 1);
      i64 k1 = kernels_for_all(same);
      unsetenv("METAGRAD_MULTI_OUTPUT");
      merged += k, single += k1;
      REQUIRE(k >= 1);
      REQUIRE(k <= k1);
      for (std::size_t t = 0; t < picked.size(); ++t) {
        auto got = targets[t].to_vector<float>(), want = on_cpu[picked[t]].to_vector<float>();
        for (std::size_t i = 0; i < got.size(); ++i)
          REQUIRE(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
      }
    }
    INFO(d << ": " << merged << " kernels with multi-output kernels, " << single << " without");
    REQUIRE(merged < single);
  }
}

TEST_CASE("multi-output kernels: what one kernel stores, counted", "[schedule][multi_output]") {
  for (const char* d : {"CLANG", "LLVM", "OPENCL"}) {
    if (!test::available(d)) continue;
    test::DeviceScope dev(d);
    INFO(d);
    auto vx = test::random_floats(48, 1), vw = test::random_floats(48, 2);
    Tensor x = on_device(vx, {6, 8}), w = on_device(vw, {6, 8});
    auto at = [&](const Tensor& t, std::size_t i) { return static_cast<double>(t.to_vector<float>()[i]); };
    {  // a chain, each link a target: one kernel stores all three
      Tensor a = x * 2 + 1, b = a * a * w, c = b - a;
      REQUIRE(kernels_for_all({a, b, c}) == 1);
      for (std::size_t i = 0; i < 48; ++i) {
        double wa = vx[i] * 2 + 1, wb = wa * wa * vw[i];
        REQUIRE(at(a, i) == Approx(wa).epsilon(1e-6));
        REQUIRE(at(b, i) == Approx(wb).epsilon(1e-6));
        REQUIRE(at(c, i) == Approx(wb - wa).epsilon(1e-6).margin(1e-6));
      }
    }
    {  // the state of an update and the update: m read by p (an optimizer's shape)
      Tensor m = x * 0.9 + w * 0.1, p = w - m.sqrt().relu() * 0.01;
      REQUIRE(kernels_for_all({m, p}) == 1);
    }
    {  // a buffer two kernels read (not a target) is stored by the first elementwise one
      Tensor y = costly(x), z1 = y + w, z2 = y.sum(1);
      REQUIRE(kernels_for_all({z1, z2}) == 2);
      REQUIRE(at(z1, 5) == Approx(at(costly(x).realize(), 5) + vw[5]).epsilon(1e-6));
    }
    {  // steps that each read the last twice: a merge copies q's tree per read, so merges without a
       // bound doubled the tree at each merge (10^4 steps took minutes to schedule). Kernels may
       // recompute a cheap step for each read, so the ops counted exceed the chain's 2 a step and
       // element, but by a bounded factor (about 60x here; 700x with unbounded merges).
      Tensor y = x * 1;
      for (int k = 0; k < 600; ++k) y = (y + y) * 0.5;
      GlobalCounters::global_ops = 0;
      y.realize();
      REQUIRE(GlobalCounters::global_ops < 100 * 2 * 600 * 48);
      for (std::size_t i = 0; i < 48; i += 7) REQUIRE(at(y, i) == Approx(vx[i]).epsilon(1e-6));
    }
    // Not merged: another shape (a reduce), a view, a reader in between.
    {
      Tensor y = x * 2, r = y.sum(1);
      REQUIRE(kernels_for_all({y, r}) == 2);
    }
    {
      Tensor y = x * 3 + 1, z = y.reshape({8, 6}).transpose() + w.reshape({8, 6}).transpose();
      REQUIRE(kernels_for_all({y, z}) == 2);
    }
    {  // a product r reads y between y's kernel and z's: y stays a kernel of its own
      Tensor w8 = on_device(test::random_floats(64, 3), {8, 8});
      Tensor y = costly(x), r = y.matmul(w8), z = y + r, z2 = r * 2;
      REQUIRE(kernels_for_all({y, z, z2}) == 3);  // y, r, and z with z2 (siblings: both read r)
      std::vector<float> yv = y.to_vector<float>(), rv = r.to_vector<float>();
      REQUIRE(at(z, 3) == Approx(yv[3] + rv[3]).epsilon(1e-5));
    }
  }
}

TEST_CASE("weight gradients run as the backward reaches them", "[schedule][memory]") {
  // Every gradient of a six-layer stack realized in one schedule, the first layer's first: the
  // walk from it reaches the other layers' weight gradients only after the whole backward, and run
  // there each would hold its layer's activation and output gradient to the end (the GPT step's
  // weight gradients held 6 MiB that way). They run as soon as their output gradient exists: the
  // last layer's first, in the backward's order.
  constexpr i64 n = 512, w = 16, layers = 6;
  for (const char* d : {"CLANG", "LLVM"}) {
    if (!test::available(d)) continue;
    test::DeviceScope dev(d);
    INFO(d);
    Tensor x = on_device(test::random_floats(n * w, 5), {n, w});
    std::vector<Tensor> ws;
    for (int l = 0; l < layers; ++l) {
      ws.push_back(on_device(test::random_floats(w * w, 10 + l), {w, w}));
      ws.back().requires_grad_(true);
    }
    Tensor h = x;
    for (const Tensor& wl : ws) h = h.matmul(wl).tanh();
    h.square().sum().backward();
    std::vector<LazyBufferPtr> grads;
    for (const Tensor& wl : ws) grads.push_back(wl.grad->lazydata);
    GlobalCounters::cache.emplace();
    LazyBuffer::realize_all(grads);
    std::vector<std::size_t> at(layers, 0);  // the launch that wrote each weight's gradient
    for (std::size_t k = 0; k < GlobalCounters::cache->size(); ++k)
      for (int l = 0; l < layers; ++l)
        if ((*GlobalCounters::cache)[k].bufs.at(0).get() == ws[l].grad->lazydata->base()->realized.get())
          at[l] = k;
    GlobalCounters::cache.reset();
    for (int l = 1; l < layers; ++l) {
      INFO("layers " << l - 1 << " and " << l);
      REQUIRE(at[l] < at[l - 1]);
    }
    // and the gradients are those of the same stack on CPU (float32 sums of 512 rows in another
    // order: an element that cancels to 0.13 differs by 0.002)
    Tensor h2 = x.to("CPU");
    std::vector<Tensor> ws2;
    for (const Tensor& wl : ws)
      ws2.push_back(Tensor(wl.to_vector<float>(), {w, w}, {.device = "CPU", .requires_grad = true}));
    for (const Tensor& wl : ws2) h2 = h2.matmul(wl).tanh();
    h2.square().sum().backward();
    for (int l = 0; l < layers; ++l) {
      INFO("layer " << l);
      auto got = ws[l].grad->to_vector<float>(), want = ws2[l].grad->to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i)
        REQUIRE(got[i] == Approx(want[i]).epsilon(1e-3).margin(1e-2));
    }
  }
}

// ---- row kernels (codegen/kernel.hpp: reduces read back over the axes they reduced) ----

namespace {

// The values of t and of the same expression on CPU agree within float rounding.
void require_same(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  auto g = got.to_vector<float>(), w = want.to_vector<float>();
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(w[i])) {
      REQUIRE(std::isnan(g[i]));
      continue;
    }
    REQUIRE(g[i] == Approx(w[i]).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("row kernels: softmax and LayerNorm are one kernel, forward and backward", "[schedule][rows]") {
  for (const char* d : {"CLANG", "LLVM", "OPENCL"}) {
    if (!test::available(d)) continue;
    INFO(d);
    for (auto [rows, cols] : std::vector<std::array<i64, 2>>{{1, 2}, {4, 64}, {17, 100}, {3, 4096}}) {
      INFO(rows << "x" << cols);
      auto v = test::random_floats(static_cast<std::size_t>(rows * cols), static_cast<unsigned>(rows + cols));
      Tensor x = Tensor(v, {rows, cols}, {.device = d, .dtype = dtypes::float32}).realize();
      Tensor xc = Tensor(v, {rows, cols}, {.device = "CPU", .dtype = dtypes::float32});
      Tensor y = x.softmax(-1);
      REQUIRE(kernels_for(y) == 1);
      require_same(y, xc.softmax(-1));
      Tensor n = x.layernorm(-1);
      REQUIRE(kernels_for(n) == 1);
      require_same(n, xc.layernorm(-1), 1e-4);
    }
    {  // a middle axis, and a row past 4096 elements (not one kernel, still right)
      auto v = test::random_floats(4 * 7 * 5, 9);
      Tensor x = Tensor(v, {4, 7, 5}, {.device = d, .dtype = dtypes::float32}).realize();
      Tensor xc = Tensor(v, {4, 7, 5}, {.device = "CPU", .dtype = dtypes::float32});
      Tensor y = x.softmax(1);
      REQUIRE(kernels_for(y) == 1);
      require_same(y, xc.softmax(1));
      auto w = test::random_floats(5000, 10);
      Tensor big = Tensor(w, {1, 5000}, {.device = d, .dtype = dtypes::float32}).softmax(-1);
      REQUIRE(kernels_for(big) > 1);
      require_same(big, Tensor(w, {1, 5000}, {.device = "CPU", .dtype = dtypes::float32}).softmax(-1));
    }
    // Attention's masked, scaled softmax, and its gradient: one kernel each.
    const i64 t = 16;
    auto vs = test::random_floats(2 * t * t, 11), vw = test::random_floats(2 * t * t, 12);
    auto run = [&](const std::string& dev, i64* forward, i64* backward) {
      Tensor s = Tensor(vs, {2, t, t}, {.device = dev, .dtype = dtypes::float32, .requires_grad = true});
      Tensor w = Tensor(vw, {2, t, t}, {.device = dev, .dtype = dtypes::float32});
      s.realize(), w.realize();
      Tensor mask = Tensor::ones({t, t}, {.device = dev, .dtype = dtypes::bool_}).tril().realize();
      Tensor y = mask.where(s * 0.25, -INFINITY).softmax(-1);
      if (forward) *forward = kernels_for(y);
      (y * w).sum().backward();
      if (backward) *backward = kernels_for(*s.grad);
      return std::pair{y, *s.grad};
    };
    i64 fk = 0, bk = 0;
    auto [y, g] = run(d, &fk, &bk);
    auto [yc, gc] = run("CPU", nullptr, nullptr);
    REQUIRE(fk == 1);
    REQUIRE(bk == 1);
    require_same(y, yc);
    require_same(g, gc);
  }
}

TEST_CASE("row kernels: a softmax read by a product and by its backward is computed once",
          "[schedule][rows]") {
  // Attention's y = softmax(masked scores) is read by y @ v and by the softmax's backward: the
  // backward reads y's buffer; recomputing y there would take its exp a second time. CLANG's
  // source names the exp (mg_exp2f), so the kernels that take it are counted.
  if (!test::available("CLANG")) return;
  const i64 t = 16;
  auto vs = test::random_floats(2 * t * t, 21), vv = test::random_floats(2 * t * 8, 22),
       vw = test::random_floats(2 * t * 8, 23);
  auto run = [&](const std::string& dev, i64* exps) {
    Tensor s = Tensor(vs, {2, t, t}, {.device = dev, .dtype = dtypes::float32, .requires_grad = true});
    Tensor v = Tensor(vv, {2, t, 8}, {.device = dev, .dtype = dtypes::float32});
    Tensor w = Tensor(vw, {2, t, 8}, {.device = dev, .dtype = dtypes::float32});
    s.realize(), v.realize(), w.realize();
    Tensor mask = Tensor::ones({t, t}, {.device = dev, .dtype = dtypes::bool_}).tril().realize();
    Tensor o = mask.where(s * 0.25, -INFINITY).softmax(-1).matmul(v);
    (o * w).sum().backward();
    Tensor both = o.sum() + s.grad->sum();  // one schedule: the forward and the backward together
    if (exps) GlobalCounters::cache.emplace();
    both.realize();
    if (exps) {
      *exps = 0;
      for (const CacheEntry& e : *GlobalCounters::cache)
        *exps += e.prg.prg.find("= mg_exp2f(") != std::string::npos;
      GlobalCounters::cache.reset();
    }
    return std::pair{o, *s.grad};
  };
  i64 exps = 0;
  auto [o, g] = run("CLANG", &exps);
  auto [oc, gc] = run("CPU", nullptr);
  REQUIRE(exps == 1);
  require_same(o, oc, 1e-5);
  require_same(g, gc, 1e-5);
}

TEST_CASE("row kernels: softmax takes its exp once, its sum's loop keeping it in the output",
          "[schedule][rows]") {
  // The sum's loop stores exp(x - max) where the output goes; the output's loop reads it back and
  // divides. CLANG's source names each exp it takes (mg_exp2f); the results stay the CPU device's
  // (and LLVM's, which keeps it the same way).
  if (!test::available("CLANG")) return;
  for (auto [rows, cols] : std::vector<std::array<i64, 2>>{{1, 2}, {4, 64}, {17, 100}, {3, 4096}}) {
    INFO(rows << "x" << cols);
    auto v =
        test::random_floats(static_cast<std::size_t>(rows * cols), static_cast<unsigned>(7 * rows + cols));
    auto make = [&](const std::string& dev, bool masked) {
      Tensor x = Tensor(v, {rows, cols}, {.device = dev, .dtype = dtypes::float32}).realize();
      if (!masked) return x.softmax(-1);
      Tensor mask = Tensor::ones({rows, cols}, {.device = dev, .dtype = dtypes::bool_}).tril().realize();
      return mask.where(x * 0.25, -INFINITY).softmax(-1);
    };
    for (bool masked : {false, true}) {
      INFO("masked " << masked);
      Tensor y = make("CLANG", masked);
      GlobalCounters::cache.emplace();
      REQUIRE(kernels_for(y) == 1);
      std::size_t exps = 0;
      for (const CacheEntry& e : *GlobalCounters::cache)
        for (std::size_t at = e.prg.prg.find("= mg_exp2f("); at != std::string::npos;
             at = e.prg.prg.find("= mg_exp2f(", at + 1))
          ++exps;
      GlobalCounters::cache.reset();
      REQUIRE(exps == 1);
      require_same(y, make("CPU", masked));
      if (test::available("LLVM")) require_same(make("LLVM", masked), make("CPU", masked));
    }
  }
}

TEST_CASE("row kernels: random row-wise expressions agree with CPU", "[schedule][rows]") {
  for (const char* d : {"CLANG", "LLVM"}) {
    if (!test::available(d)) continue;
    for (unsigned seed = 0; seed < 20; ++seed) {
      INFO(d << ", seed " << seed);
      std::mt19937 g(seed);
      i64 rows = 1 + g() % 9, cols = 2 + g() % 70;
      auto v = test::random_floats(static_cast<std::size_t>(rows * cols), seed + 50);
      auto make = [&](const std::string& dev) {
        Tensor x = Tensor(v, {rows, cols}, {.device = dev, .dtype = dtypes::float32}).realize();
        std::mt19937 h(seed);
        h(), h();
        switch (h() % 5) {
          case 0:
            return (x - x.mean(-1, true)) * 3 + x.max(-1, true);
          case 1:
            return x.log_softmax(-1);
          case 2:
            return x / (x.abs().max(-1, true) + 1);
          case 3:
            return x.layernorm(-1) * x.softmax(-1);
          default:
            return (x.exp() / x.exp().sum(-1, true)).sum(-1, true) + x;
        }
      };
      Tensor got = make(d);
      i64 k = kernels_for(got);
      REQUIRE(k >= 1);
      REQUIRE(k <= 2);
      require_same(got, make("CPU"), 1e-4);
    }
  }
}

// ---- the schedule cache (schedule_cache.cpp) ----

namespace {

// Whether a realize in these DEBUG=2 lines took its schedule from the cache.
bool from_cache(const std::vector<std::string>& lines) {
  return std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("(schedule from cache)") != std::string::npos;
  });
}

struct TinyNet {
  nn::Linear fc1{6, 12}, fc2{12, 3};
  nn::LayerNorm ln{12};
  Tensor operator()(const Tensor& x) const { return fc2(ln(fc1(x)).gelu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"fc1", fc1}, {"fc2", fc2}, {"ln", ln}}); }
};

// Parameters after `steps` AdamW steps on fresh batches, and whether each step after the first took
// its schedule from the cache.
std::pair<std::vector<std::vector<float>>, std::vector<bool>> train_tiny(int steps) {
  Tensor::manual_seed(11);
  TinyNet net;
  std::vector<Tensor> ps = nn::get_parameters(net);
  nn::optim::AdamW opt(ps, 1e-2);
  std::vector<bool> cached;
  for (int s = 0; s < steps; ++s) {
    Tensor x = Tensor(test::random_floats(8 * 6, 50u + static_cast<unsigned>(s)), {8, 6}).realize();
    Tensor y = Tensor(std::vector<double>{0, 1, 2, 0, 1, 2, 2, 1}, {8}, {.dtype = dtypes::int64}).realize();
    test::StderrCapture capture("2");
    {
      Tensor::TrainingGuard training;
      opt.zero_grad();
      net(x).sparse_categorical_crossentropy(y).backward();
      opt.step();
    }
    cached.push_back(from_cache(capture.lines()));
  }
  std::vector<std::vector<float>> out;
  for (const Tensor& p : ps) out.push_back(p.to_vector<float>());
  return {out, cached};
}

}  // namespace

TEST_CASE("schedule cache: a training loop's later steps reuse its schedule and train as without it",
          "[schedule][schedule_cache]") {
  for (const char* d : {"CLANG", "LLVM"}) {
    test::DeviceScope dev(d);
    if (!dev.ok) continue;
    INFO(d);
    // The first step's graph differs (the optimizer's states are new); the next is kept when seen
    // again, the third step, and found from the fourth on.
    auto [with, hits] = train_tiny(6);
    REQUIRE(!hits[0]);
    for (std::size_t s = 3; s < hits.size(); ++s) {
      INFO("step " << s + 1);
      REQUIRE(hits[s]);
    }
    setenv("METAGRAD_SCHEDULE_CACHE", "0", 1);
    auto [without, none] = train_tiny(6);
    unsetenv("METAGRAD_SCHEDULE_CACHE");
    REQUIRE(std::none_of(none.begin(), none.end(), [](bool b) { return b; }));
    REQUIRE(with == without);  // the same kernels on the same values: bitwise
  }
}

TEST_CASE("schedule cache: graphs equal but for their inputs reuse a schedule, any other difference does not",
          "[schedule][schedule_cache]") {
  test::DeviceScope dev("CLANG");
  if (!dev.ok) return;
  auto inputs = [](unsigned seed, const Dims& shape) {
    std::vector<Tensor> dev_in, cpu_in;
    for (unsigned i = 0; i < 3; ++i) {
      auto v = test::random_floats(static_cast<std::size_t>(prod(shape)), seed * 13 + i);
      dev_in.push_back(Tensor(v, shape, {.dtype = dtypes::float32}).realize());
      cpu_in.push_back(Tensor(v, shape, {.device = "CPU", .dtype = dtypes::float32}).realize());
    }
    return std::pair{dev_in, cpu_in};
  };
  auto check = [](const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
    for (std::size_t t = 0; t < got.size(); ++t) {
      auto g = got[t].to_vector<float>(), w = want[t].to_vector<float>();
      REQUIRE(g.size() == w.size());
      for (std::size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(w[i]).epsilon(1e-5).margin(1e-6));
    }
  };
  // Realizes the last node of random_graph(seed) and a sum over it, in one schedule; whether the
  // schedule came from the cache. `extra` holds a node of the graph besides (another consumer).
  auto run = [&](unsigned graph_seed, unsigned data_seed, const Dims& shape, double scale, bool extra) {
    auto [dev_in, cpu_in] = inputs(data_seed, shape);
    std::vector<Tensor> on_dev = random_graph(dev_in, graph_seed, 12),
                        on_cpu = random_graph(cpu_in, graph_seed, 12);
    std::vector<Tensor> held;
    if (extra) held.push_back(on_dev[2] * 3);
    std::vector<Tensor> got = {on_dev.back() * scale, (on_dev.back() + on_dev[2]).sum()},
                        want = {on_cpu.back() * scale, (on_cpu.back() + on_cpu[2]).sum()};
    test::StderrCapture capture("2");
    kernels_for_all(got);
    bool cached = from_cache(capture.lines());
    check(got, want);
    return cached;
  };
  for (unsigned seed = 0; seed < 16; ++seed) {
    INFO("seed " << seed);
    const Dims shape = seed % 2 ? Dims{7, 9} : Dims{5, 11};
    REQUIRE(!run(seed, seed, shape, 1.5, false));
    REQUIRE(!run(seed, seed + 50, shape, 1.5, false));                      // seen twice: kept
    REQUIRE(run(seed, seed + 100, shape, 1.5, false));                      // other values: reused
    REQUIRE(!run(seed, seed + 200, shape, 2.5, false));                     // another constant
    REQUIRE(!run(seed, seed + 300, shape, 1.5, true));                      // a node with another consumer
    REQUIRE(!run(seed, seed + 400, Dims{shape[1], shape[0]}, 1.5, false));  // other shapes
    REQUIRE(!run(seed + 1000, seed, shape, 1.5, false));                    // another graph
  }
  // A one-element host tensor copied over is folded into the kernel as its value: a new value is a
  // new schedule, never the old constant.
  Tensor x = on_device(test::random_floats(12, 3), {3, 4});
  for (double s : {2.0, 3.0, 3.0}) {
    Tensor k = Tensor(std::vector<double>{s}, {1}, {.device = "CPU", .dtype = dtypes::float32}).to("CLANG");
    Tensor y = (x * k.reshape({1, 1}) + 1).sum(1) * (x.exp() * 2).sum();
    kernels_for_all({y});
    auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
    double e = 0;
    for (float v : xv) e += 2 * std::exp(static_cast<double>(v));
    for (int r = 0; r < 3; ++r) {
      double row = 0;
      for (int c = 0; c < 4; ++c) row += xv[static_cast<std::size_t>(r * 4 + c)] * s + 1;
      REQUIRE(yv[static_cast<std::size_t>(r)] == Approx(row * e).epsilon(1e-5));
    }
  }
}
