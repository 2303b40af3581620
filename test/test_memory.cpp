// Nothing leaks: across many training steps the number of live LazyBuffers and RawBuffers stays
// flat (graphs are freed after backward and realize, optimizer state is replaced, not chained).
#include <metagrad/metagrad.hpp>

#include "gradcheck.hpp"

using namespace metagrad;

namespace {
struct Mlp {
  nn::Linear l1{8, 16}, l2{16, 3};
  Tensor operator()(const Tensor& x) const { return l2(l1(x).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};
}  // namespace

TEST_CASE("10,000 training steps keep the live buffer counts flat", "[memory]") {
  // On CLANG: its per-step cost is scheduling, not interpreting (5 s, not 75 s, for the same check).
  std::string saved = Device::DEFAULT;
  Device::DEFAULT = "CLANG";
  struct Restore {
    std::string d;
    ~Restore() { Device::DEFAULT = d; }
  } restore{saved};
  Tensor::manual_seed(7);
  Mlp model;
  nn::optim::SGD opt(nn::get_parameters(model), 0.05, 0.9);
  Tensor x = Tensor::randn({4, 8});
  Tensor y = Tensor(std::vector<std::int32_t>{0, 1, 2, 1}, {4});
  x.realize(), y.realize();
  Tensor::TrainingGuard training;
  auto step = [&] {
    Tensor loss = model(x).sparse_categorical_crossentropy(y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  float first = 0;
  for (int i = 0; i < 10; ++i) first = step();
  std::int64_t lazy = LazyBuffer::live_count, raw = RawBuffer::live_count;
  float last = first;
  for (int i = 10; i < 10000; ++i) last = step();
  INFO("LazyBuffers " << lazy << " -> " << LazyBuffer::live_count << ", RawBuffers " << raw << " -> "
                      << RawBuffer::live_count);
  REQUIRE(LazyBuffer::live_count == lazy);
  REQUIRE(RawBuffer::live_count == raw);
  REQUIRE(last < first * 0.1f);  // it did train
}
