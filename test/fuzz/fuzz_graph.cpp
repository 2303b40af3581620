// Fuzzer for the scheduler and the devices (issue 38): random lazy graphs up to 10^4 ops deep whose
// nodes are read by several later ones (shared subexpressions), some realized midway, built alike
// on CPU (the reference) and on every other device, and compared. The ops keep values in [-1, 1]
// and change by no more than their inputs do (averages, max, min, sin, movement), so rounding
// differences between devices add up over the depth rather than grow.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

// The first FUSING kinds fuse into their consumer's kernel; the others end a kernel (a reduce, padding).
enum Kind {
  NEG,
  AVG,
  MAX,
  MIN,
  RELU,
  SIN,
  SIGMOID,
  SCALE,
  PERMUTE,
  FLIP,
  SHUFFLE,
  MEAN_AXIS,
  SHIFT,
  CAT,
  KINDS
};
constexpr int FUSING = MEAN_AXIS;

struct Step {
  Kind kind;
  std::size_t a, b;  // inputs: indices of earlier nodes
  i64 axis;
  bool realize;  // realized as soon as it is built
};

// A chain of `depth` steps, each reading the node before it (so the graph is that deep) and, for
// binary ops, another node: with `share` percent chance an earlier node (a recent one mostly, any
// one sometimes), which that node's other readers then share; else the input (a realized buffer,
// which leaves the chain free to fuse).
std::vector<Step> recipe(fuzz::Rng& rng, std::size_t depth, int share, bool fusing) {
  std::vector<Step> out;
  for (std::size_t i = 0; i < depth; ++i) {
    i64 n = static_cast<i64>(i) + 1;  // nodes so far (node 0 is the input)
    i64 b = !rng.chance(share) ? 0
            : rng.chance(80)   ? n - 1 - rng.in(0, std::min<i64>(8, n - 1))
                               : rng.in(0, n - 1);
    out.push_back({static_cast<Kind>(rng.in(0, (fusing ? FUSING : KINDS) - 1)),
                   static_cast<std::size_t>(n - 1), static_cast<std::size_t>(b), rng.in(0, 1),
                   rng.chance(1)});
  }
  return out;
}

Tensor build_step(const Step& s, const std::vector<Tensor>& nodes) {
  const Tensor &x = nodes[s.a], &y = nodes[s.b];
  switch (s.kind) {
    case NEG:
      return x.neg();
    case AVG:
      return (x + y) * 0.5f;
    case MAX:
      return x.maximum(y);
    case MIN:
      return x.minimum(y);
    case RELU:
      return x.relu() - y.relu() * 0.5f;
    case SIN:
      return x.sin();
    case SIGMOID:
      return x.sigmoid() * 2.f - 1.f;
    case SCALE:
      return x * 0.75f + 0.25f * y;
    case MEAN_AXIS:
      return x.mean({s.axis}, true).expand({4, 4});
    case PERMUTE:
      return x.permute({1, 0});
    case FLIP:
      return x.flip({s.axis});
    case SHIFT:
      return x.pad({{1, 0}, {0, 0}}).shrink({{0, 4}, {0, 4}});  // rows down one, zeros in
    case SHUFFLE:
      return x.reshape({2, 8}).permute({1, 0}).reshape({4, 4});
    case CAT:
      return x.shrink({{0, 2}, {0, 4}}).cat({y.shrink({{2, 4}, {0, 4}})}, 0);
    case KINDS:
      break;
  }
  throw std::logic_error("fuzz_graph: no such step");
}

std::vector<float> run(const std::vector<Step>& steps, const std::vector<float>& input,
                       const std::string& dev) {
  std::vector<Tensor> nodes{Tensor(input, {4, 4}, {.device = dev})};
  nodes.reserve(steps.size() + 1);
  for (const Step& s : steps) {
    nodes.push_back(build_step(s, nodes));
    if (s.realize) nodes.back().realize();
  }
  return nodes.back().to_vector<float>();
}

}  // namespace

TEST_CASE("fuzz: random deep graphs with shared subexpressions agree with CPU on every device",
          "[fuzz_graph]") {
  fuzz::Rng rng(fuzz::seed(38));
  // (depth, percent of binary ops sharing a node, fusing kinds only, devices): graphs up to 10^4
  // deep that fuse into long kernels, and graphs where most nodes are shared, so that most are
  // kernels of their own. Each kernel that differs compiles (0.1 to 0.5 s with CLANG's compiler and
  // PoCL, less in-process with LLVM): the deepest graph runs on LLVM, the most varied are short.
  struct Case {
    std::size_t depth;
    int share;
    bool fusing;
    std::vector<std::string> devices;
  };
  std::vector<Case> cases = {{10000, 1, true, {"LLVM"}},
                             {3000, 1, true, {"CLANG"}},
                             {500, 30, false, {"LLVM"}},
                             {100, 30, false, {"CLANG", "LLVM", "OPENCL"}}};
  long rounds = fuzz::inputs(1);
  for (long r = 0; r < rounds; ++r)
    for (const Case& c : cases) {
      std::vector<float> input(16);
      for (float& v : input) v = static_cast<float>(rng.in(-1000, 1000)) / 1000.f;
      std::vector<Step> steps = recipe(rng, c.depth, c.share, c.fusing);
      std::vector<float> want = run(steps, input, "CPU");
      for (const std::string& dev : c.devices) {
        try {
          Device::get(dev);
        } catch (const std::exception& e) {
          WARN(dev << " is not available, skipped: " << e.what());
          continue;
        }
        INFO("device " << dev << ", depth " << c.depth << ", round " << r << ", seed " << fuzz::seed(38));
        std::vector<float> got = run(steps, input, dev);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("element " << i << ": " << got[i] << " vs CPU's " << want[i]);
          REQUIRE(std::abs(got[i] - want[i]) <= 1e-4f);
        }
      }
    }
}
