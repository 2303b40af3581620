// Runs an ONNX model file (metagrad::onnx, docs/onnx.md) on one input and prints each sample's top
// classes and the time per inference: a classifier exported from PyTorch, or any model whose first
// output is (batch, classes).
//
//   onnx_infer MODEL.onnx [--input=FILE.pb] [--expect=FILE.pb] [--labels=FILE] [--top=5] [--runs=20]
//              [--device=NAME]
//
// The input is a serialized TensorProto (a backend test's input_0.pb), or random when none is given
// (normal values for a float input, integers in [0, 10) for an integer one, symbolic dimensions 1).
// --labels names the classes (one per line). --expect compares the output with a TensorProto (within
// 1e-4 + 1e-3 |expected|): a difference, or a different top class, is an error (exit status 3), for
// tests. Times: the load, the first call (kernels generated and compiled), then the mean of --runs
// calls replayed by TinyJit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "flags.hpp"
#include "metagrad/jit.hpp"
#include "metagrad/metagrad.hpp"
#include "metagrad/onnx.hpp"

using namespace metagrad;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A random input for the model's first declared input: symbolic dimensions as 1.
Tensor random_input(const onnx::Model& m) {
  Dims shape;
  for (const onnx::Dim& d : m.input_shapes().at(0))
    shape.push_back(std::holds_alternative<std::int64_t>(d) ? std::get<std::int64_t>(d) : 1);
  DType dt = m.input_dtypes().at(0);
  if (dt == onnx::string_dtype)
    throw std::runtime_error(m.path() + ": its input is a tensor of strings (onnx::Model::run takes those)");
  if (dtypes::is_float(dt)) return Tensor::randn(shape).cast(dt).realize();
  return (Tensor::rand(shape) * 10).floor().cast(dt).realize();
}

std::vector<std::string> read_labels(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open the labels");
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string input, expect, labels_file, device = getenv("DEVICE", Device::DEFAULT);
  long top = 5, runs = 20;
  examples::Flags flags(argv[0]);
  flags.add("input", input, "FILE").add("expect", expect, "FILE").add("labels", labels_file, "FILE");
  flags.add("top", top, "N").add("runs", runs, "N").add("device", device, "NAME");
  std::vector<char*> rest{argv[0]};  // the model: the one argument that is not a flag
  std::string model;
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-' && model.empty())
      model = argv[i];
    else
      rest.push_back(argv[i]);
  flags.parse(static_cast<int>(rest.size()), rest.data());
  flags.require(!model.empty(), "a model file is needed: onnx_infer MODEL.onnx [flags]");
  flags.require(top >= 1 && runs >= 1, "top and runs must be >= 1");
  Device::DEFAULT = Device::canonicalize(device);
  const std::vector<std::string> labels = read_labels(labels_file);

  auto t0 = Clock::now();
  onnx::Model m = onnx::load(model);
  const double load_ms = ms_since(t0);
  Tensor x = input.empty() ? random_input(m) : onnx::read_tensor(input).realize();
  std::printf("%s: opset %lld, input '%s' %s, on %s\n", model.c_str(), static_cast<long long>(m.opset()),
              m.input_names().at(0).c_str(), to_string(x.shape()).c_str(), Device::DEFAULT.c_str());

  TinyJit<std::function<std::vector<Tensor>(Tensor)>> jit([&](Tensor in) {
    std::vector<Tensor> outs = m({in});
    for (Tensor& o : outs) o.realize();
    return outs;
  });
  t0 = Clock::now();
  Tensor y = jit(x).at(0);
  const double first_ms = ms_since(t0);
  jit(x);  // the capture
  t0 = Clock::now();
  for (long r = 0; r < runs; ++r) y = jit(x).at(0);
  const double run_ms = ms_since(t0) / static_cast<double>(runs);

  if (y.ndim() == 1) y = y.reshape({1, y.shape()[0]});
  if (y.ndim() != 2)
    throw std::runtime_error("the first output is " + to_string(y.shape()) + ", not (batch, classes)");
  const std::int64_t batch = y.shape()[0], classes = y.shape()[1];
  std::vector<float> scores = y.cast(dtypes::float32).to_vector<float>();
  std::vector<float> probs = y.cast(dtypes::float32).softmax(1).to_vector<float>();
  for (std::int64_t b = 0; b < batch; ++b) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(classes));
    std::iota(order.begin(), order.end(), 0);
    const auto row = static_cast<std::size_t>(b * classes);
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(top, classes));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](std::int64_t i, std::int64_t j) { return scores[row + i] > scores[row + j]; });
    std::printf("sample %lld:", static_cast<long long>(b));
    for (std::size_t i = 0; i < k; ++i) {
      const std::int64_t c = order[i];
      const bool named = static_cast<std::size_t>(c) < labels.size();
      std::printf("  %s%lld (%.3f)", named ? (labels[static_cast<std::size_t>(c)] + " ").c_str() : "class ",
                  static_cast<long long>(c), probs[row + static_cast<std::size_t>(c)]);
    }
    std::printf("\n");
  }
  std::printf("load %.1f ms, first inference %.1f ms, then %.3f ms per inference (mean of %ld)\n", load_ms,
              first_ms, run_ms, runs);

  if (!expect.empty()) {
    Tensor want = onnx::read_tensor(expect).cast(dtypes::float32).reshape({batch, classes});
    std::vector<float> w = want.to_vector<float>();
    double worst = 0;
    bool ok = true;
    for (std::size_t i = 0; i < w.size(); ++i) {
      double d = std::abs(static_cast<double>(scores[i]) - w[i]);
      worst = std::max(worst, d);
      ok = ok && d <= 1e-4 + 1e-3 * std::abs(w[i]);
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      auto first = [&](const std::vector<float>& v) {
        auto row = v.begin() + b * classes;
        return std::max_element(row, row + classes) - row;
      };
      ok = ok && first(scores) == first(w);
    }
    std::printf("expected %s: max |difference| %.3g, %s\n", expect.c_str(), worst, ok ? "match" : "MISMATCH");
    if (!ok) return 3;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "onnx_infer: %s\n", e.what());
  return 1;
}
