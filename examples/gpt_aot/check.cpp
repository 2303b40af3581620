// The check of the GPT AOT example: the C program's logits against the dynamic path's forward on
// the same weights and tokens.
//
//   gpt_aot_check PROGRAM DIR
//
// Builds the dynamic character GPT (examples/gpt_model.hpp) of config.h's sizes from a fixed seed,
// writes its weights in the static model's order (fx::for_each_param over static_gpt.hpp's Model) and random
// tokens into DIR, runs `PROGRAM DIR/weights.bin DIR/tokens.bin DIR/logits.bin` (main.c, which calls the AOT
// library), and compares each of its logits with the dynamic forward's: 1e-4 relative plus 1e-4 absolute (the
// C kernels and the CPU device sum in different orders). Then one call of the library's training step
// (lr 1) from here: its loss and the gradient it applied against the dynamic path's backward (1e-3
// relative plus 2e-5 absolute: the update's float rounding is about 1e-7 of each weight). Exit status
// 1 on any difference.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gpt_forward.h>

#include "../gpt_model.hpp"
#include "model.hpp"

using namespace gpt_aot;

namespace {

using examples::static_gpt::copy_weights;

// The static model's tensors as the flat weights array of config.h.
std::vector<float> flat(Model& m) {
  std::vector<float> out;
  fx::for_each_param([&](const auto& p) { out.insert(out.end(), p.begin(), p.end()); }, m);
  if (out.size() != GPT_WEIGHTS) throw std::runtime_error("gpt_aot_check: config.h's GPT_WEIGHTS is wrong");
  return out;
}

// Each weight's values (or gradient's) by name.
std::map<std::string, std::vector<float>> by_name(const examples::GPT& dyn, bool grads) {
  std::map<std::string, std::vector<float>> sd;
  for (const auto& [name, t] : metagrad::nn::get_state_dict(dyn))
    sd[name] = grads ? t.grad->to_vector<float>() : t.to_vector<float>();
  return sd;
}

// How many of got's values differ from want's by more than rel * |want| + abs (the first few printed).
std::size_t differences(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                        double rel, double abs) {
  double worst = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double d = std::abs(double(got[i]) - want[i]);
    worst = std::max(worst, d);
    if (!(d <= abs + rel * std::abs(want[i])) && bad++ < 5)
      std::fprintf(stderr, "%s %zu: C library %.7g, dynamic path %.7g\n", what, i, got[i], want[i]);
  }
  std::printf(
      "gpt_aot_check: %zu %s, C library vs dynamic path: largest difference %.3g, %zu outside "
      "tolerance\n",
      want.size(), what, worst, bad);
  return bad;
}

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  if (!f) throw std::runtime_error("gpt_aot_check: cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) return std::fprintf(stderr, "usage: gpt_aot_check PROGRAM DIR\n"), 2;
  const std::string program = argv[1], dir = argv[2];
  metagrad::Tensor::manual_seed(1337);
  examples::GPT dyn(T, C, H, N, V);
  auto m = std::make_unique<Model>();
  copy_weights(by_name(dyn, false), *m);
  const std::vector<float> weights = flat(*m);

  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> tok(0, V - 1);
  std::vector<std::int32_t> tokens(B * T), labels(B * T);
  for (auto& t : tokens) t = tok(rng);
  for (auto& t : labels) t = tok(rng);
  write(dir + "/weights.bin", weights);
  write(dir + "/tokens.bin", tokens);

  auto as64 = [](const std::vector<std::int32_t>& v) {
    return metagrad::Tensor(std::vector<std::int64_t>(v.begin(), v.end()), {B, T});
  };
  std::vector<float> want = dyn(as64(tokens)).to_vector<float>();
  const std::string cmd =
      "'" + program + "' '" + dir + "/weights.bin' '" + dir + "/tokens.bin' '" + dir + "/logits.bin'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("gpt_aot_check: `" + cmd + "` failed");
  std::vector<float> got(want.size());
  std::ifstream f(dir + "/logits.bin", std::ios::binary);
  f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
  if (!f || f.peek() != EOF) throw std::runtime_error("gpt_aot_check: logits.bin is not B*T*V floats");

  std::size_t bad = differences("logits", got, want, 1e-4, 1e-4);

  // The training step, called from here: its loss, and the gradient it applied (lr 1: the weights'
  // change), against the dynamic path's backward.
  for (metagrad::Tensor& p : metagrad::nn::get_parameters(dyn)) p.requires_grad_(true);
  metagrad::Tensor dyn_loss = examples::loss_of(dyn, as64(tokens), as64(labels));
  dyn_loss.backward();
  copy_weights(by_name(dyn, true), *m);
  const std::vector<float> dyn_grad = flat(*m);
  std::vector<float> stepped = weights, applied(weights.size());
  float loss = 0;
  gpt_train_step(tokens.data(), labels.data(), 1.f, stepped.data(), &loss);
  for (std::size_t i = 0; i < weights.size(); ++i) applied[i] = weights[i] - stepped[i];
  bad += differences("loss", {loss}, {dyn_loss.item<float>()}, 1e-5, 1e-6);
  bad += differences("gradients", applied, dyn_grad, 1e-3, 2e-5);
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
