// The static path inside existing Eigen code: a two-layer classifier whose data and results are
// Eigen matrices, as code written against Eigen keeps them. fx::from_eigen views that memory
// (nothing is copied); the loss is an fx expression that fx::grad_into differentiates with respect
// to the parameters, fx tensors which the Eigen code updates through fx::to_eigen's Eigen::Maps.
//
//   eigen_static [--steps=N] [--min-accuracy=X]
//
// The data: two interleaved spirals in the plane (a class each), 256 points, which no linear model
// separates. --min-accuracy makes the run a test: exit status 1 when the training accuracy is below.
#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <metagrad/fixed.hpp>
#include <metagrad/fixed/eigen.hpp>
#include <random>

#include "flags.hpp"

namespace fx = metagrad::fixed;

namespace {

constexpr int N = 256, In = 2, Hidden = 64, Classes = 2;
template <int R, int C>
using Mat = Eigen::Matrix<float, R, C, Eigen::RowMajor>;  // fx tensors are row-major

// The existing code's data: points of two spirals and their one-hot classes.
void spirals(Mat<N, In>& x, Mat<N, Classes>& y) {
  std::mt19937 gen(3);
  std::normal_distribution<float> noise(0.f, 0.05f);
  for (int i = 0; i < N; ++i) {
    int c = i % 2;
    float t = 0.25f + 3.f * static_cast<float>(i / 2) / (N / 2), a = t * 2.5f + c * 3.14159265f;
    x(i, 0) = t * std::cos(a) / 3.f + noise(gen);
    x(i, 1) = t * std::sin(a) / 3.f + noise(gen);
    y.row(i).setZero();
    y(i, c) = 1.f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 2000;
  double min_accuracy = 0;
  examples::Flags flags(argv[0]);
  flags.add("steps", steps, "N").add("min-accuracy", min_accuracy, "X");
  flags.parse(argc, argv);
  flags.require(steps >= 0, "--steps must be at least 0");

  Mat<N, In> x;
  Mat<N, Classes> y;
  spirals(x, y);
  // The parameters: fx tensors (fx::grad differentiates with respect to those), which the Eigen
  // code sees as Eigen::Maps of their memory (fx::to_eigen).
  fx::Tensor<float, In, Hidden> w1;
  fx::Tensor<float, Hidden> b1;
  fx::Tensor<float, Hidden, Classes> w2;
  std::mt19937 gen(7);
  std::normal_distribution<float> init(0.f, 1.f);
  fx::to_eigen(w1) = Mat<In, Hidden>::NullaryExpr([&] { return init(gen) * 2.f; });
  fx::to_eigen(b1).setZero();
  fx::to_eigen(w2) = Mat<Hidden, Classes>::NullaryExpr([&] { return init(gen) / 8.f; });
  fx::Tensor<float, In, Hidden> g1;
  fx::Tensor<float, Hidden> gb1;
  fx::Tensor<float, Hidden, Classes> g2;

  // Views of the Eigen data: the same memory, shapes checked at compile time.
  auto X = fx::from_eigen(x);
  auto Y = fx::from_eigen(y);
  auto logits = [&] { return fx::matmul((fx::matmul(X, w1) + b1.expand<N, Hidden>()).tanh(), w2); };
  const float lr = 0.5f;
  for (long step = 0; step <= steps; ++step) {
    auto loss = -(logits().log_softmax<-1>() * Y).sum() / float(N);
    float l = fx::grad_into(std::tie(g1, gb1, g2), loss, w1, b1, w2);
    fx::to_eigen(w1) -= lr * fx::to_eigen(g1);  // the update, in Eigen
    fx::to_eigen(b1) -= lr * fx::to_eigen(gb1);
    fx::to_eigen(w2) -= lr * fx::to_eigen(g2);
    if (step % 500 == 0) std::printf("step %ld: loss %.4f\n", step, l);
  }
  Mat<N, Classes> out;
  fx::from_eigen(out) = logits();  // evaluated straight into an Eigen matrix
  int right = 0;
  for (int i = 0; i < N; ++i) {
    Eigen::Index got, want;
    out.row(i).maxCoeff(&got), y.row(i).maxCoeff(&want);
    right += got == want;
  }
  double accuracy = double(right) / N;
  std::printf("training accuracy %.4f (%d of %d points)\n", accuracy, right, N);
  if (accuracy < min_accuracy) {
    std::fprintf(stderr, "eigen_static: accuracy %.4f is below %.4f\n", accuracy, min_accuracy);
    return 1;
  }
  return 0;
}
