// Nothing leaks: across many training steps the number of live LazyBuffers and RawBuffers stays
// flat (graphs are freed after backward and realize, optimizer state is replaced, not chained), and
// a compiled device's buffer pool serves repeated work from freed memory within its bounds.
#include <metagrad/metagrad.hpp>
#include <metagrad/runtime/buffer_pool.hpp>

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
  for (int i = 10; i < 10000; ++i) last = step();
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

TEST_CASE("a buffer pool keeps at most its cap and empties itself when allocation fails", "[memory]") {
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
  REQUIRE(pool->stats().pooled == 2);  // 800 of the 4000 freed bytes fit under 1000
  REQUIRE(pool->stats().pooled_bytes == 800);
  auto reused = pool->alloc(100, dtypes::float32);
  REQUIRE(pool->stats().reused == 1);
  REQUIRE(pool->stats().pooled == 1);
  auto other = pool->alloc(100, dtypes::int32);  // same bytes, another dtype: not interchangeable
  REQUIRE(pool->stats().reused == 1);
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
