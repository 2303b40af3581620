#pragma once
// The W5 MLP step written by hand with Eigen (784 -> 512 relu -> 10, log-softmax + NLL, SGD): the
// reference W5 rows compare against (bench_workloads.cpp, bench_static_mlp.cpp). Row-major host
// data, so the Eigen matrices are row-major too.
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <vector>

namespace metagrad::bench {

struct EigenMlp {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::int64_t batch;
  M x, w1, w2, h, l, dl, dh, dw1, dw2;
  Eigen::RowVectorXf b1, b2, db1, db2;
  std::vector<std::int32_t> y;
  float lr = 0.01f;
  // x (batch, in), w1 (in, hidden), b1 (hidden), w2 (hidden, out), b2 (out), y (batch) class indices.
  EigenMlp(std::int64_t batch_, std::int64_t in, std::int64_t hidden, std::int64_t out, const float* x_,
           const float* w1_, const float* b1_, const float* w2_, const float* b2_,
           std::vector<std::int32_t> y_)
      : batch(batch_),
        x(Eigen::Map<const M>(x_, batch_, in)),
        w1(Eigen::Map<const M>(w1_, in, hidden)),
        w2(Eigen::Map<const M>(w2_, hidden, out)),
        b1(Eigen::Map<const Eigen::RowVectorXf>(b1_, hidden)),
        b2(Eigen::Map<const Eigen::RowVectorXf>(b2_, out)),
        y(std::move(y_)) {}
  float forward() {
    h.noalias() = x * w1;
    h.rowwise() += b1;
    h = h.cwiseMax(0.0f);
    l.noalias() = h * w2;
    l.rowwise() += b2;
    // log-softmax and NLL; dl = (softmax - onehot) / batch
    Eigen::VectorXf mx = l.rowwise().maxCoeff();
    dl = (l.colwise() - mx).array().exp().matrix();
    Eigen::VectorXf se = dl.rowwise().sum();
    float loss = 0;
    for (std::int64_t i = 0; i < batch; ++i) {
      loss -= l(i, y[static_cast<std::size_t>(i)]) - mx(i) - std::log(se(i));
      dl.row(i) /= se(i) * static_cast<float>(batch);
      dl(i, y[static_cast<std::size_t>(i)]) -= 1.0f / static_cast<float>(batch);
    }
    return loss / static_cast<float>(batch);
  }
  float step() {
    float loss = forward();
    dw2.noalias() = h.transpose() * dl;
    db2 = dl.colwise().sum();
    dh.noalias() = dl * w2.transpose();
    dh = (h.array() > 0.0f).select(dh, 0.0f);
    dw1.noalias() = x.transpose() * dh;
    db1 = dh.colwise().sum();
    w1 -= lr * dw1;
    w2 -= lr * dw2;
    b1 -= lr * db1;
    b2 -= lr * db2;
    return loss;
  }
};

}  // namespace metagrad::bench
