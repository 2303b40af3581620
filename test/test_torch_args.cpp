// Arguments PyTorch accepts that were refused: negative pads in every padding mode (they crop),
// meshgrid of 0-d tensors, normalize with p = 0, p < 0 and -inf, unfold with windows of 0 elements,
// reshape with a free dimension. Expectations are computed by hand from PyTorch's documented
// semantics (a pad's output element j reads input j - before, reflected, clamped or wrapped).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;
using metagrad::test::require_close;

namespace {

Tensor row(std::vector<double> v) {
  auto n = static_cast<std::int64_t>(v.size());
  return Tensor(std::move(v), {1, n});
}

}  // namespace

TEST_CASE("pad: negative pads crop in every mode, as PyTorch's", "[movement]") {
  Tensor x = row({0, 1, 2, 3});
  auto pad = [&](std::int64_t b, std::int64_t e, const char* mode) {
    return x.pad({{0, 0}, {b, e}}, mode).to_vector<double>();
  };
  CHECK(pad(2, -1, "reflect") == std::vector<double>{2, 1, 0, 1, 2});
  CHECK(pad(3, -2, "reflect") == std::vector<double>{3, 2, 1, 0, 1});  // reflects what the crop removes
  CHECK(pad(-1, 2, "reflect") == std::vector<double>{1, 2, 3, 2, 1});
  CHECK(pad(-1, 2, "replicate") == std::vector<double>{1, 2, 3, 3, 3});
  CHECK(pad(2, -3, "replicate") == std::vector<double>{0, 0, 0});
  CHECK(pad(1, -2, "circular") == std::vector<double>{3, 0, 1});
  CHECK(pad(-3, 2, "circular") == std::vector<double>{3, 0, 1});
  CHECK(pad(-1, 1, "constant") == std::vector<double>{1, 2, 3, 0});
  CHECK(pad(-2, -2, "reflect").empty());
  CHECK(x.pad({{0, 0}, {-2, -2}}, "reflect").shape() == Dims{1, 0});
  CHECK_THROWS_WITH(pad(-3, -2, "replicate"), Catch::Contains("cropped below 0"));
  CHECK_THROWS_WITH(pad(4, -1, "reflect"), Catch::Contains("reflect needs each pad below the size 4"));
  // Each output element's gradient goes to the input element it reads: [x2, x1, x0, x1, x2].
  Tensor w = row({0, 1, 2, 3}).requires_grad_();
  w.pad({{0, 0}, {2, -1}}, "reflect").sum().backward();
  CHECK(w.grad->to_vector<double>() == std::vector<double>{1, 2, 2, 0});
}

TEST_CASE("meshgrid: a 0-d tensor is a 1-D tensor of one element, as PyTorch's", "[movement]") {
  Tensor s = Tensor::full({}, 5.0), v = Tensor(std::vector<double>{1, 2, 3}, {3});
  std::vector<Tensor> g = Tensor::meshgrid({s, v});
  REQUIRE(g.size() == 2);
  CHECK(g[0].shape() == Dims{1, 3});
  CHECK(g[0].to_vector<double>() == std::vector<double>{5, 5, 5});
  CHECK(g[1].to_vector<double>() == std::vector<double>{1, 2, 3});
  std::vector<Tensor> xy = Tensor::meshgrid({v, s}, "xy");
  CHECK(xy[0].shape() == Dims{1, 3});
  CHECK_THROWS_WITH(Tensor::meshgrid({Tensor::zeros({2, 2})}), Catch::Contains("0-D or 1-D"));
}

TEST_CASE("normalize: p = 0, negative p and -inf are PyTorch's vector norms", "[processing]") {
  // p = 0 counts the non-zero elements; p < 0 is (sum |x|^p)^(1/p); -inf the smallest |x|.
  require_close(row({3, 0, -4}).normalize(0).to_vector<double>(), {1.5, 0, -2});
  require_close(row({2, -4}).normalize(-1).to_vector<double>(), {1.5, -3});
  require_close(row({2, -4}).normalize(-2).to_vector<double>(), {std::sqrt(5.0) / 2, -std::sqrt(5.0)}, 1e-12);
  require_close(row({2, -4}).normalize(-std::numeric_limits<double>::infinity()).to_vector<double>(),
                {1, -2});
  // A zero makes a negative-p norm 0, clamped at eps.
  require_close(row({0, 2}).normalize(-1, 1, 0.5).to_vector<double>(), {0, 4});
  // p = 0's norm passes no gradient: d/dx of x / count is 1 / count.
  Tensor w = row({3, 0, -4}).requires_grad_();
  w.normalize(0).sum().backward();
  require_close(w.grad->to_vector<double>(), {0.5, 0.5, 0.5});
  CHECK_THROWS_WITH(row({1, 2}).normalize(std::nan("")), Catch::Contains("p is NaN"));
}

TEST_CASE("unfold with windows of 0 elements; reshape with a free dimension", "[processing]") {
  Tensor x = Tensor::arange(8).reshape({2, 4});
  CHECK(x.unfold(1, 0, 1).shape() == Dims{2, 5, 0});  // (4 - 0) / 1 + 1 windows
  CHECK(x.unfold(1, 0, 3).shape() == Dims{2, 2, 0});
  CHECK(x.unfold(0, 0, 1).shape() == Dims{3, 4, 0});
  CHECK_THROWS_WITH(x.unfold(1, -1, 1), Catch::Contains("size must be in [0, the dim's size]"));
  CHECK(x.reshape({-1}).shape() == Dims{8});
  CHECK(x.reshape({4, -1}).shape() == Dims{4, 2});
  CHECK(x.reshape({-1, 2, 2}).to_vector<double>() == x.to_vector<double>());
}
