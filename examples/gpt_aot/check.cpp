// The check of the GPT AOT example: the C program's logits against the dynamic path's forward on
// the same weights and tokens.
//
//   gpt_aot_check PROGRAM DIR
//
// Builds the dynamic character GPT (examples/gpt_model.hpp) of config.h's sizes from a fixed seed,
// writes its weights in the static model's order (model.hpp's params) and random tokens into DIR,
// runs `PROGRAM DIR/weights.bin DIR/tokens.bin DIR/logits.bin` (main.c, which calls the AOT library),
// and compares each of its logits with the dynamic forward's: 1e-4 relative plus 1e-4 absolute (the
// C kernels and the CPU device sum in different orders). Exit status 1 on any difference.
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

#include "../gpt_model.hpp"
#include "model.hpp"

using namespace gpt_aot;

namespace {

// The static model's weights from the dynamic one's state dict (in_proj split into q, k, v).
void copy_weights(const examples::GPT& dyn, Model& m) {
  std::map<std::string, std::vector<float>> sd;
  for (const auto& [name, t] : metagrad::nn::get_state_dict(dyn)) sd[name] = t.to_vector<float>();
  auto take = [&](const std::string& name, auto& dst, std::size_t offset = 0) {
    auto it = sd.find(name);
    std::size_t n = static_cast<std::size_t>(std::remove_cvref_t<decltype(dst)>::size);
    if (it == sd.end() || offset + n > it->second.size())
      throw std::runtime_error("gpt_aot_check: no weight " + name + " of that size");
    std::copy_n(it->second.begin() + static_cast<std::ptrdiff_t>(offset), n, dst.begin());
  };
  take("wte.weight", m.wte), take("wpe.weight", m.wpe);
  for (index_t i = 0; i < N; ++i) {
    std::string p = "blocks." + std::to_string(i) + ".";
    Block& b = m.blocks[i];
    take(p + "ln1.weight", b.ln1_w), take(p + "ln1.bias", b.ln1_b), take(p + "ln2.weight", b.ln2_w);
    take(p + "ln2.bias", b.ln2_b);
    Linear<C, C>* qkv[] = {&b.q, &b.k, &b.v};
    for (std::size_t j = 0; j < 3; ++j) {
      take(p + "attn.in_proj_weight", qkv[j]->w, j * C * C);
      take(p + "attn.in_proj_bias", qkv[j]->b, j * C);
    }
    take(p + "attn.out_proj.weight", b.out.w), take(p + "attn.out_proj.bias", b.out.b);
    take(p + "fc.weight", b.fc.w), take(p + "fc.bias", b.fc.b);
    take(p + "proj.weight", b.proj.w), take(p + "proj.bias", b.proj.b);
  }
  take("ln_f.weight", m.lnf_w), take("ln_f.bias", m.lnf_b), take("head.weight", m.head);
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
  copy_weights(dyn, *m);
  std::vector<float> weights;
  std::apply([&](const auto&... p) { (weights.insert(weights.end(), p.begin(), p.end()), ...); }, params(*m));
  if (weights.size() != GPT_WEIGHTS)
    throw std::runtime_error("gpt_aot_check: config.h's GPT_WEIGHTS is wrong");

  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> tok(0, V - 1);
  std::vector<std::int32_t> tokens(B * T);
  for (auto& t : tokens) t = tok(rng);
  write(dir + "/weights.bin", weights);
  write(dir + "/tokens.bin", tokens);

  std::vector<float> want =
      dyn(metagrad::Tensor(std::vector<std::int64_t>(tokens.begin(), tokens.end()), {B, T}))
          .to_vector<float>();
  const std::string cmd =
      "'" + program + "' '" + dir + "/weights.bin' '" + dir + "/tokens.bin' '" + dir + "/logits.bin'";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("gpt_aot_check: `" + cmd + "` failed");
  std::vector<float> got(want.size());
  std::ifstream f(dir + "/logits.bin", std::ios::binary);
  f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
  if (!f || f.peek() != EOF) throw std::runtime_error("gpt_aot_check: logits.bin is not B*T*V floats");

  double worst = 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double d = std::abs(double(got[i]) - want[i]);
    worst = std::max(worst, d);
    if (!(d <= 1e-4 + 1e-4 * std::abs(want[i])) && bad++ < 5)
      std::fprintf(stderr, "logit %zu: C library %.7g, dynamic path %.7g\n", i, got[i], want[i]);
  }
  std::printf(
      "gpt_aot_check: %zu logits, C library vs dynamic path: largest difference %.3g, %zu outside "
      "tolerance\n",
      want.size(), worst, bad);
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
