// Arguments PyTorch accepts that were refused: negative pads in every padding mode (they crop),
// meshgrid of 0-d tensors, normalize with p = 0, p < 0 and -inf, unfold with windows of 0 elements,
// reshape with a free dimension; integer literals making integer tensors, nearest-exact
// interpolation, scatter's reduce, smoothed sparse cross-entropy, per-side pool padding, roll without
// dims, diag, 14-dimension shapes. Expectations are computed by hand from PyTorch's documented
// semantics (a pad's output element j reads input j - before, reflected, clamped or wrapped).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gradcheck.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;
using metagrad::test::check_gradients;
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

// ---- issue 64, item 3: literals, missing arguments, the dimension limit --------------------------

TEST_CASE("integer literals make int32 tensors, a floating one float32, as tinygrad's", "[creation]") {
  using V = std::vector<double>;
  CHECK(Tensor::arange(10).dtype() == dtypes::int32);
  CHECK(Tensor::arange(10).to_vector<double>() == V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor stepped = Tensor::arange(0, 10, 2);
  CHECK(stepped.dtype() == dtypes::int32);
  CHECK(stepped.to_vector<double>() == V{0, 2, 4, 6, 8});
  CHECK(Tensor::arange(std::int64_t{3}, 9u).dtype() == dtypes::int32);
  CHECK(Tensor::arange(10.0).dtype() == dtypes::float32);
  Tensor mixed = Tensor::arange(0, 2, 0.5);  // any floating argument
  CHECK(mixed.dtype() == dtypes::float32);
  CHECK(mixed.to_vector<double>() == V{0, 0.5, 1, 1.5});
  CHECK(Tensor::arange(0.0, 4, 2).dtype() == dtypes::float32);
  CHECK(Tensor::arange(4, {.dtype = dtypes::float64}).dtype() == dtypes::float64);  // a named dtype wins
  CHECK(Tensor::arange(1, 4, 1, {.dtype = dtypes::int64}).to_vector<double>() == V{1, 2, 3});

  Tensor four = Tensor::full({2, 3}, 4);
  CHECK(four.dtype() == dtypes::int32);
  CHECK(four.to_vector<double>() == V(6, 4));
  CHECK(Tensor::full({2}, 4.0).dtype() == dtypes::float32);
  CHECK(Tensor::full({2}, 4.5f).to_vector<double>() == V{4.5, 4.5});
  CHECK(Tensor::full({2}, true).dtype() == dtypes::bool_);
  CHECK(Tensor::full({2}, 4, {.dtype = dtypes::float16}).dtype() == dtypes::float16);

  // split of an arange keeps its dtype and values
  std::vector<Tensor> parts = Tensor::arange(10).split(4);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].dtype() == dtypes::int32);
  CHECK(parts[1].to_vector<double>() == V{4, 5, 6, 7});
  CHECK(parts[2].to_vector<double>() == V{8, 9});
}

TEST_CASE("pow: a floating exponent makes an integer tensor float32, an integral one keeps it", "[math]") {
  Tensor x = Tensor::arange(5);  // int32
  Tensor f = x.pow(2.5);
  CHECK(f.dtype() == dtypes::float32);
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) want.push_back(std::pow(static_cast<double>(i), 2.5));
  require_close(f.to_vector<double>(), want, 1e-5, 1e-6);
  CHECK(x.pow(2.0).dtype() == dtypes::float32);  // PyTorch: int ** 2.0 is float
  Tensor sq = x.pow(3);
  CHECK(sq.dtype() == dtypes::int32);
  CHECK(sq.to_vector<double>() == std::vector<double>{0, 1, 8, 27, 64});
  CHECK(pow(x, 2).dtype() == dtypes::int32);
  CHECK(pow(2, x).dtype() == dtypes::int32);
  CHECK(pow(2, x).to_vector<double>() == std::vector<double>{1, 2, 4, 8, 16});
  CHECK(pow(2.0, x).dtype() == dtypes::float32);
  CHECK(x.cast(dtypes::float64).pow(2).dtype() == dtypes::float64);  // floats keep theirs
}

TEST_CASE("interpolate: nearest-exact samples each output pixel's centre, as PyTorch's", "[processing]") {
  using V = std::vector<double>;
  Tensor up = Tensor(V{10, 11, 12}, {1, 1, 3});
  // centres (i + 0.5) * 3 / 5 = 0.3, 0.9, 1.5, 2.1, 2.7 (nearest reads 0, 0.6, 1.2, 1.8, 2.4)
  CHECK(up.interpolate({5}, "nearest-exact").to_vector<double>() == V{10, 10, 11, 12, 12});
  CHECK(up.interpolate({5}, "nearest").to_vector<double>() == V{10, 10, 11, 11, 12});
  Tensor down = Tensor(V{0, 1, 2, 3, 4}, {1, 1, 5});
  CHECK(down.interpolate({3}, "nearest-exact").to_vector<double>() == V{0, 2, 4});
  // 2-D, each axis on its own: rows 3 -> 5 take 0 0 1 2 2, columns 4 -> 3 take 0 2 3
  Tensor img = Tensor::arange(12.0).reshape({1, 1, 3, 4});
  CHECK(img.interpolate({5, 3}, "nearest-exact").to_vector<double>() ==
        V{0, 2, 3, 0, 2, 3, 4, 6, 7, 8, 10, 11, 8, 10, 11});
  CHECK_THROWS_WITH(img.interpolate({5, 3}, "nearest-exact", true), Catch::Contains("align_corners"));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return in[0].interpolate({5, 3}, "nearest-exact");
      },
      {test::random_tensor({1, 2, 3, 4}, 11)});
}

TEST_CASE("scatter with reduce \"add\" and \"multiply\", as PyTorch's", "[movement]") {
  Tensor x = Tensor::full({3, 4}, 2.0, {.dtype = dtypes::float64});
  Tensor index(std::vector<std::int64_t>{0, 1, 2, 0, 2, 0, 0, 1}, {2, 4});
  Tensor src(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  // out[index[i][j]][j] (op)= src[i][j], starting from x: computed by hand
  CHECK(x.scatter(0, index, src, "add").to_vector<double>() ==
        std::vector<double>{3, 8, 9, 6, 2, 4, 2, 10, 7, 2, 5, 2});
  CHECK(x.scatter(0, index, src, "multiply").to_vector<double>() ==
        std::vector<double>{2, 12, 14, 8, 2, 4, 2, 16, 10, 2, 6, 2});
  CHECK(x.scatter(0, index, 3.0, "add").to_vector<double>() ==
        std::vector<double>{5, 5, 5, 5, 2, 5, 2, 5, 5, 2, 5, 2});
  CHECK(x.scatter(0, index, 3.0, "multiply").to_vector<double>() ==
        std::vector<double>{6, 6, 6, 6, 2, 6, 2, 6, 6, 2, 6, 2});
  CHECK_THROWS_WITH(x.scatter(0, index, src, "sum"),
                    Catch::Contains("scatter") && Catch::Contains("\"add\""));
  check_gradients([&](const std::vector<Tensor>& in) { return in[0].scatter(0, index, in[1], "add"); },
                  {test::random_tensor({3, 4}, 12), test::random_tensor({2, 4}, 13)});
}

namespace {
// -( (1 - e) logp[y] + e mean_c logp[c] ) per row of logits (n, c), 0 where y is ignored: tinygrad's
// and PyTorch's label-smoothed cross-entropy, in float64.
std::vector<double> smoothed_ce(const std::vector<double>& x, const std::vector<std::int64_t>& y,
                                std::size_t c, double e, std::int64_t ignore) {
  std::vector<double> out;
  for (std::size_t r = 0; r < y.size(); ++r) {
    double m = -INFINITY, s = 0, mean = 0;
    for (std::size_t k = 0; k < c; ++k) m = std::max(m, x[r * c + k]);
    for (std::size_t k = 0; k < c; ++k) s += std::exp(x[r * c + k] - m);
    auto logp = [&](std::size_t k) { return x[r * c + k] - m - std::log(s); };
    for (std::size_t k = 0; k < c; ++k) mean += logp(k) / static_cast<double>(c);
    out.push_back(y[r] == ignore ? 0 : -((1 - e) * logp(static_cast<std::size_t>(y[r])) + e * mean));
  }
  return out;
}
}  // namespace

TEST_CASE("sparse_categorical_crossentropy: label_smoothing and reduction, as tinygrad's", "[loss]") {
  Tensor x = test::random_tensor({5, 3}, 14, -3, 3);
  std::vector<std::int64_t> labels{2, -1, 0, 1, 2};
  Tensor y(labels, {5});
  std::vector<double> want = smoothed_ce(x.to_vector<double>(), labels, 3, 0.2, -1);
  double sum = 0;
  for (double v : want) sum += v;
  require_close(x.sparse_categorical_crossentropy(y, -1, 0.2, "none").to_vector<double>(), want, 1e-12,
                1e-12);
  CHECK(x.sparse_categorical_crossentropy(y, -1, 0.2, "sum").item<double>() == Approx(sum).epsilon(1e-12));
  CHECK(x.sparse_categorical_crossentropy(y, -1, 0.2).item<double>() == Approx(sum / 4).epsilon(1e-12));
  // no smoothing is the plain loss
  std::vector<double> plain = smoothed_ce(x.to_vector<double>(), labels, 3, 0, -1);
  require_close(x.sparse_categorical_crossentropy(y, -1, 0, "none").to_vector<double>(), plain, 1e-12, 1e-12);
  CHECK_THROWS_WITH(x.sparse_categorical_crossentropy(y, -1, 1.5), Catch::Contains("label_smoothing"));
  CHECK_THROWS_WITH(x.sparse_categorical_crossentropy(y, -1, 0, "avg"), Catch::Contains("reduction"));
  check_gradients(
      [&](const std::vector<Tensor>& in) { return in[0].sparse_categorical_crossentropy(y, -1, 0.3); }, {x});
}

TEST_CASE("max_pool2d with a padding per side (left, right, top, bottom), as tinygrad's", "[processing]") {
  Tensor x = Tensor::arange(16.0).reshape({1, 1, 4, 4});
  // one column of padding on the left, one row at the bottom: windows (pad, col 0), (cols 1, 2) by hand
  Tensor m = x.max_pool2d({2, 2}, {2, 2}, {1}, {1, 0, 0, 1});
  CHECK(m.shape() == Dims{1, 1, 2, 2});
  CHECK(m.to_vector<double>() == std::vector<double>{4, 6, 12, 14});
  // average over the padded window, its zeros counted (count_include_pad) or not
  Tensor a = x.avg_pool2d({2, 2}, {2, 2}, {1}, {1, 0, 0, 1});
  CHECK(a.to_vector<double>() ==
        std::vector<double>{(0 + 4) / 4.0, (1 + 2 + 5 + 6) / 4.0, (8 + 12) / 4.0, (9 + 10 + 13 + 14) / 4.0});
  Tensor b = x.avg_pool2d({2, 2}, {2, 2}, {1}, {1, 0, 0, 1}, false, false);
  CHECK(b.to_vector<double>() == std::vector<double>{2, 3.5, 10, 11.5});
  CHECK_THROWS_WITH(x.max_pool2d({2, 2}, {2, 2}, {1}, {1, 2, 0, 0}), Catch::Contains("half the kernel"));
  check_gradients(
      [](const std::vector<Tensor>& in) {
        return in[0].max_pool2d({3, 2}, {1, 2}, {1}, {0, 1, 1, 0});
      },
      {test::random_tensor({1, 2, 4, 5}, 15)});
}

TEST_CASE("roll without dims rolls the flattened tensor; diag", "[movement]") {
  using V = std::vector<double>;
  Tensor x = Tensor::arange(6).reshape({2, 3});
  CHECK(x.roll(1).shape() == Dims{2, 3});
  CHECK(x.roll(1).to_vector<double>() == V{5, 0, 1, 2, 3, 4});
  CHECK(x.roll(-2).to_vector<double>() == V{2, 3, 4, 5, 0, 1});
  CHECK(x.roll(std::vector<std::int64_t>{7}, {}).to_vector<double>() == V{5, 0, 1, 2, 3, 4});
  CHECK(Tensor::full({}, 3.0).roll(2).item<double>() == 3);

  Tensor v = Tensor(V{1, 2, 3}, {3});
  CHECK(v.diag().to_vector<double>() == V{1, 0, 0, 0, 2, 0, 0, 0, 3});
  CHECK(v.diag(1).shape() == Dims{4, 4});
  CHECK(v.diag(1).to_vector<double>() == V{0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0});
  Tensor below = v.diag(-2);  // (i + 2, i) holds v[i]
  REQUIRE(below.shape() == Dims{5, 5});
  std::vector<double> bv = below.to_vector<double>();
  for (std::size_t r = 0; r < 5; ++r)
    for (std::size_t c = 0; c < 5; ++c) CHECK(bv[r * 5 + c] == (r == c + 2 ? static_cast<double>(c + 1) : 0));
  CHECK(Tensor(V{}, {0}).diag(1).to_vector<double>() == V{0});
  Tensor mat = Tensor::arange(12).reshape({3, 4});
  CHECK(mat.diag().to_vector<double>() == V{0, 5, 10});
  CHECK(mat.diag(1).to_vector<double>() == V{1, 6, 11});
  CHECK(mat.diag(-1).to_vector<double>() == V{4, 9});
  CHECK_THROWS_WITH(Tensor::zeros({2, 2, 2}).diag(), Catch::Contains("diag of shape (2, 2, 2)"));
  check_gradients([](const std::vector<Tensor>& in) { return in[0].diag(-1); },
                  {test::random_tensor({3}, 16)});
}

TEST_CASE("shapes of 14 dimensions: indexing, arithmetic and reductions", "[movement]") {
  Tensor x = Tensor::arange(6.0).reshape({2, 3});
  std::vector<Index> idx(12, NewAxis);
  idx.push_back(Slice{});
  idx.push_back(Slice{1, {}});
  Tensor y = x[idx];  // 12 new axes before a (2, 2) slice
  REQUIRE(y.ndim() == 14);
  CHECK(y.shape()[13] == 2);
  CHECK((y * 2).to_vector<double>() == std::vector<double>{2, 4, 8, 10});
  // advanced indexing to 14 dimensions: a 13-d index tensor picks rows
  Dims ishape = Dims::filled(12, 1);
  ishape.push_back(2);
  Tensor rows = Tensor(std::vector<std::int64_t>{1, 0}, ishape);
  Tensor z = x[{rows}];
  REQUIRE(z.ndim() == 14);
  CHECK(z.to_vector<double>() == std::vector<double>{3, 4, 5, 0, 1, 2});
  // 2^14 elements over 14 axes: a permute and a reduction over alternate axes, against the flat sum
  std::vector<std::int64_t> twos(14, 2), order;
  for (std::int64_t i = 13; i >= 0; --i) order.push_back(i);
  Tensor big = Tensor::arange(16384.0, {.dtype = dtypes::float64}).reshape(twos).permute(order);
  CHECK(big.sum({0, 2, 4, 6, 8, 10, 12}).sum().item<double>() == 16384.0 * 16383.0 / 2);
  CHECK(big.contiguous().reshape({-1}).to_vector<double>()[1] == 8192);  // axis 0 is now the last
  std::vector<std::int64_t> too_many(kMaxDims + 1, 1);
  CHECK_THROWS_WITH(
      Tensor::ones({1}).reshape(too_many),
      Catch::Contains("reshape") && Catch::Contains(std::to_string(kMaxDims + 1) + " dimensions"));
}
