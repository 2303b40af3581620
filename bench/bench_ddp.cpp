// The W5 MLP step (docs/benchmarks.md: batch 128, 784 -> 512 relu -> 10, NLL, SGD) data-parallel
// over MPI: 1 and 2 processes of one thread each, every rank stepping on its own batch of 128
// (weak scaling: 2 ranks do twice the work). For each: the step time, the communication it left
// exposed (DataParallel's wait), the blocking allreduce of the gradients alone, and the scaling
// efficiency t(1 rank) / t(N ranks) (1.0 is perfect).
//
//   bench_ddp            (the parent: runs `mpirun -np N bench_ddp --child` for N = 1, 2)
//
// Env: DEVICE (default: metagrad's default device), BENCH_REP_MS (one repetition's length, default
// 200). Every figure is the median of 5 repetitions after warm-up; rank 0 reports, after a barrier
// per repetition, so a repetition ends when the slowest rank ends.
#include <stdio.h>  // popen, pclose

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <metagrad/dist/data_parallel.hpp>
#include <metagrad/metagrad.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using metagrad::Tensor;
namespace dist = metagrad::dist;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kBatch = 128, kIn = 784, kHidden = 512, kOut = 10;
constexpr int kReps = 5;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Tensor random(const metagrad::Dims& shape, std::mt19937& g, float scale, bool grad) {
  std::normal_distribution<float> nd(0, scale);
  std::vector<float> v(static_cast<std::size_t>(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
  for (float& x : v) x = nd(g);
  Tensor t(v, shape, {.requires_grad = grad});
  return t.realize();
}

// Runs `op` repeatedly for about rep_s seconds per repetition: the median seconds per call.
template <class Op>
double time_per_call(Op op, double rep_s) {
  for (int i = 0; i < 3; ++i) op();  // warm-up: kernels compiled, buffers pooled
  auto t0 = Clock::now();            // a fixed count on every rank: op() may be collective
  for (int i = 0; i < 5; ++i) op();
  auto n = static_cast<std::int64_t>(rep_s / (since(t0) / 5));
  dist::broadcast_bytes(&n, sizeof n, 0, "bench");  // rank 0's count for all
  n = std::max<std::int64_t>(2, n);
  std::vector<double> reps;
  for (int r = 0; r < kReps; ++r) {
    dist::barrier();
    auto start = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) op();
    dist::barrier();
    reps.push_back(since(start) / static_cast<double>(n));
  }
  return median(reps);
}

int child() {
  dist::init();
  std::mt19937 g(7 + static_cast<unsigned>(dist::rank()));  // each rank its own data
  double rep_s = static_cast<double>(metagrad::getenv_int("BENCH_REP_MS", 200)) * 1e-3;
  Tensor x = random({kBatch, kIn}, g, 1, false);
  std::vector<std::int32_t> labels;
  for (std::int64_t i = 0; i < kBatch; ++i) labels.push_back(static_cast<std::int32_t>(g() % kOut));
  Tensor y = Tensor(labels, {kBatch}).realize();
  std::vector<Tensor> p = {
      random({kIn, kHidden}, g, 1 / std::sqrt(float(kIn)), true), random({kHidden}, g, 0.01f, true),
      random({kHidden, kOut}, g, 1 / std::sqrt(float(kHidden)), true), random({kOut}, g, 0.01f, true)};
  dist::DataParallel ddp(p);
  metagrad::nn::optim::SGD opt(p, 0.01);
  double waited = 0;
  std::int64_t steps = 0;
  auto step = [&] {
    Tensor l = x.linear(p[0], p[1]).relu().linear(p[2], p[3]).log_softmax().nll_loss(y);
    opt.zero_grad();
    l.backward();
    ddp.average_gradients();
    opt.step();
    waited += ddp.wait_seconds(), ++steps;
  };
  double t_step = time_per_call(step, rep_s);
  double wait = waited / static_cast<double>(steps);
  // The gradients' allreduce alone, blocking: what the step would pay with no overlap at all.
  std::vector<float> flat(static_cast<std::size_t>(kIn * kHidden + kHidden + kHidden * kOut + kOut));
  double t_allreduce = time_per_call(
      [&] { dist::allreduce_sum(flat.data(), flat.size(), metagrad::dtypes::float32, "bench"); }, rep_s);
  if (dist::rank() == 0) {
    std::printf("R %d step %.9g\nR %d wait %.9g\nR %d allreduce %.9g\nR %d buckets %zu\n", dist::world_size(),
                t_step, dist::world_size(), wait, dist::world_size(), t_allreduce, dist::world_size(),
                ddp.buckets().size());
    std::fflush(stdout);
  }
  return 0;
}

// Runs the child under mpirun with n ranks; its "R n key value" lines.
std::map<std::string, double> run_ranks(const char* self, int n) {
  std::string cmd =
      metagrad::detail::cat(METAGRAD_MPIEXEC, " -np ", std::to_string(n), " ", self, " --child");
  std::fprintf(stderr, "bench_ddp: %s\n", cmd.c_str());
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) throw std::runtime_error("bench_ddp: cannot start " + cmd);
  std::map<std::string, double> out;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    int ranks = 0;
    char key[64];
    double v = 0;
    if (std::sscanf(line, "R %d %63s %lf", &ranks, key, &v) == 3) out[key] = v;
  }
  if (pclose(f) != 0 || out.size() < 4)
    throw std::runtime_error("bench_ddp: the child with " + std::to_string(n) + " ranks failed");
  return out;
}

int parent(const char* self) {
  // One thread per rank; Open MPI's consent to run as root (containers, CI) and to oversubscribe.
  setenv("THREADS", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);  // 2 ranks on a 1-core machine too
  std::map<int, std::map<std::string, double>> r;
  for (int n : {1, 2}) r[n] = run_ranks(self, n);
  std::printf("W5 MLP step, data-parallel over MPI, one thread per rank, batch %ld per rank (device %s)\n\n",
              long(kBatch), metagrad::getenv("DEVICE", metagrad::Device::DEFAULT).c_str());
  std::printf(
      "| ranks | step ms | samples/s | exposed comm ms/step | allreduce alone ms | buckets | efficiency |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (auto& [n, m] : r)
    std::printf("| %d | %.3f | %.0f | %.3f | %.3f | %.0f | %.2f |\n", n, m["step"] * 1e3,
                double(n * kBatch) / m["step"], m["wait"] * 1e3, m["allreduce"] * 1e3, m["buckets"],
                r[1]["step"] / m["step"]);
  std::printf(
      "\nefficiency: t(1 rank) / t(N ranks) at a fixed batch per rank (weak scaling; 1.00 is perfect)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "--child") return child();
  return parent(argv[0]);
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
