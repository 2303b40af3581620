// metagrad_add_onnx_library's library of ONNX's test_operator_conv (its weights in the .bin) against
// the test's expected output (its input is all ones) and, on a random input, the imported model on
// the CPU device: `onnx_library_check TEST_DIR`.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "metagrad/metagrad.hpp"
#include "metagrad/onnx.hpp"
#include "onnx_conv.h"

int main(int argc, char** argv) try {
  if (argc != 2) return std::fprintf(stderr, "usage: onnx_library_check TEST_DIR\n"), 2;
  using namespace metagrad;
  std::string dir = argv[1];
  Device::DEFAULT = "CPU";
  Tensor x = onnx::read_tensor(dir + "/test_data_set_0/input_0.pb");
  std::vector<float> in = x.to_vector<float>(), out(onnx_conv_run_output_2_SIZE, -7.f);
  if (in.size() != onnx_conv_run_input_0_SIZE) return std::fprintf(stderr, "input size %zu\n", in.size()), 1;
  onnx_conv_run(in.data(), out.data());
  std::vector<float> want = onnx::read_tensor(dir + "/test_data_set_0/output_0.pb").to_vector<float>();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : in) v = u(rng);
  std::vector<float> out2(out.size(), -7.f);
  onnx_conv_run(in.data(), out2.data());
  std::vector<float> import = onnx::load(dir + "/model.onnx")({Tensor(in, x.shape())})[0].to_vector<float>();
  if (want.size() != out.size() || import.size() != out.size())
    return std::fprintf(stderr, "output sizes\n"), 1;
  double worst_want = 0, worst_import = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    worst_want = std::max(worst_want, std::abs(out[i] - want[i]) / (1e-5 + 1e-3 * std::abs(want[i])));
    worst_import =
        std::max(worst_import, std::abs(out2[i] - import[i]) / (1e-5 + 1e-4 * std::abs(import[i])));
  }
  std::printf("onnx_conv_run: %.3g of the expected output's tolerance, %.3g of the import's\n", worst_want,
              worst_import);
  return worst_want <= 1 && worst_import <= 1 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "onnx_library_check: %s\n", e.what());
  return 1;
}
