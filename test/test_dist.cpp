// metagrad::dist under mpirun (test/CMakeLists.txt runs this binary with -np 2 and -np 3). Every rank
// runs every test case, in order, so the collectives match. Where the result of N ranks is compared
// with one process, each rank also computes the one-process result itself, locally.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <metagrad/dist/data_parallel.hpp>
#include <metagrad/dist/fixed.hpp>
#include <metagrad/fixed/mlp.hpp>
#include <metagrad/jit.hpp>
#include <metagrad/nn.hpp>
#include <random>
#include <thread>

using namespace metagrad;
namespace fx = metagrad::fixed;
using Catch::Matchers::Contains;

namespace {

int R() { return dist::rank(); }
int N() { return dist::world_size(); }

// Rank r's value at i: small integers, so every summation order gives the exact sum.
float value(int r, std::size_t i) {
  return static_cast<float>(static_cast<long>((i * 7 + r * 13) % 101) - 50);
}

std::vector<float> rank_values(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

void check_sums(const std::vector<float>& got, std::size_t n, bool mean) {
  REQUIRE(got.size() == n);
  std::vector<float> want(101);  // value(r, i) depends on i % 101 only
  for (std::size_t i = 0; i < want.size(); ++i) {
    for (int r = 0; r < N(); ++r) want[i] += value(r, i);
    if (mean) want[i] /= static_cast<float>(N());
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::abs(got[i] - want[i % 101]) > 1e-5f * std::max(1.0f, std::abs(want[i % 101]))) ++bad;
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("dist: the group is the one mpirun started", "[dist]") {
  REQUIRE(N() >= 1);
  REQUIRE(R() >= 0);
  REQUIRE(R() < N());
  dist::init();  // idempotent
  REQUIRE(dist::initialized());
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(N()), 0);
  ranks[static_cast<std::size_t>(R())] = R() + 1;
  dist::allreduce_sum(ranks.data(), ranks.size(), dtypes::int32, "test");
  for (int r = 0; r < N(); ++r) CHECK(ranks[static_cast<std::size_t>(r)] == r + 1);  // each rank once
}

// The devices whose buffers are host memory (reduced in place), and OPENCL where it runs here
// (through a host copy each way).
std::vector<std::string> devices() {
  std::vector<std::string> out = {"CPU", "CLANG"};
  for (const std::string& d : Device::available())
    if (d == "OPENCL") out.push_back(d);
  return out;
}

TEST_CASE("dist: allreduce of 0, 1, odd and 64 MiB elements equals the local sum", "[dist]") {
  for (const std::string& device : devices())
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
      INFO(device << " n=" << n);
      Tensor t(rank_values(R(), n), {static_cast<std::int64_t>(n)}, {.device = device});
      Tensor alias = t;  // a copy of the handle sees the result too
      dist::allreduce(t);
      CHECK(t.device() == device);
      check_sums(alias.to_vector<float>(), n, false);
      Tensor m(rank_values(R(), n), {static_cast<std::int64_t>(n)}, {.device = device});
      dist::allreduce(m, dist::ReduceOp::MEAN);
      check_sums(m.to_vector<float>(), n, true);
    }
  // 64 MiB of float32: chunks, and a buffer larger than any eager limit.
  std::size_t big = std::size_t{16} << 20;
  Tensor t(rank_values(R(), big), {4096, 4096}, {.device = "CLANG"});
  dist::allreduce(t);
  check_sums(t.to_vector<float>(), big, false);
}

TEST_CASE("dist: allreduce of views, integer dtypes and fused lists", "[dist]") {
  // A view (a transposed, shrunk tensor) is reduced as the tensor it is.
  Tensor base(rank_values(R(), 24), {4, 6}, {.device = "CLANG"});
  Tensor v = base.shrink({{1, 3}, {0, 6}}).transpose();
  dist::allreduce(v);
  std::vector<float> got = v.to_vector<float>(), want;
  for (std::int64_t j = 0; j < 6; ++j)
    for (std::int64_t i = 1; i < 3; ++i) {
      float s = 0;
      for (int r = 0; r < N(); ++r) s += value(r, static_cast<std::size_t>(i * 6 + j));
      want.push_back(s);
    }
  CHECK(got == want);
  CHECK(base.to_vector<float>() == rank_values(R(), 24));  // the tensor it was a view of is untouched

  std::vector<std::int32_t> iv = {R(), 1, -R()};
  Tensor it(iv, {3}, {.device = "CPU"});
  dist::allreduce(it);
  CHECK(it.to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{N() * (N() - 1) / 2, N(), -N() * (N() - 1) / 2});
  REQUIRE_THROWS_WITH(dist::allreduce(it, dist::ReduceOp::MEAN), Contains("MEAN needs float32"));

  std::vector<Tensor> ts = {Tensor(rank_values(R(), 5), {5}, {.device = "CLANG"}),
                            Tensor(rank_values(R(), 7), {7}, {.device = "CLANG"})};
  dist::allreduce(ts, dist::ReduceOp::SUM);
  check_sums(ts[0].to_vector<float>(), 5, false);
  check_sums(ts[1].to_vector<float>(), 7, false);
}

TEST_CASE("dist: broadcast from a root", "[dist]") {
  for (const std::string& device : devices())
    for (int root : {0, N() - 1}) {
      Tensor t(rank_values(R(), 33), {3, 11}, {.device = device});
      dist::broadcast(t, root);
      CHECK(t.device() == device);
      CHECK(t.to_vector<float>() == rank_values(root, 33));
    }
  fx::Tensor<float, 2, 3> f = fx::Tensor<float, 2, 3>::from(rank_values(R(), 6).data());
  dist::broadcast(f);
  CHECK(std::vector<float>(f.data(), f.data() + 6) == rank_values(0, 6));
}

TEST_CASE("dist: allreduce of fixed::Tensors", "[dist]") {
  auto a = fx::Tensor<float, 3, 5>::from(rank_values(R(), 15).data());
  auto b = fx::Tensor<float, 7>::from(rank_values(R(), 7).data());
  dist::allreduce(a);
  check_sums(std::vector<float>(a.data(), a.data() + 15), 15, false);
  a = fx::Tensor<float, 3, 5>::from(rank_values(R(), 15).data());
  dist::allreduce(dist::ReduceOp::MEAN, a, b);  // fused
  check_sums(std::vector<float>(a.data(), a.data() + 15), 15, true);
  check_sums(std::vector<float>(b.data(), b.data() + 7), 7, true);
}

TEST_CASE("dist: a shape or dtype that differs between ranks is an error on every rank", "[dist]") {
  if (N() < 2) return;
  Tensor t = R() == 1 ? Tensor::ones({4, 3}) : Tensor::ones({3, 4});
  REQUIRE_THROWS_WITH(dist::allreduce(t), Contains("rank 0 has (3, 4) float32, rank 1 has (4, 3) float32"));
  Tensor d = Tensor::ones({5}, {.dtype = R() == 1 ? dtypes::float64 : dtypes::float32});
  REQUIRE_THROWS_WITH(dist::allreduce(d), Contains("rank 0 has (5,) float32, rank 1 has (5,) float64"));
  REQUIRE_THROWS_WITH(dist::broadcast(t), Contains("rank 1 has (4, 3)"));
  std::vector<Tensor> ts = {Tensor::ones({2})};
  if (R() == N() - 1) ts.push_back(Tensor::ones({2}));
  REQUIRE_THROWS_WITH(dist::allreduce(ts), Contains(detail::cat("rank 0 passes 1 tensors, rank ",
                                                                std::to_string(N() - 1), " passes 2")));
  fx::Tensor<float, 3, 4> f34;
  fx::Tensor<float, 12> f12;
  auto fixed_mismatch = [&] { R() == 1 ? dist::allreduce(f12) : dist::allreduce(f34); };
  REQUIRE_THROWS_WITH(fixed_mismatch(), Contains("rank 0 has (3, 4) float32, rank 1 has (12,) float32"));
  // A model that differs on one rank: found at the first average, on every rank.
  nn::Linear a(4, R() == 1 ? 3 : 2);
  REQUIRE_THROWS_WITH(dist::DataParallel(a),
                      Contains("rank 0 has (2, 4) float32, rank 1 has (3, 4) float32"));
  // The group still works after an error that every rank saw.
  Tensor ok = Tensor::ones({2});
  dist::allreduce(ok);
  CHECK(ok.to_vector<float>() == std::vector<float>{float(N()), float(N())});
}

TEST_CASE("dist: broadcast with a different root on each rank is an error on every rank", "[dist]") {
  // (issue 38 item 7: each rank kept its own data)
  if (N() < 2) return;
  int root = R() == 1 ? 1 : 0;
  Tensor t = Tensor::full({3}, float(R()));
  REQUIRE_THROWS_WITH(dist::broadcast(t, root), Contains("rank 0 has root 0, rank 1 has root 1"));
  fx::Tensor<float, 3> f;
  REQUIRE_THROWS_WITH(dist::broadcast(f, root), Contains("rank 0 has root 0, rank 1 has root 1"));
  // The same root everywhere still broadcasts, after the errors.
  dist::broadcast(t, 1);
  CHECK(t.to_vector<float>() == std::vector<float>{1.f, 1.f, 1.f});
}

// ---- N ranks with batch B / N against one process with batch B ----

namespace {

constexpr std::int64_t kB = 12, kIn = 10, kHidden = 16, kOut = 5, kSteps = 20;

struct Data {
  std::vector<float> x;  // kSteps batches of kB rows
  std::vector<std::int32_t> y;
  Data() {
    std::mt19937 g(42);
    std::normal_distribution<float> nd;
    for (std::int64_t i = 0; i < kSteps * kB * kIn; ++i) x.push_back(nd(g));
    for (std::int64_t i = 0; i < kSteps * kB; ++i) y.push_back(static_cast<std::int32_t>(g() % kOut));
  }
  // Rows [first, first + n) of batch `step`.
  std::pair<std::vector<float>, std::vector<std::int32_t>> rows(std::int64_t step, std::int64_t first,
                                                                std::int64_t n) const {
    auto r0 = step * kB + first;
    return {{x.begin() + r0 * kIn, x.begin() + (r0 + n) * kIn}, {y.begin() + r0, y.begin() + r0 + n}};
  }
};

struct Net {
  nn::Linear l1{kIn, kHidden}, l2{kHidden, kOut};
  Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};

std::unique_ptr<nn::optim::Optimizer> make_opt(const Net& net, bool adam) {
  if (adam) return std::make_unique<nn::optim::Adam>(nn::get_parameters(net), 0.01);
  return std::make_unique<nn::optim::SGD>(nn::get_parameters(net), 0.1, 0.9);
}

std::vector<std::vector<float>> weights(const Net& net) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : nn::get_parameters(net)) out.push_back(p.to_vector<float>());
  return out;
}

void require_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    REQUIRE(a[k].size() == b[k].size());
    float worst = 0;
    for (std::size_t i = 0; i < a[k].size(); ++i)
      worst = std::max(worst, std::abs(a[k][i] - b[k][i]) / std::max(1.0f, std::abs(b[k][i])));
    INFO("parameter " << k);
    CHECK(worst < 1e-4f);
  }
}

// `ranks` processes' training: this rank's share of each batch, or the whole batch for ranks = 1.
std::vector<std::vector<float>> train(const Data& d, const std::string& device, bool adam, bool distributed,
                                      std::size_t bucket_bytes) {
  Device::DEFAULT = device;
  // Other ranks start elsewhere: rank 0's initial weights must win through DataParallel's broadcast.
  Tensor::manual_seed(distributed && R() != 0 ? 100 + static_cast<std::uint64_t>(R()) : 7);
  Net net;
  std::optional<dist::DataParallel> ddp;
  if (distributed) ddp.emplace(net, bucket_bytes, bucket_bytes / 4 + 1);
  auto opt = make_opt(net, adam);
  Tensor::TrainingGuard training;
  std::int64_t share = distributed ? kB / N() : kB, first = distributed ? R() * share : 0;
  for (std::int64_t s = 0; s < kSteps; ++s) {
    auto [x, y] = d.rows(s, first, share);
    Tensor loss = net(Tensor(x, {share, kIn})).sparse_categorical_crossentropy(Tensor(y, {share}));
    opt->zero_grad();
    loss.backward();
    if (ddp) ddp->average_gradients();
    opt->step();
  }
  return weights(net);
}

}  // namespace

TEST_CASE("dist: N ranks with batch B/N train as one process with batch B (SGD, Adam; CPU, CLANG)",
          "[dist]") {
  Data d;
  std::string prev = Device::DEFAULT;
  for (const char* device : {"CPU", "CLANG"})
    for (bool adam : {false, true}) {
      INFO(device << (adam ? " Adam" : " SGD"));
      // Tiny buckets for SGD (several collectives in flight), the default for Adam (one bucket).
      std::size_t bucket = adam ? dist::DataParallel::kBucketBytes : 256;
      auto one = train(d, device, adam, false, bucket);
      auto many = train(d, device, adam, true, bucket);
      require_close(many, one);
    }
  Device::DEFAULT = prev;
}

TEST_CASE("dist: DataParallel packs reverse parameter order into capped buckets", "[dist]") {
  Net net;
  dist::DataParallel ddp(net, 256,
                         64);  // l2.bias (20 B), l2.weight (320 B), l1.bias (64 B), l1.weight (640 B)
  const auto& b = ddp.buckets();
  REQUIRE(b.size() == 4);
  CHECK(b[0].params == std::vector<std::size_t>{3});  // 20 B; + 320 B would pass the first cap (64 B)
  CHECK(b[1].params == std::vector<std::size_t>{2});  // 320 B alone: larger than the cap
  CHECK(b[2].params == std::vector<std::size_t>{1});
  CHECK(b[3].params == std::vector<std::size_t>{0});
  dist::DataParallel one(net);
  REQUIRE(one.buckets().size() == 1);
  CHECK(one.buckets()[0].params == std::vector<std::size_t>{3, 2, 1, 0});
  CHECK(one.buckets()[0].count == static_cast<std::size_t>(kIn * kHidden + kHidden + kHidden * kOut + kOut));
}

TEST_CASE("dist: a TinyJit step in two halves around the average trains as one process", "[dist]") {
  Data d;
  std::string prev = Device::DEFAULT;
  auto one = train(d, "CLANG", false, false, 0);
  Device::DEFAULT = "CLANG";
  Tensor::manual_seed(R() != 0 ? 100 + static_cast<std::uint64_t>(R()) : 7);
  Net net;
  dist::DataParallel ddp(net);
  nn::optim::SGD opt(nn::get_parameters(net), 0.1, 0.9);
  std::vector<Tensor> params = nn::get_parameters(net);
  // Half one: forward and backward; the parameters are arguments, so it reads their current buffers.
  JitCore grads_step, update_step;
  JitCore::Fn grads = [&](const std::vector<Tensor>& in) {
    Tensor loss = net(in[0]).sparse_categorical_crossentropy(in[1]);
    opt.zero_grad();
    loss.backward();
    std::vector<Tensor> out;
    for (const Tensor& p : params) out.push_back(*p.grad);
    return out;
  };
  // Half two: the averaged gradients in, the optimizer's update.
  JitCore::Fn update = [&](const std::vector<Tensor>& g) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].grad = g[i];
    opt.step();
    return std::vector<Tensor>{};
  };
  Tensor::TrainingGuard training;
  std::int64_t share = kB / N();
  for (std::int64_t s = 0; s < kSteps; ++s) {
    auto [x, y] = d.rows(s, R() * share, share);
    std::vector<Tensor> in = {Tensor(x, {share, kIn}), Tensor(y, {share})};
    in.insert(in.end(), params.begin(), params.end());
    std::vector<Tensor> g = grads_step(grads, in);
    ddp.average(g);
    update_step(update, g);
  }
  CHECK(update_step.captured() != nullptr);  // the replays ran
  require_close(weights(net), one);
  Device::DEFAULT = prev;
}

// ---- the static path: fx::grad gradients, allreduced as fixed::Tensors ----

namespace {

template <fx::index_t Batch>
using StaticMlp = fx::MLP<float, Batch, kIn, kHidden, kOut>;

// Adam on raw arrays (the static path has no optimizer class): the same rule as nn::optim::Adam.
struct StaticAdam {
  std::vector<std::vector<float>> m, v;
  int t = 0;
  template <class... P>
  void step(float lr, std::pair<P*, P*>... pg) {
    ++t;
    std::size_t k = 0;
    auto one = [&](auto* p, const auto* g) {
      auto n = static_cast<std::size_t>(p->size);
      if (m.size() <= k) m.emplace_back(n), v.emplace_back(n);
      float b1 = 0.9f, b2 = 0.999f, c1 = 1 - std::pow(b1, float(t)), c2 = 1 - std::pow(b2, float(t));
      for (std::size_t i = 0; i < n; ++i) {
        float gi = g->data()[i];
        m[k][i] = b1 * m[k][i] + (1 - b1) * gi;
        v[k][i] = b2 * v[k][i] + (1 - b2) * gi * gi;
        p->data()[i] -= lr * (m[k][i] / c1) / (std::sqrt(v[k][i] / c2) + 1e-8f);
      }
      ++k;
    };
    (one(pg.first, pg.second), ...);
  }
};

// One-hot labels of `n` rows starting at `first` of batch `step`.
template <fx::index_t Batch>
void load(const Data& d, std::int64_t step, std::int64_t first, fx::Tensor<float, Batch, kIn>& x,
          fx::Tensor<float, Batch, kOut>& y) {
  auto [xs, ys] = d.rows(step, first, Batch);
  std::copy(xs.begin(), xs.end(), x.data());
  std::fill_n(y.data(), Batch * kOut, 0.0f);
  for (fx::index_t i = 0; i < Batch; ++i) y.data()[i * kOut + ys[static_cast<std::size_t>(i)]] = 1;
}

template <fx::index_t Batch>
std::vector<std::vector<float>> train_static(const Data& d, bool adam, bool distributed) {
  StaticMlp<Batch> m(distributed && R() != 0 ? 100u + static_cast<unsigned>(R()) : 7u);
  if (distributed) {  // rank 0's weights everywhere
    dist::broadcast(m.w1);
    dist::broadcast(m.b1);
    dist::broadcast(m.w2);
    dist::broadcast(m.b2);
  }
  fx::Tensor<float, Batch, kIn> x;
  fx::Tensor<float, Batch, kOut> y;
  StaticAdam opt;
  for (std::int64_t s = 0; s < kSteps; ++s) {
    load<Batch>(d, s, distributed ? R() * Batch : 0, x, y);
    fx::grad_into(std::tie(m.grads.w1, m.grads.b1, m.grads.w2, m.grads.b2), m.loss(x, y), m.w1, m.b1, m.w2,
                  m.b2);
    if (distributed) dist::allreduce(dist::ReduceOp::MEAN, m.grads.w1, m.grads.b1, m.grads.w2, m.grads.b2);
    if (adam) {
      opt.step(0.01f, std::pair{&m.w1, &m.grads.w1}, std::pair{&m.b1, &m.grads.b1},
               std::pair{&m.w2, &m.grads.w2}, std::pair{&m.b2, &m.grads.b2});
    } else {
      m.w1 -= 0.1f * m.grads.w1;
      m.b1 -= 0.1f * m.grads.b1;
      m.w2 -= 0.1f * m.grads.w2;
      m.b2 -= 0.1f * m.grads.b2;
    }
  }
  auto vec = [](const auto& t) { return std::vector<float>(t.data(), t.data() + t.size); };
  return {vec(m.w1), vec(m.b1), vec(m.w2), vec(m.b2)};
}

std::vector<std::vector<float>> train_static_ranks(const Data& d, bool adam) {
  switch (N()) {  // the per-rank batch is part of the type
    case 1:
      return train_static<kB>(d, adam, true);
    case 2:
      return train_static<kB / 2>(d, adam, true);
    case 3:
      return train_static<kB / 3>(d, adam, true);
    case 4:
      return train_static<kB / 4>(d, adam, true);
    default:
      return {};
  }
}

}  // namespace

TEST_CASE("dist: the static path's fx::grad gradients, averaged, train as one process (SGD, Adam)",
          "[dist]") {
  if (N() > 4) {
    WARN("the static test has per-rank batch types for 1 to 4 ranks only");
    return;
  }
  Data d;
  for (bool adam : {false, true}) {
    INFO((adam ? "Adam" : "SGD"));
    require_close(train_static_ranks(d, adam), train_static<kB>(d, adam, false));
  }
}

// ---- failures that stop a rank (run only as their own ctest entries, by tag) ----

TEST_CASE("dist: a rank that stops calling makes the others time out", "[.dist_timeout]") {
  Tensor t = Tensor::ones({3});
  if (R() == N() - 1) {  // stops taking part for longer than METAGRAD_DIST_TIMEOUT
    std::this_thread::sleep_for(std::chrono::seconds(3 * static_cast<long>(dist::timeout()) + 2));
    return;
  }
  try {
    dist::allreduce(t);
    FAIL("allreduce returned without the last rank");
  } catch (const dist::Error& e) {
    std::printf("rank %d saw: %s\n", R(), e.what());
    CHECK_THAT(e.what(), Contains("METAGRAD_DIST_TIMEOUT"));
  }
}

TEST_CASE("dist: a rank that dies ends the job", "[.dist_dead]") {
  Tensor t = Tensor::ones({3});
  if (R() == N() - 1) std::_Exit(3);  // no MPI_Finalize: mpirun sees a rank die
  dist::allreduce(t);                 // never completes: mpirun ends this rank
  FAIL("allreduce returned without the dead rank");
}
