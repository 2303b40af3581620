// Threads on the static path (fixed/parallel.hpp): for shapes above and below the size thresholds,
// results with 2 and 3 threads equal those with 1. Elementwise ops, matmul and the reductions split
// by output rows or columns compute every element exactly as one thread does: bitwise equal. A sum
// into one value adds per-thread partials in a fixed order: within 2e-6 of sum |x| of the 1-thread
// value and of a double reference (a max is exact in any order). Against double: sums of ~1000
// values in [-2, 2] within 1e-5 relative plus 2e-4 absolute (float rounding with cancellation),
// matmul 1.6e-5 sqrt(k). Outputs start as NaN, so a range no thread wrote shows.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "alloc_count.hpp"
#include "fixed_check.hpp"
#include "metagrad/fixed/mlp.hpp"
#include "metagrad/device/threadpool.hpp"

using namespace metagrad::test;

namespace {

// Runs with n threads, restoring the count it found.
struct Threads {
  int before = fx::threads();
  explicit Threads(int n) { fx::set_threads(n); }
  ~Threads() { fx::set_threads(before); }
};

template <class Tn>
std::unique_ptr<Tn> nan_tensor() {
  auto t = std::make_unique<Tn>();
  for (auto& x : *t) x = std::numeric_limits<typename Tn::value_type>::quiet_NaN();
  return t;
}

template <class Tn>
bool bitwise_equal(const Tn& a, const Tn& b) {
  return std::memcmp(a.data(), b.data(), sizeof(typename Tn::value_type) * Tn::size) == 0;
}

// f(out) evaluated with 1, 2 and 3 threads into NaN-filled outputs: the 2- and 3-thread results
// equal the 1-thread one bitwise; returns the 1-thread result.
template <class Tn, class F>
std::unique_ptr<Tn> same_on_threads(F f) {
  std::unique_ptr<Tn> one;
  for (int n : {1, 2, 3}) {
    Threads t(n);
    auto out = nan_tensor<Tn>();
    f(*out);
    if (!one) {
      one = std::move(out);
      continue;
    }
    INFO(n << " threads, " << Tn::size << " elements");
    REQUIRE(bitwise_equal(*out, *one));
  }
  return one;
}

template <index_t N>
void check_flat(std::mt19937& rng) {
  auto a = random_tensor<float, N>(rng), b = random_tensor<float, N>(rng), c = random_tensor<float, N>(rng);
  auto fma = same_on_threads<fx::Tensor<float, N>>([&](auto& o) { o = a * b + c; });
  check_all(
      *fma, [&](index_t i) { return double(a[i] * b[i] + c[i]); }, 0, 0);
  auto sig = same_on_threads<fx::Tensor<float, N>>([&](auto& o) { o = (a * 3).sigmoid() + b.exp(); });
  check_all(
      *sig, [&](index_t i) { return 1 / (1 + std::exp(-3.0 * a[i])) + std::exp(double(b[i])); }, 1e-5, 1e-6);
  auto lg = same_on_threads<fx::Tensor<float, N>>([&](auto& o) { o = (a.abs() + 1).log() * c; });
  check_all(
      *lg, [&](index_t i) { return std::log(std::abs(double(a[i])) + 1) * c[i]; }, 1e-5, 1e-6);
}

template <index_t M, index_t N>
void check_rows(std::mt19937& rng) {
  auto a = random_tensor<float, M, N>(rng);
  auto r = random_tensor<float, N>(rng);
  auto t = random_tensor<float, N, M>(rng);
  auto bc = same_on_threads<fx::Tensor<float, M, N>>([&](auto& o) { o = a * r - t.transpose(); });
  check_all(
      *bc, [&](index_t i) { return double(a[i] * r[i % N] - t[(i % N) * M + i / N]); }, 0, 0);
  // a pad: the guarded loop, rows of the padded shape
  auto pd = same_on_threads<fx::Tensor<float, M + 2, N + 1>>(
      [&](auto& o) { o = (a + 1.5f).template pad<1, 1, 0, 1>(); });
  check_all(
      *pd,
      [&](index_t i) {
        index_t y = i / (N + 1) - 1, x = i % (N + 1);
        return y >= 0 && y < M && x < N ? double(a[y * N + x] + 1.5f) : 0.0;
      },
      0, 0);
}

}  // namespace

TEST_CASE("fixed threads: the pool runs each part once, each thread when asked, and nests inline",
          "[fixed]") {
  for (int n : {1, 2, 3, 5}) {
    Threads t(n);
    REQUIRE(fx::threads() == n);
    std::thread::id ids[8];
    fx::detail::parallel_parts(
        n, [&](int p, int) { ids[p] = std::this_thread::get_id(); }, true);
    std::set<std::thread::id> distinct(ids, ids + n);
    REQUIRE(distinct.size() == static_cast<std::size_t>(n));
    REQUIRE(ids[0] == std::this_thread::get_id());

    constexpr int kParts = 23;  // claimed by whichever thread is free: each exactly once
    int hits[kParts] = {}, seen_parts[kParts] = {};
    std::int64_t covered[kParts] = {};
    bool inline_nested[kParts] = {};
    fx::detail::parallel_parts(kParts, [&](int p, int parts) {  // no Catch2 macros off the main thread
      seen_parts[p] = parts;
      ++hits[p];
      inline_nested[p] = true;  // a nested split runs inline on this thread
      std::thread::id self = std::this_thread::get_id();
      fx::detail::parallel_for(1000, 8, 1, [&](std::int64_t lo, std::int64_t hi) {
        inline_nested[p] = inline_nested[p] && std::this_thread::get_id() == self;
        covered[p] += hi - lo;
      });
    });
    for (int p = 0; p < kParts; ++p) {
      REQUIRE(hits[p] == 1);
      REQUIRE(seen_parts[p] == kParts);
      REQUIRE(covered[p] == 1000);
      REQUIRE(inline_nested[p]);
    }
  }
  for (std::int64_t len : {0, 1, 7, 100, 4099, 70001}) {  // ranges cover [0, len) once, aligned
    Threads t(3);
    std::vector<int> seen(static_cast<std::size_t>(len));
    std::atomic<int> misaligned{0};
    fx::detail::parallel_for(len, 16, 10, [&](std::int64_t lo, std::int64_t hi) {
      if (lo % 16) ++misaligned;
      for (std::int64_t i = lo; i < hi; ++i) ++seen[static_cast<std::size_t>(i)];
    });
    REQUIRE(misaligned == 0);
    for (int s : seen) REQUIRE(s == 1);
  }
}

// Workers sleep (a futex) once a job is a while away: after each pause every worker must wake for
// the next job (an each-thread job waits for all of them: a lost wake-up would hang here), and
// resizing joins the old threads and starts new ones, each job's parts run once.
TEST_CASE("fixed threads: sleeping workers wake for the next job, and resizing restarts them", "[fixed]") {
  for (int n : {2, 3, 1, 4, 2}) {
    Threads t(n);
    REQUIRE(fx::threads() == n);
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the workers' spin
      std::thread::id ids[8];
      fx::detail::parallel_parts(
          n, [&](int p, int) { ids[p] = std::this_thread::get_id(); }, true);
      REQUIRE(std::set<std::thread::id>(ids, ids + n).size() == static_cast<std::size_t>(n));
      std::atomic<int> hits[17] = {};
      fx::detail::parallel_parts(17, [&](int p, int) { ++hits[p]; });
      for (auto& h : hits) REQUIRE(h == 1);
    }
  }
}

// Jobs come back to back from several callers (one gets the pool, the others run inline), mixed
// with each-thread jobs: no part is lost or run twice, however late a worker wakes for a job that
// others have finished (a stale claim must fail, not run a part of the next job). The runtime's
// parallel_for is the same pool.
TEST_CASE("fixed threads: back-to-back jobs from several callers run every part exactly once", "[fixed]") {
  for (int n : {2, 3, 8}) {  // 8 threads on a smaller machine: workers are often descheduled
    Threads t(n);
    REQUIRE(metagrad::thread_count() == n);
    constexpr int kCallers = 3, kJobs = 400;
    std::atomic<int> wrong{0};
    auto caller = [&](int seed) {
      std::mt19937 rng(static_cast<unsigned>(seed));
      for (int j = 0; j < kJobs; ++j) {
        if (j % 7 == 0) {
          std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
          fx::detail::parallel_parts(
              n, [&](int p, int) { ++hits[static_cast<std::size_t>(p)]; }, true);
          for (auto& h : hits) wrong += h != 1;
          continue;
        }
        const int parts = 2 + static_cast<int>(rng() % 40);
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(parts));
        if (j % 2)
          fx::detail::parallel_parts(
              parts, [&](int p, int np) { hits[static_cast<std::size_t>(p)] += np == parts ? 1 : 100; });
        else
          metagrad::parallel_for(parts, [&](std::int64_t lo, std::int64_t hi) {
            for (auto i = lo; i < hi; ++i) ++hits[static_cast<std::size_t>(i)];
          });
        for (auto& h : hits) wrong += h != 1;
      }
    };
    std::vector<std::thread> others;
    for (int c = 1; c < kCallers; ++c) others.emplace_back(caller, c);
    caller(0);
    for (auto& o : others) o.join();
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("fixed threads: elementwise results equal one thread's, bitwise", "[fixed]") {
  std::mt19937 rng(21);
  check_flat<100>(rng);            // below the threshold
  check_flat<(1 << 14) + 5>(rng);  // just above it
  check_flat<(1 << 16) + 13>(rng);
  check_flat<3 * (1 << 15) + 7>(rng);
  check_flat<(1 << 18) + 1>(rng);
  check_rows<7, 50>(rng);
  check_rows<300, 257>(rng);
  check_rows<3, 40000>(rng);
  check_rows<5000, 17>(rng);
}

TEST_CASE("fixed threads: matmul results equal one thread's, bitwise", "[fixed]") {
  std::mt19937 rng(22);
  auto check = [&]<index_t M, index_t K, index_t N>(fx::Tensor<float, M, K>*, fx::Tensor<float, K, N>*) {
    auto a = random_tensor<float, M, K>(rng), b = random_tensor<float, K, N>(rng);
    auto at = random_tensor<float, K, M>(rng);
    auto c = same_on_threads<fx::Tensor<float, M, N>>([&](auto& o) { o = fx::matmul(a, b); });
    auto ct =
        same_on_threads<fx::Tensor<float, M, N>>([&](auto& o) { o = fx::matmul(at.transpose(), b) + 1.f; });
    double tol = 1.6e-5 * std::sqrt(double(K));
    check_all(
        *c,
        [&](index_t i) {
          double s = 0;
          for (index_t p = 0; p < K; ++p) s += double(a[i / N * K + p]) * b[p * N + i % N];
          return s;
        },
        tol, tol);
    check_all(
        *ct,
        [&](index_t i) {
          double s = 1;
          for (index_t p = 0; p < K; ++p) s += double(at[p * M + i / N]) * b[p * N + i % N];
          return s;
        },
        tol, tol);
  };
  check((fx::Tensor<float, 29, 64>*)nullptr, (fx::Tensor<float, 64, 70>*)nullptr);       // below
  check((fx::Tensor<float, 130, 97>*)nullptr, (fx::Tensor<float, 97, 150>*)nullptr);     // above
  check((fx::Tensor<float, 15, 1000>*)nullptr, (fx::Tensor<float, 1000, 100>*)nullptr);  // 2 strips
  check((fx::Tensor<float, 1, 2048>*)nullptr, (fx::Tensor<float, 2048, 600>*)nullptr);   // 1 strip
  check((fx::Tensor<float, 200, 300>*)nullptr, (fx::Tensor<float, 300, 5>*)nullptr);
  check((fx::Tensor<float, 128, 600>*)nullptr, (fx::Tensor<float, 600, 2100>*)nullptr);  // 2 column panels
  // batched: (4, 100, 60) @ (60, 90)
  auto x = random_tensor<float, 4, 100, 60>(rng);
  auto w = random_tensor<float, 60, 90>(rng);
  auto bx = same_on_threads<fx::Tensor<float, 4, 100, 90>>([&](auto& o) { o = fx::matmul(x, w); });
  check_all(
      *bx,
      [&](index_t i) {
        double s = 0;
        for (index_t p = 0; p < 60; ++p) s += double(x[i / 90 * 60 + p]) * w[p * 90 + i % 90];
        return s;
      },
      1.6e-5 * std::sqrt(60.0), 1.6e-5 * std::sqrt(60.0));
  // batched with B per batch index, each product too small to split (attention's q k^T per head):
  // the batch is split over the threads instead
  auto q = random_tensor<float, 16, 64, 32>(rng), k = random_tensor<float, 16, 64, 32>(rng);
  auto qk =
      same_on_threads<fx::Tensor<float, 16, 64, 64>>([&](auto& o) { o = fx::matmul(q, k.transpose()); });
  check_all(
      *qk,
      [&](index_t i) {
        const index_t bi = i / (64 * 64), r = i / 64 % 64, c = i % 64;
        double s = 0;
        for (index_t p = 0; p < 32; ++p) s += double(q[(bi * 64 + r) * 32 + p]) * k[(bi * 64 + c) * 32 + p];
        return s;
      },
      1.6e-5 * std::sqrt(32.0), 1.6e-5 * std::sqrt(32.0));
}

TEST_CASE("fixed threads: reductions by rows and columns equal one thread's, a full sum is close",
          "[fixed]") {
  std::mt19937 rng(23);
  auto a = random_tensor<float, 300, 1000>(rng);
  auto row_sum = [&](index_t r) {
    double s = 0;
    for (index_t j = 0; j < 1000; ++j) s += a[r * 1000 + j];
    return s;
  };
  auto rows = same_on_threads<fx::Tensor<float, 300>>([&](auto& o) { o = a.sum<1>(); });  // W3a
  check_all(*rows, row_sum, 1e-5, 2e-4);
  auto cols = same_on_threads<fx::Tensor<float, 1000>>([&](auto& o) { o = a.sum<0>(); });  // W3b
  check_all(
      *cols,
      [&](index_t j) {
        double s = 0;
        for (index_t r = 0; r < 300; ++r) s += a[r * 1000 + j];
        return s;
      },
      1e-5, 2e-4);
  auto mx = same_on_threads<fx::Tensor<float>>([&](auto& o) { o = a.max(); });  // exact in any order
  REQUIRE(mx->data()[0] == *std::max_element(a.begin(), a.end()));
  auto sm = same_on_threads<fx::Tensor<float, 300, 1000>>([&](auto& o) { o = a.softmax<1>(); });
  check_all(
      *sm,
      [&](index_t i) {
        double m = *std::max_element(a.begin() + i / 1000 * 1000, a.begin() + i / 1000 * 1000 + 1000), s = 0;
        for (index_t j = 0; j < 1000; ++j) s += std::exp(double(a[i / 1000 * 1000 + j]) - m);
        return std::exp(double(a[i]) - m) / s;
      },
      1e-5, 1e-7);
  // (40, 50, 60) over axes 0 and 2: an outer axis is reduced, one thread by design
  auto c = random_tensor<float, 40, 50, 60>(rng);
  auto mid = same_on_threads<fx::Tensor<float, 50>>([&](auto& o) { o = c.sum<0, 2>(); });
  check_all(
      *mid,
      [&](index_t j) {
        double s = 0;
        for (index_t p = 0; p < 40; ++p)
          for (index_t q = 0; q < 60; ++q) s += c[(p * 50 + j) * 60 + q];
        return s;
      },
      1e-5, 2e-4);
  auto small = random_tensor<float, 30, 40>(rng);  // below the threshold
  same_on_threads<fx::Tensor<float, 40>>([&](auto& o) { o = small.sum<0>(); });

  // Into one value: per-thread partials, so compared within a tolerance.
  auto flat = random_tensor<float, (1 << 17) + 5>(rng);
  double want = 0, mag = 0;
  for (float v : flat) want += v, mag += std::abs(v);
  float one = 0;
  for (int n : {1, 2, 3}) {
    Threads t(n);
    fx::Tensor<float> s = flat.sum();
    fx::Tensor<float> again = flat.sum();  // deterministic for a thread count
    REQUIRE(s[0] == again[0]);
    REQUIRE(std::abs(double(s[0]) - want) <= 2e-6 * mag);
    if (n == 1) one = s[0];
    REQUIRE(std::abs(double(s[0]) - one) <= 2e-6 * mag);
  }
}

TEST_CASE("fixed threads: aliased assignments stay safe", "[fixed]") {
  std::mt19937 rng(24);
  for (int n : {1, 2, 3}) {
    Threads t(n);
    auto x = random_tensor<float, 400, 400>(rng);
    fx::Tensor<float, 400, 400> orig = x;
    x = x.permute<1, 0>() + x;  // read through another view: a temporary
    check_all(
        x, [&](index_t i) { return double(orig[(i % 400) * 400 + i / 400] + orig[i]); }, 0, 0);
    orig = x;
    x = x * 2.f + 1.f;  // read in place
    check_all(
        x, [&](index_t i) { return double(orig[i] * 2.f + 1.f); }, 0, 0);
    orig = x;
    auto w = random_tensor<float, 400, 400>(rng);
    x = fx::matmul(x, w);  // a matmul reading its destination: not computed into it
    check_all(
        x,
        [&](index_t i) {
          double s = 0;
          for (index_t p = 0; p < 400; ++p) s += double(orig[i / 400 * 400 + p]) * w[p * 400 + i % 400];
          return s;
        },
        1.6e-5 * 20, 1.6e-5 * 20);
    orig = x;
    x = x.sum<0>(fx::keepdim).expand<400, 400>() - x;
    check_all(
        x,
        [&](index_t i) {
          double s = 0;
          for (index_t r = 0; r < 400; ++r) s += orig[r * 400 + i % 400];
          return s - orig[i];
        },
        1e-5, 1e-3);
    orig = x;
    x = x.flip<0>() - x;
    check_all(
        x, [&](index_t i) { return double(orig[(399 - i / 400) * 400 + i % 400] - orig[i]); }, 0, 0);
  }
}

TEST_CASE("fixed threads: a W5 step equals one thread's and allocates nothing after the first, on any thread",
          "[fixed]") {
  constexpr index_t B = 128, In = 784, H = 512, Out = 10;
  using Mlp = fx::MLP<float, B, In, H, Out>;
  std::mt19937 rng(3);
  auto x = random_tensor<float, B, In>(rng, 0, 1);
  fx::Tensor<float, B, Out> y;
  for (index_t i = 0; i < B; ++i) y(i, rng() % Out) = 1;
  std::unique_ptr<Mlp> one;
  for (int n : {1, 2, 3}) {
    Threads t(n);
    auto m = std::make_unique<Mlp>(7);
    float first = m->step(x, y, 0.1f);  // warm-up: every thread's arena grows to its high-water mark
    std::uint64_t counts[4] = {};
    auto read = [&](std::uint64_t* into) {
      fx::detail::parallel_parts(
          n, [&](int p, int) { into[p] = metagrad::test::allocations(); }, true);
    };
    read(counts);
    std::uint64_t after[4] = {};
    float last = 0;
    for (int s = 0; s < 3; ++s) last = m->step(x, y, 0.1f);
    read(after);
    for (int p = 0; p < n; ++p) {
      INFO(n << " threads, thread " << p);
      REQUIRE(after[p] == counts[p]);
    }
    REQUIRE(last < first);
    if (!one) {
      one = std::move(m);
      continue;
    }
    REQUIRE(bitwise_equal(m->w1, one->w1));
    REQUIRE(bitwise_equal(m->b1, one->b1));
    REQUIRE(bitwise_equal(m->w2, one->w2));
    REQUIRE(bitwise_equal(m->b2, one->b2));
  }
}
