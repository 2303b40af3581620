// Issue 38 item 9: graphs far deeper than the stack. Realizing, differentiating and dropping a lazy
// graph walk it without recursion; a kernel fuses at most a bounded depth of ops (deeper chains are
// realized in pieces), so code generation and the compilers see bounded trees.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "device_scope.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;

namespace {

// y = x + 1 + 1 + ... (n times), realized only at the end.
Tensor chain(const Tensor& x, std::int64_t n) {
  Tensor y = x;
  for (std::int64_t i = 0; i < n; ++i) y = y + 1;
  return y;
}

}  // namespace

TEST_CASE("deep graphs: a chain 10^5 ops deep realizes on every device", "[reliability][deep]") {
  for (const char* dev : {"CPU", "CLANG", "LLVM", "OPENCL"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    INFO(dev);
    // (OPENCL on PoCL: 10^4, each of its kernels being slow to build)
    std::int64_t n = std::string(dev) == "OPENCL" ? 10000 : 100000;
    Tensor x = Tensor({0.5f, -2.f, 3.f});
    std::vector<float> v = chain(x, n).to_vector<float>();
    CHECK(v == std::vector<float>{0.5f + n, -2.f + n, 3.f + n});
  }
}

TEST_CASE("deep graphs: a chain 10^6 ops deep realizes, and is dropped unrealized", "[reliability][deep]") {
  Tensor x = Tensor({1.f, 2.f});
  {
    Tensor dropped = chain(x, 1000000);  // ~LazyBuffer recursed once per op
  }
  test::DeviceScope scope("CLANG");
  if (!scope.ok) return;
  Tensor y = chain(Tensor({1.f, 2.f}), 1000000);
  CHECK(y.to_vector<float>() == std::vector<float>{1000001.f, 1000002.f});
}

TEST_CASE("deep graphs: backward through 10^5 ops, and its graph dropped", "[reliability][deep]") {
  for (const char* dev : {"CPU", "CLANG"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    INFO(dev);
    constexpr std::int64_t n = 100000;
    Tensor x = Tensor({1.f, 2.f}, TensorOptions{.requires_grad = true});
    Tensor y = x;
    for (std::int64_t i = 0; i < n; ++i) y = y + x;  // x's gradient sums n + 1 ones, a chain as deep
    {
      Tensor dropped = y.sum();  // a Function graph n deep, never differentiated
    }
    y.sum().backward();
    CHECK(x.grad->to_vector<float>() == std::vector<float>{n + 1.f, n + 1.f});
    CHECK(y.to_vector<float>() == std::vector<float>{n + 1.f, 2.f * (n + 1)});
  }
}

TEST_CASE("deep graphs: shared subexpressions 10^4 deep", "[reliability][deep]") {
  // Each step reads the previous twice: a walk that does not remember what it visited takes 2^n steps.
  for (const char* dev : {"CPU", "CLANG"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    INFO(dev);
    Tensor y = Tensor({1.f, -1.f});
    for (int i = 0; i < 10000; ++i) y = (y + y) * 0.5f;
    CHECK(y.to_vector<float>() == std::vector<float>{1.f, -1.f});
  }
}

// Issue 38 item 11: a kernel's buffers past 32 (the host devices' direct arguments) go as one array.
TEST_CASE("many inputs: cat and stack of 100 tensors, one buffer through 40 views", "[reliability][wide]") {
  constexpr int n = 100;
  std::vector<Tensor> parts;
  std::vector<float> want_cat, want_sum(8, 0.f);
  for (int i = 0; i < n; ++i) {
    std::vector<float> v{float(i), -float(i), 0.5f * i};
    want_cat.insert(want_cat.end(), v.begin(), v.end());
    parts.push_back(Tensor(v, {3}));
  }
  std::vector<float> base(47);
  for (int i = 0; i < 47; ++i) base[i] = float(i * i % 13);
  for (int j = 0; j < 40; ++j)
    for (int i = 0; i < 8; ++i) want_sum[i] += base[i + j];
  for (const char* dev : {"CPU", "CLANG", "LLVM", "OPENCL"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    INFO(dev);
    std::vector<Tensor> on;
    for (const Tensor& p : parts) on.push_back(p.to(dev).realize());
    Tensor first = on[0];
    CHECK(first.cat({on.begin() + 1, on.end()}).to_vector<float>() == want_cat);
    std::vector<float> st = Tensor::stack(on, 1).to_vector<float>();
    REQUIRE(st.size() == 3 * n);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) CHECK(st[k * n + i] == want_cat[i * 3 + k]);
    // one realized buffer read through 40 shrinks, summed in one kernel
    Tensor x = Tensor(base, {47}).to(dev).realize();
    Tensor s = x.shrink({{0, 8}});
    for (int j = 1; j < 40; ++j) s = s + x.shrink({{j, j + 8}});
    CHECK(s.to_vector<float>() == want_sum);
  }
}
