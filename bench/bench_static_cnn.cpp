// LeNet-sized conv2d training steps on the static path (fixed::conv2d forward, then fixed::vjp_into
// for the input and the weights given the output's gradient: im2col / col2im around the blocked
// matmul kernel) next to the same step
// written by hand with Eigen (im2col of the whole batch, three matrix products, col2im), both on one
// thread, batch 64, float. Prints ms/step and the ratio (Eigen's time / the static path's: above 1
// is faster than Eigen).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "metagrad/fixed.hpp"
#include "metagrad/fixed/grad.hpp"

namespace {

namespace fx = metagrad::fixed;
using fx::index_t;
using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One conv layer: x (N, C, H, W), w (CO, C, K, K), stride 1, no padding; g the output's gradient.
template <index_t N, index_t C, index_t H, index_t W, index_t CO, index_t K>
struct Layer {
  static constexpr index_t OH = H - K + 1, OW = W - K + 1, HW = OH * OW, KK = C * K * K;
  std::vector<float> x, w, g;
  Layer() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto* v : {&x, &w, &g}) {
      v->resize(std::size_t(v == &x ? N * C * H * W : v == &w ? CO * KK : N * CO * HW));
      for (float& f : *v) f = u(rng);
    }
  }

  struct StaticStep {
    std::unique_ptr<fx::Tensor<float, N, C, H, W>> x = std::make_unique<fx::Tensor<float, N, C, H, W>>(),
                                                   dx = std::make_unique<fx::Tensor<float, N, C, H, W>>();
    fx::Tensor<float, CO, C, K, K> w, dw;
    std::unique_ptr<fx::Tensor<float, N, CO, OH, OW>>
        y = std::make_unique<fx::Tensor<float, N, CO, OH, OW>>(),
        g = std::make_unique<fx::Tensor<float, N, CO, OH, OW>>();
    explicit StaticStep(const Layer& l) {
      std::copy(l.x.begin(), l.x.end(), x->begin());
      std::copy(l.w.begin(), l.w.end(), w.begin());
      std::copy(l.g.begin(), l.g.end(), g->begin());
    }
    float step() {
      *y = fx::conv2d(*x, w);
      // g: y's gradient, as from the next layer
      fx::vjp_into(std::tie(*dx, dw), fx::conv2d(*x, w), *g, *x, w);
      return (*y)[0] + dw[0] + (*dx)[0];
    }
  };

  // The batch's windows as one (taps x N*OH*OW) matrix, as a hand-written Eigen layer would.
  struct EigenStep {
    M cols, y, gm, dw, dcols, wm;
    std::vector<float> x, out, dx;
    explicit EigenStep(const Layer& l)
        : cols(KK, N * HW), wm(Eigen::Map<const M>(l.w.data(), CO, KK)), x(l.x), dx(l.x.size()) {
      gm.resize(CO, N * HW);  // g (N, CO, OH, OW) as (CO x N*OH*OW)
      for (index_t b = 0; b < N; ++b)
        for (index_t co = 0; co < CO; ++co)
          for (index_t p = 0; p < HW; ++p) gm(co, b * HW + p) = l.g[std::size_t((b * CO + co) * HW + p)];
    }
    template <class F>
    static void taps(F f) {  // f(tap row, column in one image, offset in one image)
      for (index_t c = 0; c < C; ++c)
        for (index_t i = 0; i < K; ++i)
          for (index_t j = 0; j < K; ++j)
            for (index_t oy = 0; oy < OH; ++oy)
              for (index_t ox = 0; ox < OW; ++ox)
                f((c * K + i) * K + j, oy * OW + ox, (c * H + oy + i) * W + ox + j);
    }
    float step() {
      for (index_t b = 0; b < N; ++b)
        taps([&](index_t r, index_t p, index_t o) {
          cols(r, b * HW + p) = x[std::size_t(b * C * H * W + o)];
        });
      y.noalias() = wm * cols;  // (CO x N*HW); NCHW order is a copy away, as for the static path's g
      dw.noalias() = gm * cols.transpose();
      dcols.noalias() = wm.transpose() * gm;
      std::fill(dx.begin(), dx.end(), 0.f);
      for (index_t b = 0; b < N; ++b)
        taps([&](index_t r, index_t p, index_t o) {
          dx[std::size_t(b * C * H * W + o)] += dcols(r, b * HW + p);
        });
      return y(0, 0) + dw(0, 0) + dx[0];
    }
  };
};

using Conv1 = Layer<64, 1, 28, 28, 6, 5>;   // LeNet's first layer on 28x28 images
using Conv2 = Layer<64, 6, 12, 12, 16, 5>;  // its second, after 2x2 pooling

std::map<std::string, double> ms;

template <class Step, class L>
void run(benchmark::State& state, const std::string& name) {
  L layer;
  Step s(layer);
  s.step();  // warm-up: the arena and Eigen's buffers grown
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(s.step());
  ms[name] = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
             double(state.iterations());
  state.counters["ms/step"] = ms[name];
}

void BM_conv1_static(benchmark::State& s) { run<Conv1::StaticStep, Conv1>(s, "conv1 static"); }
void BM_conv1_eigen(benchmark::State& s) { run<Conv1::EigenStep, Conv1>(s, "conv1 Eigen"); }
void BM_conv2_static(benchmark::State& s) { run<Conv2::StaticStep, Conv2>(s, "conv2 static"); }
void BM_conv2_eigen(benchmark::State& s) { run<Conv2::EigenStep, Conv2>(s, "conv2 Eigen"); }
BENCHMARK(BM_conv1_static)->Unit(benchmark::kMillisecond)->MinTime(1);
BENCHMARK(BM_conv1_eigen)->Unit(benchmark::kMillisecond)->MinTime(1);
BENCHMARK(BM_conv2_static)->Unit(benchmark::kMillisecond)->MinTime(1);
BENCHMARK(BM_conv2_eigen)->Unit(benchmark::kMillisecond)->MinTime(1);

// Both steps compute the same numbers: the bench measures the right computation.
template <class L>
void agree(const char* name) {
  L layer;
  typename L::StaticStep s(layer);
  typename L::EigenStep e(layer);
  float a = s.step(), b = e.step();
  std::printf("%s check (y[0] + dw[0] + dx[0]): static %.5f, Eigen %.5f%s\n", name, a, b,
              std::abs(a - b) > 1e-3f * std::max(1.f, std::abs(b)) ? "  (DIFFER)" : "");
}

}  // namespace

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);
  fx::set_threads(1);
  agree<Conv1>("conv1");
  agree<Conv2>("conv2");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (const char* l : {"conv1", "conv2"}) {
    std::string s = std::string(l) + " static", e = std::string(l) + " Eigen";
    if (ms.count(s) && ms.count(e))
      std::printf(
          "%s step (forward + input and weight gradients), batch 64, 1 thread: static %.3f ms, "
          "Eigen %.3f ms, xEigen %.2f\n",
          l, ms[s], ms[e], ms[e] / ms[s]);
  }
}
