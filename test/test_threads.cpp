// Issue 13, item 1: tensors shared between threads. Many threads build graphs from one shared
// tensor (realized or lazy) and realize their results, or realize the same lazy tensor at once;
// every result is right, a shared lazy tensor is computed once, and nothing leaks. The kernel
// cache is shared by threads and by processes started at once. Each case runs on the default
// device (the base run on CPU, then once per compiled device); the TSan build runs them all.
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "child_process.hpp"
#include "device_scope.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
namespace fs = std::filesystem;

namespace {

constexpr int kThreads = 8;

// Runs f(t) on kThreads threads that start together; an exception on any thread fails the test
// (Catch's assertions are not thread-safe, so threads only record what they saw).
void on_threads(const std::function<void(int)>& f, int threads = kThreads) {
  std::barrier start(threads);
  std::vector<std::string> errors(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        f(t);
      } catch (const std::exception& e) { errors[static_cast<std::size_t>(t)] = e.what(); }
    });
  for (auto& th : pool) th.join();
  for (const auto& e : errors) REQUIRE(e.empty());
}

std::vector<float> iota_values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 97) - 3.f;
  return v;
}

bool all_close(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - want[i]) > 1e-4f * (1 + std::abs(want[i]))) return false;
  return true;
}

}  // namespace

TEST_CASE("threads: many threads build graphs from one realized tensor", "[threads]") {
  // W * 2 + 1 on eight threads from one realized W segfaulted: add_child grew W's child list unlocked
  std::vector<float> w = iota_values(4096, 0.5f);
  Tensor W(w, {64, 64});
  W.realize();
  std::int64_t lazy0 = LazyBuffer::live_count, raw0 = RawBuffer::live_count;
  std::atomic<int> wrong = 0;
  for (int round = 0; round < 3; ++round)
    on_threads([&](int t) {
      for (int i = 0; i < 10; ++i) {
        float k = static_cast<float>(t + i);
        std::vector<float> got = (W * k + 1).to_vector<float>();
        std::vector<float> want(w.size());
        for (std::size_t j = 0; j < w.size(); ++j) want[j] = w[j] * k + 1;
        if (!all_close(got, want)) ++wrong;
        // a reduce and a movement op of the shared tensor too
        std::vector<float> s = W.transpose().sum(1).to_vector<float>();
        double col0 = 0;
        for (std::size_t r = 0; r < 64; ++r) col0 += w[r * 64];
        if (std::abs(s[0] - col0) > 1e-3 * (1 + std::abs(col0))) ++wrong;
      }
    });
  REQUIRE(wrong == 0);
  REQUIRE(W.lazydata->live_children() == 0);  // the threads' graphs are gone
  REQUIRE(LazyBuffer::live_count == lazy0);
  REQUIRE(RawBuffer::live_count == raw0);
}

TEST_CASE("threads: a shared lazy tensor realized from many threads at once is computed once", "[threads]") {
  std::vector<float> w = iota_values(1000, 0.25f);
  std::int64_t raw0 = RawBuffer::live_count;
  {
    Tensor W(w, {1000});
    for (int round = 0; round < 5; ++round) {
      Tensor L = (W * static_cast<float>(round) + 2).exp().log();  // lazy: realized below on every thread
      std::vector<std::shared_ptr<RawBuffer>> seen(kThreads);
      on_threads([&](int t) {
        L.realize();
        seen[static_cast<std::size_t>(t)] = L.lazydata->base()->realized;
      });
      for (const auto& s : seen) REQUIRE(s == seen[0]);  // one buffer: computed once
      std::vector<float> got = L.to_vector<float>();
      for (std::size_t i = 0; i < w.size(); ++i)
        REQUIRE(got[i] == Approx(w[i] * static_cast<float>(round) + 2).margin(1e-4).epsilon(1e-4));
    }
  }
  REQUIRE(RawBuffer::live_count == raw0);  // the concurrent realizes leaked a buffer
}

TEST_CASE("threads: graphs built from a lazy tensor while other threads realize it", "[threads]") {
  std::vector<float> w = iota_values(512, 0.125f);
  Tensor W(w, {8, 64});
  for (int round = 0; round < 4; ++round) {
    Tensor L = W.relu() + static_cast<float>(round);  // shared and lazy: fused by some, realized by others
    std::atomic<int> wrong = 0;
    on_threads([&](int t) {
      for (int i = 0; i < 5; ++i) {
        if ((t + i) % 3 == 0) L.realize();
        float k = static_cast<float>(t - i);
        std::vector<float> got = (L * k).sum(1).to_vector<float>();
        for (std::size_t r = 0; r < 8; ++r) {
          double want = 0;
          for (std::size_t c = 0; c < 64; ++c)
            want += (std::max(w[r * 64 + c], 0.f) + static_cast<float>(round)) * k;
          if (std::abs(got[r] - want) > 1e-3 * (1 + std::abs(want))) ++wrong;
        }
        std::vector<float> p = L.permute({1, 0}).contiguous().to_vector<float>();
        if (std::abs(p[1] - (std::max(w[64], 0.f) + static_cast<float>(round))) > 1e-5) ++wrong;
      }
    });
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("threads: autograd graphs from shared parameters, with no_grad and training per thread",
          "[threads]") {
  Tensor W = Tensor::uniform({16, 16}, -1, 1, {.requires_grad = true});
  W.realize();
  std::vector<float> w = W.to_vector<float>();
  std::atomic<int> wrong = 0;
  on_threads([&](int t) {
    // each thread differentiates its own leaf through the shared W (W's own grad is not written)
    Tensor x = Tensor::full({4, 16}, 0.5 + t, {.requires_grad = true});
    Tensor::no_grad = t % 2 == 0;  // thread-local: the other threads still build graphs
    Tensor y = x.matmul(W.detach()).sum();
    if (!Tensor::no_grad) {
      y.backward();
      std::vector<float> g = x.grad->to_vector<float>();  // d/dx sum(x W) = row sums of W
      for (std::size_t i = 0; i < 16; ++i) {
        double want = 0;
        for (std::size_t j = 0; j < 16; ++j) want += w[i * 16 + j];
        if (std::abs(g[i] - want) > 1e-4 * (1 + std::abs(want))) ++wrong;
      }
    }
  });
  REQUIRE(wrong == 0);
  REQUIRE_FALSE(Tensor::no_grad);
}

TEST_CASE("threads: random numbers from many threads", "[threads]") {
  std::atomic<int> wrong = 0;
  on_threads([&](int) {
    for (int i = 0; i < 5; ++i) {
      for (float v : Tensor::rand({257}).to_vector<float>())
        if (!(v >= 0 && v < 1)) ++wrong;
      for (float v : Tensor::randn({33}).to_vector<float>())
        if (!std::isfinite(v)) ++wrong;
    }
  });
  REQUIRE(wrong == 0);
}

TEST_CASE("threads: the static path's pool and arena shared by several threads", "[threads]") {
  namespace fx = metagrad::fixed;
  using A = fx::Tensor<float, 48, 64>;
  using B = fx::Tensor<float, 64, 40>;
  using C = fx::Tensor<float, 48, 40>;
  auto a = std::make_unique<A>();
  auto b = std::make_unique<B>();
  for (std::size_t i = 0; i < A::size; ++i) a->data()[i] = static_cast<float>(i % 13) * 0.25f - 1.f;
  for (std::size_t i = 0; i < B::size; ++i) b->data()[i] = static_cast<float>(i % 7) * 0.5f - 1.5f;
  auto want = std::make_unique<C>();
  *want = (fx::matmul(*a, *b) + 1.f).relu();
  fx::Tensor<float> want_sum = a->sum();
  std::atomic<int> wrong = 0;
  on_threads([&](int) {
    for (int i = 0; i < 4; ++i) {
      auto got = std::make_unique<C>();
      *got = (fx::matmul(*a, *b) + 1.f).relu();  // temporaries in this thread's arena, loops on the pool
      for (std::size_t j = 0; j < C::size; ++j)
        if (got->data()[j] != want->data()[j]) ++wrong;
      fx::Tensor<float> total = a->sum();
      if (total.data()[0] != want_sum.data()[0]) ++wrong;  // partials added in a fixed order
    }
  });
  REQUIRE(wrong == 0);
}

// ---- the kernel cache from several threads and processes ----------------------------------------

namespace {
constexpr const char* kCacheChild = "threads: kernel cache child process";

// Distinct kernels per thread (constants are folded into the source), all checked.
int kernels_on_threads(int threads) {
  std::atomic<int> wrong = 0;
  on_threads(
      [&](int t) {
        std::vector<float> v = iota_values(300, 0.1f);
        Tensor a(v, {3, 100});
        for (int k = 0; k < 4; ++k) {
          float c = static_cast<float>(t * 4 + k) + 0.5f;
          std::vector<float> got = ((a + c) * (a - c)).sum(1).to_vector<float>();
          for (std::size_t r = 0; r < 3; ++r) {
            double want = 0;
            for (std::size_t j = 0; j < 100; ++j) want += (v[r * 100 + j] + c) * (v[r * 100 + j] - c);
            if (std::abs(got[r] - want) > 1e-3 * (1 + std::abs(want))) ++wrong;
          }
        }
      },
      threads);
  return wrong;
}
}  // namespace

TEST_CASE("threads: kernel cache child process", "[.][threads]") {
  const char* out = std::getenv("METAGRAD_TEST_CHILD_OUT");
  if (!out) return;  // only as a child of the test below
  Device::DEFAULT = std::getenv("METAGRAD_TEST_CHILD_DEVICE");
  int wrong = kernels_on_threads(4);
  std::ofstream(out) << wrong << "\n";
  REQUIRE(wrong == 0);
}

TEST_CASE("threads: the kernel cache from several threads and processes at once", "[threads]") {
  REQUIRE(kernels_on_threads(kThreads) == 0);  // this process's caches
  // three processes, four threads each, on one fresh disk cache; then a fourth on the filled one
  test::TempDir tmp("metagrad_threads_cache");
  REQUIRE(!tmp.path.empty());
  auto env = [&](int i) {
    return std::vector<std::string>{"METAGRAD_CACHE=" + (tmp.path / "cache").string(),
                                    "METAGRAD_TEST_CHILD_OUT=" + (tmp.path / std::to_string(i)).string(),
                                    "METAGRAD_TEST_CHILD_DEVICE=" + Device::DEFAULT};
  };
  for (int wave : {0, 1}) {
    std::vector<pid_t> kids;
    for (int i = 0; i < (wave == 0 ? 3 : 1); ++i)
      kids.push_back(test::spawn_child(kCacheChild, env(wave * 3 + i)));
    for (pid_t p : kids) REQUIRE(test::wait_for(p) == 0);
    for (int i = 0; i < (wave == 0 ? 3 : 1); ++i) {
      std::ifstream f(tmp.path / std::to_string(wave * 3 + i));
      int wrong = -1;
      f >> wrong;
      REQUIRE(wrong == 0);
    }
  }
}
