// Products of two bf16 or two f16 tensors (Tensor::matmul, Tensor::linear): on the host devices they
// run cpu::gemm_bf16 / cpu::gemm_f16 (f32 sums, one rounding to the narrow type), forward and
// backward, so that mixed-precision training's products sum in f32; elsewhere the generated
// kernels. Each against a float64 reference over the narrow inputs' exact values.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "gradcheck.hpp"

using namespace metagrad;
using metagrad::test::random_tensor;
using i64 = std::int64_t;

namespace {

bool host(const std::string& d) { return d == "CPU" || d == "CLANG" || d == "LLVM"; }

// Relative size of the narrow type's rounding (half an ulp): 2^-8 for bf16, 2^-11 for f16.
double unit(DType t) { return t == dtypes::bfloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// y (m x n) = a (m x k) b (k x n) in double, and the sums of |products| (the scale of the sums'
// rounding).
std::pair<std::vector<double>, std::vector<double>> product(const std::vector<double>& a,
                                                            const std::vector<double>& b, i64 m, i64 n,
                                                            i64 k) {
  std::vector<double> y(static_cast<std::size_t>(m * n)), mag(y.size());
  for (i64 i = 0; i < m; ++i)
    for (i64 j = 0; j < n; ++j)
      for (i64 p = 0; p < k; ++p) {
        double x = a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(p * n + j)];
        y[static_cast<std::size_t>(i * n + j)] += x, mag[static_cast<std::size_t>(i * n + j)] += std::fabs(x);
      }
  return {y, mag};
}

// got within one rounding to t of want, after f32 sums (k + 2 roundings of 2^-24 relative to mag);
// `sums_in_t`: the sums may round in t itself (a generated kernel off the host devices).
void require_rounded_once(const std::vector<double>& got, const std::vector<double>& want,
                          const std::vector<double>& mag, i64 k, DType t, bool sums_in_t = false) {
  REQUIRE(got.size() == want.size());
  const double sums = static_cast<double>(k + 2) * (sums_in_t ? unit(t) : std::ldexp(1.0, -24));
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]),
                 bound = unit(t) * std::fabs(want[i]) + sums * mag[i] + 1e-30;
    if (err > bound && bad++ < 3)
      UNSCOPED_INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
  }
  CHECK(bad == 0);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// The devices that compute: other suites of the same process register render-only ones (CUDA_SOURCE).
std::vector<std::string> computing_devices() {
  std::vector<std::string> d;
  for (const std::string& n : Device::available())
    if (n == "CPU" || n == "CLANG" || n == "LLVM" || n == "OPENCL" || n == "CUDA") d.push_back(n);
  return d;
}

}  // namespace

TEST_CASE("f16 x f16 and bf16 x bf16 products agree with float64 on every device", "[narrow]") {
  Tensor::NoGradGuard no_grad;
  for (const std::string& dev : computing_devices())
    for (DType t : {dtypes::float16, dtypes::bfloat16})
      for (auto [m, n, k] : {std::tuple<i64, i64, i64>{1, 24, 40}, {5, 7, 33}, {16, 48, 64}}) {
        INFO(dev << " " << t.name << " m " << m << " n " << n << " k " << k);
        // Inputs rounded to nearest even from f32; the reference uses their exact values.
        Tensor x = random_tensor({m, k}, 21, -2, 2).cast(dtypes::float32).cast(t).to(dev).realize(),
               w = random_tensor({k, n}, 22, -2, 2).cast(dtypes::float32).cast(t).to(dev).realize();
        Tensor wt = w.transpose().contiguous().realize();  // (n, k), used transposed as Linear's
        auto [want, mag] = product(values(x), values(w), m, n, k);
        if (host(dev)) {  // the GEMM, a CUSTOM load: no generated kernel for contiguous operands
          std::int64_t kernels = GlobalCounters::kernel_count;
          x.matmul(w).realize();
          CHECK(GlobalCounters::kernel_count == kernels);
        }
        for (const Tensor& y : {x.matmul(w), x.linear(wt.transpose()), x.reshape({1, m, k}).matmul(w)}) {
          REQUIRE(y.dtype() == t);
          REQUIRE(y.numel() == m * n);
          require_rounded_once(values(y), want, mag, k, t, !host(dev));
        }
      }
}

TEST_CASE("narrow products are differentiable: gradients through the GEMM agree with float64", "[narrow]") {
  // f32 masters cast to the narrow type for the product and the result back to f32, as mixed
  // precision trains: dX = G W^T and dW = X^T G, each one GEMM of the narrow G (the probe rounded),
  // rounded once, then widened to the masters' f32.
  for (const std::string& dev : computing_devices())
    if (host(dev))
      for (DType t : {dtypes::bfloat16, dtypes::float16})
        for (auto [m, n, k] : {std::tuple<i64, i64, i64>{1, 24, 40}, {3, 7, 33}, {16, 48, 64}})
          for (bool as_linear : {false, true}) {
            INFO(dev << " " << t.name << " m " << m << " n " << n << " k " << k << " linear " << as_linear);
            Tensor x = random_tensor({m, k}, 31, -2, 2).cast(dtypes::float32).to(dev),
                   w = random_tensor(as_linear ? Dims{n, k} : Dims{k, n}, 32, -2, 2)
                           .cast(dtypes::float32)
                           .to(dev),
                   probe = random_tensor({m, n}, 33, -2, 2).cast(dtypes::float32).to(dev);
            x.requires_grad_(), w.requires_grad_();
            Tensor xn = x.cast(t), wn = w.cast(t);
            Tensor y = as_linear ? xn.linear(wn.transpose()) : xn.matmul(wn);
            REQUIRE(y.dtype() == t);
            (y.cast(dtypes::float32) * probe).sum().backward();
            REQUIRE(x.grad);
            REQUIRE(w.grad);
            Tensor gx = *x.grad, gw = *w.grad;
            REQUIRE(gx.dtype() == dtypes::float32);
            REQUIRE(gw.shape() == w.shape());
            std::vector<double> g = values(probe.cast(t)), a = values(xn),
                                b = values(as_linear ? wn.transpose() : wn);
            std::vector<double> bt = values((as_linear ? wn : wn.transpose()).contiguous()),
                                at = values(xn.transpose().contiguous());
            auto [want_x, mag_x] = product(g, bt, m, k, n);  // G (m, n) W^T (n, k)
            auto [want_w, mag_w] = product(at, g, k, n, m);  // X^T (k, m) G (m, n)
            require_rounded_once(values(gx), want_x, mag_x, n, t);
            require_rounded_once(values(as_linear ? gw.transpose().contiguous() : gw), want_w, mag_w, m, t);
            auto [want_y, mag_y] = product(a, b, m, n, k);
            require_rounded_once(values(y), want_y, mag_y, k, t);
          }
}
