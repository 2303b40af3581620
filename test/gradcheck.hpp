#pragma once
// Test helpers shared by the tensor tests: random inputs, closeness, and gradients checked against
// central finite differences in float64.
#include <catch2/catch.hpp>
#include <cstdlib>

#include <cmath>
#include <functional>
#include <metagrad/metagrad.hpp>
#include <random>
#include <string>
#include <vector>

namespace metagrad::test {

inline std::vector<double> random_values(std::int64_t n, std::uint64_t seed, double lo = -2, double hi = 2) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = d(gen);
  return v;
}

// A float64 tensor of random values in [lo, hi).
inline Tensor random_tensor(const Dims& shape, std::uint64_t seed, double lo = -2, double hi = 2,
                            bool requires_grad = false) {
  return Tensor(random_values(prod(shape), seed, lo, hi), shape, {.requires_grad = requires_grad});
}

// A sanitizer run: test/CMakeLists.txt sets ASAN_OPTIONS for them.
inline bool sanitized() { return std::getenv("ASAN_OPTIONS") != nullptr; }

// The device suites' combinatorial loops (op x layout x axes ...) on OpenCL: PoCL builds each new
// kernel in 0.1-0.5 s, so there a loop runs one case in three (`if (!sample()) continue;`): every
// third, the phase moving on by one every nine cases, so that an inner loop whose size is a multiple
// of three still sees each of its values across the outer one. Every op, layout and axis set still
// runs, in a third of the combinations; CLANG and LLVM, on the same ops and renderer, run all. The
// sanitizer runs (sanitized()) sample too: they look for memory errors on
// the library's paths, which a third of the combinations walks, at 3-10x the plain run's time.
struct Sampler {
  std::size_t n = 0;
  bool all = Device::canonicalize(Device::DEFAULT) != "OPENCL" && !sanitized();
  bool operator()() {
    std::size_t i = n++;
    return all || (i + i / 9) % 3 == 0;
  }
};

inline void require_close(const std::vector<double>& got, const std::vector<double>& want, double atol = 1e-6,
                          double rtol = 1e-6, const std::string& what = "") {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i]))
      REQUIRE(std::isnan(got[i]));
    else if (std::isinf(want[i]))
      REQUIRE(got[i] == want[i]);
    else
      REQUIRE(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

// Checks d(sum(f(inputs) * probe))/d(input) against central differences, for every input that
// requires grad. Inputs must be float64. `probe` is a fixed random weighting so every output
// element's gradient matters, not only their sum.
inline void check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                            double rtol = 1e-4) {
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs)
    xs.push_back(Tensor(t.to_vector<double>(), t.shape(), {.requires_grad = true}));
  Tensor out = f(xs);
  Tensor probe = random_tensor(out.shape(), 1234, 0.5, 1.5);
  (out * probe).sum().backward();
  std::vector<double> pv = probe.to_vector<double>();
  auto objective = [&](const std::vector<Tensor>& in) {
    Tensor::NoGradGuard g;
    std::vector<double> o = f(in).to_vector<double>();
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * pv[i];
    return s;
  };
  // The central differences, input by input, on `device`.
  auto differences = [&](const std::string& device) {
    std::string saved = Device::DEFAULT;
    Device::DEFAULT = device;
    struct Restore {
      std::string saved;
      ~Restore() { Device::DEFAULT = saved; }
    } restore{saved};
    std::vector<std::vector<double>> out;
    for (std::size_t k = 0; k < xs.size(); ++k) {
      std::vector<double> base = inputs[k].to_vector<double>();
      std::vector<double>& numeric = out.emplace_back(base.size());
      for (std::size_t i = 0; i < base.size(); ++i) {
        auto at = [&](double delta) {
          std::vector<double> v = base;
          v[i] += delta;
          std::vector<Tensor> in;
          for (std::size_t j = 0; j < xs.size(); ++j)
            in.push_back(j == k ? Tensor(v, inputs[k].shape())
                                : Tensor(inputs[j].to_vector<double>(), inputs[j].shape()));
          return objective(in);
        };
        numeric[i] = (at(eps) - at(-eps)) / (2 * eps);
      }
    }
    return out;
  };
  // They run on the CPU device, the reference (the base run checks its own gradients against them):
  // on a compiled device each of the 2n forward passes is a kernel launch, on OpenCL (PoCL) most of
  // a suite's time. The analytic gradients above are the device's own. Where f mixes in tensors of
  // the device under test (an error on CPU), they run there.
  std::vector<std::vector<double>> numeric;
  try {
    numeric = differences("CPU");
  } catch (const std::exception&) { numeric = differences(Device::DEFAULT); }
  for (std::size_t k = 0; k < xs.size(); ++k) {
    REQUIRE(xs[k].grad);
    require_close(xs[k].grad->to_vector<double>(), numeric[k], atol, rtol,
                  "gradient of input " + std::to_string(k));
  }
}

}  // namespace metagrad::test
