// Nothing leaks: across many training steps the number of live LazyBuffers and RawBuffers stays
// flat (graphs are freed after backward and realize, optimizer state is replaced, not chained), and
// a compiled device's buffer pool serves repeated work from freed memory within its bounds.
#include <metagrad/jit.hpp>
#include <metagrad/metagrad.hpp>
#include <metagrad/device/buffer_pool.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "device_scope.hpp"
#include "gradcheck.hpp"

using namespace metagrad;

namespace {
struct Mlp {
  nn::Linear l1{8, 16}, l2{16, 3};
  Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};
}  // namespace

TEST_CASE("10,000 training steps keep the live buffer counts flat", "[memory]") {
  // On CLANG: its per-step cost is scheduling, not interpreting (5 s, not 75 s, for the same check).
  test::DeviceScope on_clang("CLANG");
  if (!on_clang.ok) return;
  Tensor::manual_seed(7);
  Mlp model;
  nn::optim::SGD opt(nn::get_parameters(model), 0.05, 0.9);
  Tensor x = Tensor::randn({4, 8});
  Tensor y = Tensor(std::vector<std::int32_t>{0, 1, 2, 1}, {4});
  x.realize(), y.realize();
  Tensor::TrainingGuard training;
  auto step = [&] {
    Tensor loss = model(x).sparse_categorical_crossentropy(y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  float first = 0;
  for (int i = 0; i < 10; ++i) first = step();
  std::int64_t lazy = LazyBuffer::live_count, raw = RawBuffer::live_count;
  BufferPool& pool = dynamic_cast<Compiled&>(Device::get("CLANG")).pool();
  std::int64_t fresh = pool.stats().fresh;
  std::size_t pooled = pool.stats().pooled_bytes;
  float last = first;
  // (under the sanitizers 1,000: ten times slower a step, and ASan checks leaks itself)
  const int steps = test::sanitized() ? 1000 : 10000;
  for (int i = 10; i < steps; ++i) last = step();
  INFO("LazyBuffers " << lazy << " -> " << LazyBuffer::live_count << ", RawBuffers " << raw << " -> "
                      << RawBuffer::live_count);
  REQUIRE(LazyBuffer::live_count == lazy);
  REQUIRE(RawBuffer::live_count == raw);
  REQUIRE(pool.stats().fresh == fresh);  // every step after the first ones ran on reused memory
  REQUIRE(pool.stats().pooled_bytes == pooled);
  REQUIRE(last < first * 0.1f);  // it did train
}

TEST_CASE("a compiled device reuses the memory of freed buffers", "[memory]") {
  test::DeviceScope on_clang("CLANG");
  if (!on_clang.ok) return;
  auto& dev = dynamic_cast<Compiled&>(Device::get("CLANG"));
  std::vector<float> va(1000), vb(1000), vc(1000);
  for (std::size_t i = 0; i < va.size(); ++i)
    va[i] = 0.5f * static_cast<float>(i % 17), vb[i] = 3.0f - static_cast<float>(i % 5),
    vc[i] = static_cast<float>(i);
  Tensor a(va, {1000}), b(vb, {1000}), c(vc, {1000});
  a.realize(), b.realize(), c.realize();
  const void* first = nullptr;
  std::int64_t fresh = 0;
  for (int it = 0; it < 50; ++it) {
    Tensor out = (a * b + c).realize();
    auto& raw = dynamic_cast<RawMallocBuffer&>(*out.lazydata.get()->realized);
    if (it == 1) first = raw.data(), fresh = dev.pool().stats().fresh;
    if (it > 1) {
      REQUIRE(raw.data() == first);                // the last iteration's output, reused
      REQUIRE(dev.pool().stats().fresh == fresh);  // and nothing newly allocated
    }
    std::vector<float> got = out.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == va[i] * vb[i] + vc[i]);
  }
}

TEST_CASE(
    "a buffer pool keeps what is in use and kept within its peak in use and its slack, and empties "
    "itself when allocation fails",
    "[memory]") {
  int fail_next = 0;
  auto pool = std::make_shared<BufferPool>(
      [&](std::size_t n, DType dt) -> std::shared_ptr<RawBuffer> {
        if (fail_next > 0 && fail_next-- == 1) throw std::bad_alloc();
        return std::make_shared<RawMallocBuffer>(n, dt);
      },
      1000);
  {
    std::vector<std::shared_ptr<RawBuffer>> held;
    for (int i = 0; i < 10; ++i) held.push_back(pool->alloc(100, dtypes::float32));  // 400 bytes each
  }
  // All 4000 bytes kept: with nothing in use they are within the 4000 that were in use at once.
  REQUIRE(pool->stats().pooled == 10);
  REQUIRE(pool->stats().in_use_bytes == 0);
  REQUIRE(pool->stats().peak_bytes == 4000);
  {
    std::vector<std::shared_ptr<RawBuffer>> held;  // same bytes, another dtype: not interchangeable
    for (int i = 0; i < 10; ++i) held.push_back(pool->alloc(100, dtypes::int32));
    REQUIRE(pool->stats().reused == 0);
    // The third and later each free a kept float32 buffer first, to stay within 4000 + 1000.
    REQUIRE(pool->stats().evicted == 8);
    REQUIRE(pool->stats().pooled == 2);
    REQUIRE(pool->stats().peak_bytes == 4000);
  }
  // 4000 in use and 800 kept: all ten kept as they come back.
  REQUIRE(pool->stats().pooled == 12);
  REQUIRE(pool->stats().pooled_bytes == 4800);
  auto reused = pool->alloc(100, dtypes::float32);
  REQUIRE(pool->stats().reused == 1);
  REQUIRE(pool->stats().pooled == 11);
  fail_next = 1;  // the device is out of memory once: the pool frees its buffers and the retry works
  auto big = pool->alloc(50, dtypes::float64);
  REQUIRE(big->size == 50);
  REQUIRE(pool->stats().pooled == 0);
  fail_next = 1;  // with nothing pooled, the failure reaches the caller
  REQUIRE_THROWS_AS(pool->alloc(60, dtypes::float64), std::bad_alloc);
  std::int64_t live = RawBuffer::live_count;
  reused.reset();  // pooled: free memory, no longer a live buffer
  REQUIRE(RawBuffer::live_count == live - 1);
  REQUIRE(pool->stats().pooled == 1);
  pool->clear();
  REQUIRE(RawBuffer::live_count == live - 1);
  REQUIRE(pool->stats().pooled == 0);
}

TEST_CASE("a buffer pool against a model of its rule, over random allocations and frees", "[memory]") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 gen(seed);
    const std::int64_t slack = static_cast<std::int64_t>(gen() % 5) * 1000 - 1000;  // -1000 keeps nothing
    auto pool = std::make_shared<BufferPool>(
        [](std::size_t n, DType dt) { return std::make_shared<RawMallocBuffer>(n, dt); }, slack);
    // The model: bytes in use and their peak; the kept buffers in the order they came back, as
    // (elements, dtype); the device's own allocations and the kept buffers it freed.
    std::size_t in_use = 0, peak = 0, kept_bytes = 0;
    std::vector<std::pair<std::size_t, int>> kept;
    std::int64_t fresh = 0, evicted = 0;
    std::vector<std::shared_ptr<RawBuffer>> held;
    const DType types[] = {dtypes::float32, dtypes::int32};
    const std::int64_t live = RawBuffer::live_count, used = GlobalCounters::mem_used;
    for (int op = 0; op < 400; ++op) {
      INFO("seed " << seed << " slack " << slack << " op " << op);
      if (held.empty() || gen() % 5 < 3) {
        std::size_t n = 50 * (1 + gen() % 6), bytes = 4 * n;
        int t = static_cast<int>(gen() % 2);
        held.push_back(pool->alloc(n, types[t]));
        // The most recently kept of its kind, or room made (the most recently kept first) and a new one.
        auto hit = std::find(kept.rbegin(), kept.rend(), std::pair{n, t});
        if (hit != kept.rend()) {
          kept.erase(std::next(hit).base()), kept_bytes -= bytes;
        } else {
          while (slack >= 0 && !kept.empty() &&
                 in_use + kept_bytes + bytes >
                     std::max(peak, in_use + bytes) + static_cast<std::size_t>(slack))
            kept_bytes -= 4 * kept.back().first, kept.pop_back(), ++evicted;
          ++fresh;
        }
        in_use += bytes, peak = std::max(peak, in_use);
      } else {
        std::size_t i = gen() % held.size();
        std::size_t n = held[i]->size;
        int t = held[i]->dtype == dtypes::int32 ? 1 : 0;
        bool keep = slack >= 0 && in_use + kept_bytes <= peak + static_cast<std::size_t>(slack);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        in_use -= 4 * n;
        if (keep) kept.emplace_back(n, t), kept_bytes += 4 * n;
      }
      auto st = pool->stats();
      REQUIRE(st.in_use_bytes == in_use);
      REQUIRE(st.peak_bytes == peak);
      REQUIRE(st.pooled_bytes == kept_bytes);
      REQUIRE(st.pooled == kept.size());
      REQUIRE(st.fresh == fresh);
      REQUIRE(st.evicted == evicted);
      // The pool never holds more than the peak and the slack; kept buffers are not counted as live.
      if (slack >= 0) REQUIRE(in_use + kept_bytes <= peak + static_cast<std::size_t>(slack));
      REQUIRE(RawBuffer::live_count - live == static_cast<std::int64_t>(held.size()));
      REQUIRE(GlobalCounters::mem_used - used == static_cast<std::int64_t>(in_use));
    }
  }
}

namespace {
// n x n float32 values from a seed, realized.
Tensor square(std::int64_t n, unsigned seed) {
  return Tensor(test::random_floats(static_cast<std::size_t>(n * n), seed), {n, n},
                {.dtype = dtypes::float32})
      .realize();
}

// The bytes of the distinct buffers a captured step's scratch slots use, and how many there are.
std::pair<std::int64_t, std::size_t> scratch_bytes(const CapturedStep& c) {
  std::set<const RawBuffer*> seen;
  std::int64_t bytes = 0;
  for (const auto& slot : c.slots)
    if (slot.role == CapturedStep::Role::Scratch && seen.insert(slot.buf.get()).second)
      bytes += static_cast<std::int64_t>(slot.buf->nbytes());
  return {bytes, seen.size()};
}
}  // namespace

TEST_CASE("a host GEMM's scratch (a gathered operand) is pooled memory after the call", "[memory]") {
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope on(dev);
    if (!on.ok) continue;
    INFO(dev);
    std::vector<double> xv = test::random_floats(8 * 16 * 32, 11), wv = test::random_floats(256 * 64, 12),
                        bv = test::random_floats(64, 13);
    const TensorOptions f32{.dtype = dtypes::float32};
    Tensor x = Tensor(xv, {8, 16, 32}, f32).realize(), w = Tensor(wv, {256, 64}, f32).realize(),
           b = Tensor(bv, {64}, f32).realize();
    BufferPool& pool = dynamic_cast<Compiled&>(Device::get(dev)).pool();
    const auto before = pool.stats();
    const std::int64_t used = GlobalCounters::mem_used;
    // A is x's (16, 8, 32) permutation read as (16, 256): no stride serves it, so it is gathered.
    Tensor y = (x.permute({1, 0, 2}).reshape({16, 256}).matmul(w) + b).relu().realize();
    const auto after = pool.stats();
    // The output and the gathered A came from the pool (C is the output itself: the bias and ReLU,
    // read through the product's reshape, are its epilogue); only the output is still in use.
    REQUIRE(after.fresh + after.reused - before.fresh - before.reused == 2);
    REQUIRE(GlobalCounters::mem_used - used == 16 * 64 * 4);
    REQUIRE(after.in_use_bytes - before.in_use_bytes == 16 * 64 * 4);
    std::vector<float> got = y.to_vector<float>();
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 64; ++j) {
        double acc = bv[static_cast<std::size_t>(j)];
        for (int a = 0; a < 8; ++a)
          for (int c = 0; c < 32; ++c)
            acc += xv[static_cast<std::size_t>((a * 16 + i) * 32 + c)] *
                   wv[static_cast<std::size_t>((a * 32 + c) * 64 + j)];
        REQUIRE(got[static_cast<std::size_t>(i * 64 + j)] == Approx(std::max(acc, 0.0)).margin(1e-4));
      }
  }
}

TEST_CASE("a realize frees each intermediate buffer after its last consumer, not at its end", "[memory]") {
  test::DeviceScope on_clang("CLANG");
  if (!on_clang.ok) return;
  const std::int64_t n = 128, bytes = n * n * 4, chain = 12;
  Tensor x = square(n, 1), w = square(n, 2) * (1.0 / n);
  w.realize();
  auto run = [&] {  // 12 products, each read only by the next: one realize of 12 kernels
    Tensor t = x;
    for (int i = 0; i < chain; ++i) t = t.matmul(w);
    return t.realize();
  };
  run();  // compiles; the GEMM's packing memory is allocated once
  std::int64_t before = GlobalCounters::mem_used;
  GlobalCounters::reset();
  Tensor out = run();
  std::int64_t transient = GlobalCounters::mem_peak - before;
  INFO("peak above the inputs: " << transient << " bytes; one product: " << bytes);
  // Live at once: the product being written and the one it reads (holding all 12 was the old way).
  REQUIRE(transient <= 3 * bytes);
  // And the values are the chain's (row sums of w are about 0.5: no overflow to hide a mistake).
  std::vector<double> ref = x.to_vector<double>(), wv = w.to_vector<double>();
  for (int i = 0; i < chain; ++i) {
    std::vector<double> next(static_cast<std::size_t>(n * n), 0.0);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t k = 0; k < n; ++k)
        for (std::int64_t c = 0; c < n; ++c) next[r * n + c] += ref[r * n + k] * wv[k * n + c];
    ref = next;
  }
  std::vector<float> got = out.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(ref[i]).epsilon(1e-3).margin(1e-6));
}

TEST_CASE("TinyJit's replays share memory between scratch buffers whose lifetimes do not overlap",
          "[memory][jit]") {
  test::DeviceScope on_clang("CLANG");
  if (!on_clang.ok) return;
  const std::int64_t n = 96, bytes = n * n * 4, chain = 10;
  Tensor w = square(n, 3) * (1.0 / n);
  w.realize();
  Tensor param = square(n, 4).requires_grad_(true);
  auto step = [&](const Tensor& x) {  // a chain of products, and a parameter's gradient kept by it
    Tensor t = x;
    for (int i = 0; i < chain; ++i) t = t.matmul(w).relu();
    param.grad = std::nullopt;
    Tensor loss = (t * param).sum();
    loss.backward();
    param.grad->realize();  // computed inside the step, and held by the parameter after it
    return loss;
  };
  TinyJit jit(step);
  for (unsigned s = 0; s < 2; ++s) jit(square(n, 10 + s));  // runs, then captures
  const CapturedStep& c = *jit.captured();
  std::set<const RawBuffer*> before;
  for (const auto& slot : c.slots) before.insert(slot.buf.get());
  for (unsigned s = 2; s < 6; ++s) {
    Tensor x = square(n, 10 + s);
    float got = jit(x).item<float>();
    // The same step without the JIT, on the same input.
    Tensor t = x;
    for (int i = 0; i < chain; ++i) t = t.matmul(w).relu();
    std::vector<float> expect_grad = t.to_vector<float>();
    float expect = (t * param.detach()).sum().item<float>();
    REQUIRE(got == Approx(expect).epsilon(1e-4));
    // The gradient the step left in param.grad is the replay's, not the capture's: a buffer something
    // outside the JIT holds is not shared.
    std::vector<float> grad = param.grad->to_vector<float>();
    for (std::size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == Approx(expect_grad[i]).epsilon(1e-4));
  }
  auto [scratch, after] = scratch_bytes(c);
  INFO(before.size() << " buffers at capture, " << after << " scratch buffers after planning, " << scratch
                     << " bytes");
  // The chain's 10 products (and relus) live one or two at a time; the gradient keeps its own.
  REQUIRE(scratch <= 5 * bytes);
}

TEST_CASE("TinyJit's memory plan places the largest buffers first, the small ones in their gaps",
          "[memory][jit]") {
  test::DeviceScope on_clang("CLANG");
  if (!on_clang.ok) return;
  const std::int64_t n = 64, bytes = n * n * 4;
  // a (n x n) lives over kernels 1-2, b (n x n) over 2-3, c (n x n x 4) over 3-4: a fits into c's
  // buffer, which is free until kernel 3. Taken in order of first write, a's buffer is too small for
  // c when c comes (a quarter of it), so c would get a buffer of its own: 6 n^2 in all.
  auto step = [&](const Tensor& x) {
    Tensor a = (x * 2).realize();
    Tensor b = (a + x).realize();
    Tensor c = (b.reshape({n, n, 1}).expand({n, n, 4}) * 1.5).realize();
    return c.sum();
  };
  TinyJit jit(step);
  for (unsigned s = 0; s < 2; ++s) jit(square(n, 20 + s));
  for (unsigned s = 2; s < 5; ++s) {
    Tensor x = square(n, 20 + s);
    float got = jit(x).item<float>();
    REQUIRE(got == Approx(step(x).item<float>()).epsilon(1e-5));
  }
  auto [scratch, buffers] = scratch_bytes(*jit.captured());
  INFO(buffers << " scratch buffers, " << scratch << " bytes");
  REQUIRE(scratch == 5 * bytes);
}

TEST_CASE("host buffers of a mebibyte and more go back to the system when freed", "[memory]") {
  auto resident = [] {  // VmRSS in bytes
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;
    return -1.0;
  };
  if (resident() < 0) return;      // no /proc
  const std::size_t n = 16 << 20;  // 64 MiB of float32
  double before = 0, touched = 0;
  {
    RawMallocBuffer big(n, dtypes::float32);
    std::memset(big.data(), 1, big.nbytes());
    touched = resident();
    before = touched - static_cast<double>(big.nbytes());
  }
  double freed = resident();
  INFO("resident: " << before / 1e6 << " MB before, " << touched / 1e6 << " touched, " << freed / 1e6
                    << " freed");
  REQUIRE(freed < touched - 0.9 * static_cast<double>(n * 4));
}

TEST_CASE("host buffers from 2 MiB start on a huge-page boundary and keep their bytes", "[memory]") {
  std::mt19937_64 gen(11);
  for (int i = 0; i < 24; ++i) {
    // Around the thresholds (1 MiB: mapped, 2 MiB: aligned) and odd sizes past them.
    std::size_t n = std::size_t{1} << 18;
    n = i < 8 ? n * (2 + static_cast<std::size_t>(i % 4) * 2) - 1 + static_cast<std::size_t>(i / 4) * 2
              : 1 + gen() % (n * 8);
    RawMallocBuffer buf(n, dtypes::float32);
    auto* p = reinterpret_cast<float*>(buf.data());
    INFO(n << " floats at " << static_cast<const void*>(p));
    if (buf.nbytes() >= (std::size_t{2} << 20))
      REQUIRE(reinterpret_cast<std::uintptr_t>(p) % (std::size_t{2} << 20) == 0);
    for (std::size_t j = 0; j < n; ++j) p[j] = static_cast<float>(j % 1021);
    std::vector<float> back = buf.toCPU<float>();
    for (std::size_t j = 0; j < n; j += 1 + j / 64) REQUIRE(back[j] == static_cast<float>(j % 1021));
    REQUIRE(back[n - 1] == static_cast<float>((n - 1) % 1021));
  }
}
