// fx::TensorMap (fixed/tensor_map.hpp): a view of user memory that copies nothing. Its expression
// reads the user's buffer and assigning to it writes there (addresses checked), from a pointer, a
// std::span of static extent and a Tensor; results equal a Tensor's; a const map only reads; a
// loss over mapped inputs differentiates as over tensors.
#include <catch2/catch.hpp>

#include <array>
#include <random>
#include <span>
#include <type_traits>

#include "fixed_check.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/fixed/tensor_map.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::test::random_tensor;

TEST_CASE("fixed map: a TensorMap reads and writes user memory in place", "[fixed][map]") {
  std::mt19937 rng(1);
  auto a = random_tensor<float, 3, 4>(rng);
  auto b = random_tensor<float, 4, 2>(rng);
  alignas(64) std::array<float, 12> user{};
  std::copy(a.begin(), a.end(), user.begin());
  fx::TensorMap<float, 3, 4> m(user.data());
  REQUIRE(m.data() == user.data());
  REQUIRE(m.expr().op.data == user.data());  // the leaf points at the user's buffer: nothing copied

  std::array<float, 6> out{};
  fx::TensorMap<float, 3, 2> o(out.data());
  o = fx::matmul(m, b) + 1.f;  // evaluated straight into the user's memory
  fx::Tensor<float, 3, 2> want = fx::matmul(a, b) + 1.f;
  REQUIRE(o.data() == out.data());
  for (index_t i = 0; i < 6; ++i) REQUIRE(out[std::size_t(i)] == want[i]);

  m *= 2.f;  // in place, through the map
  for (index_t i = 0; i < 12; ++i) REQUIRE(user[std::size_t(i)] == 2 * a[i]);
  m = m.transpose().transpose() - a;  // reads its own memory while writing it: as a Tensor would
  for (index_t i = 0; i < 12; ++i) REQUIRE(user[std::size_t(i)] == Approx(a[i]));

  std::span<float, 12> s(user);
  fx::TensorMap<float, 3, 4> from_span = s;
  REQUIRE(from_span.data() == user.data());
  fx::TensorMap<float, 3, 4> of_tensor = a;
  REQUIRE(of_tensor.data() == a.data());
  fx::TensorMap<const float, 3, 4> ro(std::as_const(a));
  static_assert(!std::is_assignable_v<fx::TensorMap<const float, 3, 4>&, fx::Tensor<float, 3, 4>>);
  REQUIRE(fx::eval(ro.sum())[0] == Approx(fx::eval(a.sum())[0]));
}

TEST_CASE("fixed map: fx::grad of a loss over mapped inputs writes gradients into user memory",
          "[fixed][map]") {
  std::mt19937 rng(2);
  auto w = random_tensor<double, 3, 3>(rng);
  std::array<double, 6> xs{1, -2, 3, 0.5, 4, -1};
  std::array<double, 9> gbuf{};
  fx::TensorMap<double, 2, 3> x(xs.data());
  fx::Tensor<double, 3, 3> gw;
  fx::grad_into(std::tie(gw), fx::matmul(x, w).square().sum(), w);
  fx::TensorMap<double, 3, 3> g(gbuf.data());
  g = gw;
  fx::Tensor<double, 2, 3> xt = x;
  fx::Tensor<double, 3, 3> want = fx::matmul(xt.transpose(), 2.0 * fx::matmul(xt, w));
  for (index_t i = 0; i < 9; ++i) REQUIRE(gbuf[std::size_t(i)] == Approx(want[i]));
}
