// Issue 13, item 9: the rest of tinygrad's op surface. conv2d and conv_transpose2d over any number
// of spatial axes (conv1d, conv3d) with per-side padding, pooling with dilation, a reverse power
// and == / != as elementwise comparisons: against direct loops in double (random cases), their
// gradients against finite differences, and their errors. Tagged [processing]: it runs on every
// device against the same loops.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include "device_scope.hpp"
#include "gradcheck.hpp"
#include "kernel_sources.hpp"
#include "reference.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::for_each_index;
using metagrad::test::random_tensor;
using metagrad::test::require_close;

namespace {
using Vd = std::vector<double>;
using I = std::int64_t;
using V = std::vector<I>;

Vd vals(const Tensor& t) { return t.to_vector<double>(); }
V dims_of(const Tensor& t) { return V(t.shape().begin(), t.shape().end()); }

// One convolution's geometry over n spatial axes, each list in spatial order (first axis first).
struct Geometry {
  I groups = 1;
  V stride, dilation, before, after, out_pad;
};

// The per-side padding list conv2d takes: last axis first, (before, after) per axis.
V torch_pads(const Geometry& g) {
  V p;
  for (std::size_t j = g.before.size(); j-- > 0;) p.insert(p.end(), {g.before[j], g.after[j]});
  return p;
}

// Direct cross-correlation: x (N, C, S...), w (CO, C/groups, K...).
std::pair<Vd, V> ref_conv(const Vd& x, const V& xs, const Vd& w, const V& ws, const Geometry& g) {
  std::size_t n = xs.size() - 2;
  V os{xs[0], ws[0]};
  for (std::size_t j = 0; j < n; ++j)
    os.push_back((xs[2 + j] + g.before[j] + g.after[j] - g.dilation[j] * (ws[2 + j] - 1) - 1) / g.stride[j] +
                 1);
  V inner(ws.begin() + 1, ws.end());  // (cin/groups, K...)
  Vd out;
  for_each_index(os, [&](const V& o) {
    I group = o[1] / (ws[0] / g.groups);
    double acc = 0;
    for_each_index(inner, [&](const V& k) {
      V xi{o[0], group * ws[1] + k[0]};
      for (std::size_t j = 0; j < n; ++j) {
        I at = o[2 + j] * g.stride[j] - g.before[j] + k[1 + j] * g.dilation[j];
        if (at < 0 || at >= xs[2 + j]) return;
        xi.push_back(at);
      }
      V wi{o[1]};
      wi.insert(wi.end(), k.begin(), k.end());
      acc += x[static_cast<std::size_t>(test::offset(xs, xi))] *
             w[static_cast<std::size_t>(test::offset(ws, wi))];
    });
    out.push_back(acc);
  });
  return {out, os};
}

// Transposed convolution as the scatter it is: w (C, CO/groups, K...).
std::pair<Vd, V> ref_conv_transpose(const Vd& x, const V& xs, const Vd& w, const V& ws, const Geometry& g) {
  std::size_t n = xs.size() - 2;
  I cg = xs[1] / g.groups, ocg = ws[1];
  V os{xs[0], ocg * g.groups};
  for (std::size_t j = 0; j < n; ++j)
    os.push_back((xs[2 + j] - 1) * g.stride[j] - g.before[j] - g.after[j] + g.dilation[j] * (ws[2 + j] - 1) +
                 g.out_pad[j] + 1);
  Vd out(static_cast<std::size_t>(test::numel_of(os)), 0.0);
  V inner(ws.begin() + 1, ws.end());  // (CO/groups, K...)
  for_each_index(xs, [&](const V& xi) {
    for_each_index(inner, [&](const V& k) {
      V oi{xi[0], xi[1] / cg * ocg + k[0]};
      for (std::size_t j = 0; j < n; ++j) {
        I at = xi[2 + j] * g.stride[j] - g.before[j] + k[1 + j] * g.dilation[j];
        if (at < 0 || at >= os[2 + j]) return;
        oi.push_back(at);
      }
      V wi{xi[1]};
      wi.insert(wi.end(), k.begin(), k.end());
      out[static_cast<std::size_t>(test::offset(os, oi))] +=
          x[static_cast<std::size_t>(test::offset(xs, xi))] *
          w[static_cast<std::size_t>(test::offset(ws, wi))];
    });
  });
  return {out, os};
}

// Pooling over the last two axes with dilation; max if `is_max`, else mean.
std::pair<Vd, V> ref_pool(const Vd& x, const V& xs, const V& k, const V& s, const V& d, bool is_max) {
  std::size_t r = xs.size();
  V os = xs;
  for (std::size_t j = 0; j < 2; ++j) os[r - 2 + j] = (xs[r - 2 + j] - d[j] * (k[j] - 1) - 1) / s[j] + 1;
  Vd out;
  for_each_index(os, [&](const V& o) {
    double acc = is_max ? -test::kInf : 0;
    for_each_index(k, [&](const V& kk) {
      V xi = o;
      for (std::size_t j = 0; j < 2; ++j) xi[r - 2 + j] = o[r - 2 + j] * s[j] + kk[j] * d[j];
      double v = x[static_cast<std::size_t>(test::offset(xs, xi))];
      acc = is_max ? std::max(acc, v) : acc + v;
    });
    out.push_back(is_max ? acc : acc / static_cast<double>(k[0] * k[1]));
  });
  return {out, os};
}

// A random geometry for n spatial axes whose output is at least 1 along every axis.
struct ConvCase {
  V xs, ws;
  Geometry g;
};
ConvCase random_conv(std::mt19937& gen, std::size_t n, bool transpose) {
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  ConvCase c;
  c.g.groups = pick(1, 2);
  I cin = c.g.groups * pick(1, 2), cout = c.g.groups * pick(1, 2);
  c.xs = {pick(1, 2), cin};
  c.ws = transpose ? V{cin, cout / c.g.groups} : V{cout, cin / c.g.groups};
  for (std::size_t j = 0; j < n; ++j) {
    I k = pick(1, 3), d = pick(1, 2), s = pick(1, 3);
    c.ws.push_back(k);
    c.g.stride.push_back(s), c.g.dilation.push_back(d);
    if (transpose) {
      I in = pick(1, 4);
      c.xs.push_back(in);
      I span = (in - 1) * s + d * (k - 1) + 1;  // the output before padding is removed
      I b = pick(0, std::min<I>(2, span - 1));
      c.g.before.push_back(b), c.g.after.push_back(pick(0, std::min<I>(2, span - 1 - b)));
      c.g.out_pad.push_back(pick(0, std::max(s, d) - 1));
    } else {
      I b = pick(0, 2), a = pick(0, 2);
      c.g.before.push_back(b), c.g.after.push_back(a);
      c.xs.push_back(std::max<I>(1, d * (k - 1) + 1 - b - a) + pick(0, 4));
    }
  }
  return c;
}

std::string describe(const ConvCase& c) {
  return detail::cat("x ", to_string(Dims(c.xs)), " w ", to_string(Dims(c.ws)), " groups ",
                     std::to_string(c.g.groups), " stride ", to_string(Dims(c.g.stride)), " dilation ",
                     to_string(Dims(c.g.dilation)), " pads ", to_string(Dims(torch_pads(c.g))), " out_pad ",
                     to_string(Dims(c.g.out_pad)));
}
}  // namespace

TEST_CASE("conv2d over 1, 2 and 3 spatial axes with per-side padding matches a direct loop", "[processing]") {
  std::mt19937 gen(13);
  std::uint64_t seed = 5000;
  test::Sampler sample;
  for (std::size_t n : {1u, 2u, 3u})
    for (int trial = 0; trial < (n == 3 ? 8 : 20); ++trial) {
      ConvCase c = random_conv(gen, n, false);
      if (!sample()) continue;
      INFO(describe(c));
      Tensor x = random_tensor(Dims(c.xs), seed++), w = random_tensor(Dims(c.ws), seed++),
             b = random_tensor({c.ws[0]}, seed++);
      auto [want, os] = ref_conv(vals(x), c.xs, vals(w), c.ws, c.g);
      Tensor out = x.conv2d(w, {}, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g));
      REQUIRE(dims_of(out) == os);
      require_close(vals(out), want, 1e-12, 1e-12);
      // with a bias; and symmetric padding given once per axis gives the same as per side
      Vd bv = vals(b), wb = want;
      I per_channel = test::numel_of(os) / (os[0] * os[1]);
      for (std::size_t i = 0; i < wb.size(); ++i)
        wb[i] += bv[static_cast<std::size_t>((static_cast<I>(i) / per_channel) % os[1])];
      require_close(vals(x.conv2d(w, b, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g))), wb, 1e-12,
                    1e-12);
      Geometry sym = c.g;
      sym.after = sym.before;
      bool fits = true;
      for (std::size_t j = 0; j < n; ++j)
        fits = fits && c.xs[2 + j] + 2 * sym.before[j] >= sym.dilation[j] * (c.ws[2 + j] - 1) + 1;
      if (!fits) {
        REQUIRE_THROWS_WITH(x.conv2d(w, {}, c.g.groups, c.g.stride, c.g.dilation, c.g.before),
                            Contains("smaller than the kernel"));
        continue;
      }
      auto [want_sym, os_sym] = ref_conv(vals(x), c.xs, vals(w), c.ws, sym);
      Tensor out_sym = x.conv2d(w, {}, c.g.groups, c.g.stride, c.g.dilation, c.g.before);
      REQUIRE(dims_of(out_sym) == os_sym);
      require_close(vals(out_sym), want_sym, 1e-12, 1e-12);
    }
}

TEST_CASE("conv_transpose2d over 1, 2 and 3 spatial axes with per-side padding matches a scatter loop",
          "[processing]") {
  std::mt19937 gen(14);
  std::uint64_t seed = 6000;
  test::Sampler sample;
  for (std::size_t n : {1u, 2u, 3u})
    for (int trial = 0; trial < (n == 3 ? 8 : 20); ++trial) {
      ConvCase c = random_conv(gen, n, true);
      if (!sample()) continue;
      INFO(describe(c));
      Tensor x = random_tensor(Dims(c.xs), seed++), w = random_tensor(Dims(c.ws), seed++);
      auto [want, os] = ref_conv_transpose(vals(x), c.xs, vals(w), c.ws, c.g);
      Tensor out =
          x.conv_transpose2d(w, {}, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g), c.g.out_pad);
      REQUIRE(dims_of(out) == os);
      require_close(vals(out), want, 1e-12, 1e-12);
    }
}

TEST_CASE("conv1d and conv3d in float32 match float64", "[processing]") {
  for (const auto& [xs, ws] :
       std::vector<std::pair<Dims, Dims>>{{{2, 3, 9}, {4, 3, 3}}, {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}}}) {
    Tensor x = random_tensor(xs, 7000), w = random_tensor(ws, 7001);
    Vd want = vals(x.conv2d(w, {}, 1, {1}, {1}, {1}));
    Tensor out = x.cast(dtypes::float32).conv2d(w.cast(dtypes::float32), {}, 1, {1}, {1}, {1});
    REQUIRE(out.dtype() == dtypes::float32);
    require_close(vals(out), want, 1e-4, 1e-4);
  }
}

TEST_CASE("pooling with dilation matches a direct loop", "[processing]") {
  std::mt19937 gen(15);
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  std::uint64_t seed = 8000;
  test::Sampler sample;
  for (int trial = 0; trial < 30; ++trial) {
    V k{pick(1, 3), pick(1, 3)}, s{pick(1, 3), pick(1, 3)}, d{pick(1, 3), pick(1, 3)};
    V xs{pick(1, 2), d[0] * (k[0] - 1) + 1 + pick(0, 4), d[1] * (k[1] - 1) + 1 + pick(0, 4)};
    if (trial % 3 == 0) xs.insert(xs.begin(), 2);
    Tensor x = random_tensor(Dims(xs), seed++);
    if (!sample()) continue;
    INFO("x " << to_string(Dims(xs)) << " k " << to_string(Dims(k)) << " s " << to_string(Dims(s)) << " d "
              << to_string(Dims(d)));
    for (bool is_max : {false, true}) {
      auto [want, os] = ref_pool(vals(x), xs, k, s, d, is_max);
      Tensor out = is_max ? x.max_pool2d(k, s, d) : x.avg_pool2d(k, s, d);
      REQUIRE(dims_of(out) == os);
      require_close(vals(out), want, 1e-12, 1e-12);
    }
  }
  // one dilation for both axes; the stride still defaults to the kernel
  Tensor x = random_tensor({1, 1, 7, 7}, 8100);
  auto [want, os] = ref_pool(vals(x), {1, 1, 7, 7}, {2, 2}, {2, 2}, {3, 3}, true);
  REQUIRE(dims_of(x.max_pool2d({2}, {}, {3})) == os);
  require_close(vals(x.max_pool2d({2}, {}, {3})), want, 1e-12, 1e-12);
}

TEST_CASE("gradients of conv1d, conv3d, per-side padding, transposes and dilated pooling", "[processing]") {
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].conv2d(t[1], t[2], 1, {2}, {1}, {1, 2});
      },
      {random_tensor({2, 2, 7}, 8200), random_tensor({3, 2, 3}, 8201), random_tensor({3}, 8202)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].conv2d(t[1], {}, 2, {1, 2, 1}, {1}, {1, 0, 0, 1, 2, 0});
      },
      {random_tensor({1, 2, 3, 4, 3}, 8203), random_tensor({2, 1, 2, 2, 2}, 8204)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].conv_transpose2d(t[1], {}, 1, {2}, {1}, {1, 0}, {1});
      },
      {random_tensor({1, 2, 4}, 8205), random_tensor({2, 3, 3}, 8206)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].conv_transpose2d(t[1], t[2], 1, {1, 2, 1}, {2, 1, 1}, {0, 1, 1, 0, 0, 0});
      },
      {random_tensor({1, 1, 2, 3, 2}, 8207), random_tensor({1, 2, 2, 2, 2}, 8208), random_tensor({2}, 8209)});
  Tensor x = random_tensor({1, 2, 6, 6}, 8210);
  check_gradients([](const std::vector<Tensor>& t) { return t[0].max_pool2d({2, 2}, {1, 2}, {2, 1}); }, {x});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].avg_pool2d({3, 2}, {2, 1}, {2, 3}); }, {x});
}

TEST_CASE("rpow and pow(scalar, tensor): base ** x", "[processing]") {
  Tensor x = random_tensor({3, 5}, 8300, -3, 3);
  Vd xv = vals(x);
  for (double base : {2.0, 0.5, 3.0, 10.0}) {
    Vd want;
    for (double v : xv) want.push_back(std::pow(base, v));
    require_close(vals(x.rpow(base)), want, 1e-12, 1e-12);
    require_close(vals(pow(base, x)), want, 1e-12, 1e-12);
  }
  // integer tensors: an integral base keeps the integer dtype, a floating one gives float32
  Tensor e = Tensor(std::vector<int>{0, 1, 2, 5, 10}, {5});
  REQUIRE(e.rpow(3).dtype() == dtypes::int32);
  REQUIRE(e.rpow(3).to_vector<int>() == std::vector<int>{1, 3, 9, 243, 59049});
  REQUIRE(pow(2.5, e).dtype() == dtypes::float32);
  require_close(vals(pow(2.5, e)), {1, 2.5, 6.25, std::pow(2.5, 5), std::pow(2.5, 10)}, 1e-3, 1e-6);
  require_close(vals(pow(x, 2.0)), vals(x * x), 1e-12, 1e-12);
  require_close(vals(pow(x, x.abs())), vals(x.pow(x.abs())), 0, 0);
  // the gradient: d(b^x)/dx = b^x ln b
  check_gradients([](const std::vector<Tensor>& t) { return t[0].rpow(2.0) + pow(3.0, t[0]); },
                  {random_tensor({4}, 8301)});
}

TEST_CASE("== and != compare elementwise into bool tensors", "[processing]") {
  Tensor a = Tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}),
         b = Tensor(std::vector<float>{1, 0, 3, 0, 5, 0}, {2, 3});
  Tensor eq = a == b, ne = a != b;
  REQUIRE(eq.dtype() == dtypes::bool_);
  REQUIRE(eq.to_vector<int>() == std::vector<int>{1, 0, 1, 0, 1, 0});
  REQUIRE(ne.to_vector<int>() == std::vector<int>{0, 1, 0, 1, 0, 1});
  // scalars on either side, broadcasting, NaN unequal to itself
  REQUIRE((a == 3).to_vector<int>() == std::vector<int>{0, 0, 1, 0, 0, 0});
  REQUIRE((2.0 != a).to_vector<int>() == std::vector<int>{1, 0, 1, 1, 1, 1});
  Tensor row = Tensor(std::vector<float>{1, 2, 0}, {3});
  REQUIRE((a == row).to_vector<int>() == std::vector<int>{1, 1, 0, 0, 0, 0});
  Tensor n = Tensor(std::vector<float>{std::nanf(""), 1}, {2});
  REQUIRE((n == n).to_vector<int>() == std::vector<int>{0, 1});
  REQUIRE((n != n).to_vector<int>() == std::vector<int>{1, 0});
  // a result of == is a tensor, never a bool: `if (a == b)` does not compile
  STATIC_REQUIRE(std::is_same_v<decltype(a == b), Tensor>);
  STATIC_REQUIRE(!std::is_constructible_v<bool, decltype(a == b)>);
  REQUIRE_THROWS_WITH(a == Tensor::ones({4}), Contains("(2, 3)") && Contains("(4,)"));
}

TEST_CASE("conv and pooling errors name the op and the shapes", "[processing]") {
  Tensor x1 = Tensor::ones({2, 3, 9}), x3 = Tensor::ones({1, 2, 4, 4, 4});
  REQUIRE_THROWS_WITH(x1.conv2d(Tensor::ones({4, 3, 3, 3})),
                      Contains("conv2d: input (2, 3, 9), weight (4, 3, 3, 3)") && Contains("4-D"));
  REQUIRE_THROWS_WITH(
      x3.conv2d(Tensor::ones({2, 2, 5, 1, 1})),
      Contains("conv2d: input (1, 2, 4, 4, 4), weight (2, 2, 5, 1, 1)") && Contains("smaller"));
  REQUIRE_THROWS_WITH(x3.conv2d(Tensor::ones({2, 2, 1, 1, 1}), {}, 1, {1, 1}),
                      Contains("weight (2, 2, 1, 1, 1): stride (1, 1) needs 1 or 3 values"));
  REQUIRE_THROWS_WITH(x3.conv2d(Tensor::ones({2, 2, 1, 1, 1}), {}, 1, {1}, {1}, {1, 1, 1, 1}),
                      Contains("padding (1, 1, 1, 1) needs 1, 3 or 6 values"));
  REQUIRE_THROWS_WITH(x1.conv2d(Tensor::ones({4, 3})), Contains("weight (4, 3)") && Contains("spatial"));
  REQUIRE_THROWS_WITH(x1.conv_transpose2d(Tensor::ones({3, 2, 2}), {}, 1, {1}, {1}, {-1}),
                      Contains("conv_transpose2d: input (2, 3, 9), weight (3, 2, 2): padding (-1,)"));
  REQUIRE_THROWS_WITH(x1.conv_transpose2d(Tensor::ones({3, 2, 2}), {}, 1, {1}, {1}, {5, 6}),
                      Contains("conv_transpose2d: input (2, 3, 9)") && Contains("leaves no output"));
  REQUIRE_THROWS_WITH(
      x3.conv_transpose2d(Tensor::ones({2, 1, 2, 2})),
      Contains("conv_transpose2d: input (1, 2, 4, 4, 4), weight (2, 1, 2, 2)") && Contains("4-D"));
  Tensor img = Tensor::ones({1, 1, 5, 5});
  REQUIRE_THROWS_WITH(img.max_pool2d({2, 2}, {1}, {0}),
                      Contains("max_pool2d: input (1, 1, 5, 5)") && Contains("dilation (0,)"));
  REQUIRE_THROWS_WITH(img.avg_pool2d({3, 3}, {1}, {3, 1}),
                      Contains("avg_pool2d: input (1, 1, 5, 5)") && Contains("dilation (3, 1)"));
  REQUIRE_THROWS_WITH(img.avg_pool2d({2}, {1}, {1, 2, 3}),
                      Contains("dilation (1, 2, 3) needs 1 or 2 values"));
}

namespace {
// A random float32 convolution for the GEMM path: batch 1-3, up to 3 groups of up to 5 input and 6
// output channels (a quarter depthwise: one channel a group), odd sizes, strides, dilations, pads.
ConvCase gemm_conv_case(std::mt19937& gen, std::size_t n) {
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  ConvCase c = random_conv(gen, n, false);
  const bool depthwise = pick(0, 3) == 0;
  c.g.groups = depthwise ? pick(2, 6) : pick(1, 3);
  const I cin = depthwise ? 1 : pick(1, 5), cout = depthwise ? 1 : pick(1, 6);
  c.xs[0] = pick(1, 3), c.xs[1] = c.g.groups * cin;
  c.ws[0] = c.g.groups * cout, c.ws[1] = cin;
  for (std::size_t j = 0; j < n; ++j) c.xs[2 + j] += pick(0, n == 3 ? 2 : 9);
  return c;
}

Tensor on(const Vd& v, const V& shape, const std::string& dev) {
  return Tensor(std::vector<float>(v.begin(), v.end()), Dims(shape), {.device = dev});
}

// Sets an environment variable for a scope, then restores it.
struct EnvScope {
  std::string name;
  std::optional<std::string> saved;
  EnvScope(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) saved = v;
    setenv(name.c_str(), value, 1);
  }
  ~EnvScope() { saved ? (void)setenv(name.c_str(), saved->c_str(), 1) : (void)unsetenv(name.c_str()); }
};

bool ran_gemm(const std::vector<std::string>& sources) {
  return std::any_of(sources.begin(), sources.end(),
                     [](const std::string& s) { return s.rfind("// gemm_", 0) == 0; });
}
}  // namespace

TEST_CASE("conv2d through the GEMM: forward against a float64 loop, gradients against CPU", "[gemm][conv]") {
  std::mt19937 gen(29);
  std::uint64_t seed = 9000;
  // The windows gathered whole first (the default at these sizes), then in the GEMM's packing: a
  // batch of 4 there, so that no kernel of the first pass is reused from the device's cache.
  for (const char* window : {"0", "1"})
    for (const char* dev : {"CLANG", "LLVM"}) {
      test::DeviceScope scope(dev);
      if (!scope.ok) continue;
      EnvScope env("METAGRAD_GEMM_WINDOW", window);
      for (std::size_t n : {1u, 2u, 3u})
        for (int trial = 0; trial < (n == 3 ? 3 : 6); ++trial) {
          ConvCase c = gemm_conv_case(gen, n);
          if (*window == '1') c.xs[0] = 4;
          INFO(dev << " window " << window << " " << describe(c));
          const Vd xv = test::random_values(test::numel_of(c.xs), seed++),
                   wv = test::random_values(test::numel_of(c.ws), seed++),
                   bv = test::random_values(c.ws[0], seed++);
          auto [want, os] = ref_conv(xv, c.xs, wv, c.ws, c.g);
          const Vd dyv = test::random_values(test::numel_of(os), seed++);
          const I terms = c.ws[1] * test::numel_of(V(c.ws.begin() + 2, c.ws.end()));
          // The forward through the GEMM wherever it is a product (two or more output channels a group,
          // two or more pixels, a sum of two or more terms); a depthwise conv is a rendered kernel.
          Tensor x = on(xv, c.xs, dev), w = on(wv, c.ws, dev);
          Tensor y = x.conv2d(w, {}, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g));
          const auto sources = test::kernel_sources(y);
          if (c.ws[0] / c.g.groups >= 2 && test::numel_of(V(os.begin() + 2, os.end())) >= 2 && terms >= 2)
            CHECK(ran_gemm(sources));
          for (const std::string& s : sources)
            if (*window == '0') CHECK(s.find("gathered in the packing") == std::string::npos);
          // (a depthwise conv whose windows do not overlap is a batch of matrix-vector products)
          bool overlap = false;
          for (std::size_t j = 0; j < n; ++j)
            overlap = overlap || c.ws[2 + j] > c.g.stride[j] || c.g.dilation[j] > 1;
          if (c.ws[0] == c.g.groups && c.ws[1] == 1 && c.g.groups > 1 && overlap)
            CHECK_FALSE(ran_gemm(sources));
          REQUIRE(dims_of(y) == os);
          require_close(vals(y), want, 1e-5 * static_cast<double>(terms), 1e-5);
          // Both gradients and the bias's, against the reference device's.
          auto grads = [&](const std::string& d) {
            Tensor xg = on(xv, c.xs, d).requires_grad_(), wg = on(wv, c.ws, d).requires_grad_(),
                   bg = on(bv, {c.ws[0]}, d).requires_grad_();
            (xg.conv2d(wg, bg, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g)).relu() * on(dyv, os, d))
                .sum()
                .backward();
            return std::vector<Vd>{vals(*xg.grad), vals(*wg.grad), vals(*bg.grad)};
          };
          const std::vector<Vd> got = grads(dev), ref = grads("CPU");
          const char* what[] = {"input gradient", "weight gradient", "bias gradient"};
          for (int i = 0; i < 3; ++i) require_close(got[i], ref[i], 1e-4, 1e-4, what[i]);
        }
    }
}

// Depthwise convs (one channel a group: no GEMM, a rendered kernel a conv) of random sizes, strides,
// dilations and per-side pads against a float64 loop, their gradients against the CPU device's.
TEST_CASE("depthwise conv2d: random windows on CPU and CLANG and LLVM against a float64 loop",
          "[conv][depthwise]") {
  std::mt19937 gen(61);
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  std::uint64_t seed = 6100;
  for (const char* dev : {"CPU", "CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    for (int trial = 0; trial < 8; ++trial) {
      ConvCase c;
      c.g.groups = pick(2, 6);
      c.xs = {pick(1, 2), c.g.groups}, c.ws = {c.g.groups, 1};
      for (int j = 0; j < 2; ++j) {
        const I k = pick(1, 4), d = pick(1, 2), before = pick(0, 2), after = pick(0, 2);
        c.ws.push_back(k), c.g.stride.push_back(pick(1, 3)), c.g.dilation.push_back(d);
        c.g.before.push_back(before), c.g.after.push_back(after);
        c.xs.push_back(std::max<I>(pick(3, 30), d * (k - 1) + 1 - before - after));
      }
      INFO(dev << " " << describe(c));
      const Vd xv = test::random_values(test::numel_of(c.xs), seed++),
               wv = test::random_values(test::numel_of(c.ws), seed++),
               bv = test::random_values(c.ws[0], seed++);
      auto [want, os] = ref_conv(xv, c.xs, wv, c.ws, c.g);
      Tensor y = on(xv, c.xs, dev)
                     .conv2d(on(wv, c.ws, dev), {}, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g));
      REQUIRE(dims_of(y) == os);
      const I terms = test::numel_of(V(c.ws.begin() + 2, c.ws.end()));
      require_close(vals(y), want, 1e-6 * static_cast<double>(terms), 1e-6);
      auto grads = [&](const std::string& d) {
        Tensor xg = on(xv, c.xs, d).requires_grad_(), wg = on(wv, c.ws, d).requires_grad_(),
               bg = on(bv, {c.ws[0]}, d).requires_grad_();
        Tensor yg = xg.conv2d(wg, bg, c.g.groups, c.g.stride, c.g.dilation, torch_pads(c.g)).clip(0, 6);
        (yg * on(test::random_values(test::numel_of(os), 7), os, d)).sum().backward();
        return std::vector<Vd>{vals(*xg.grad), vals(*wg.grad), vals(*bg.grad)};
      };
      if (std::string(dev) == "CPU") continue;
      const std::vector<Vd> got = grads(dev), ref = grads("CPU");
      const char* what[] = {"input gradient", "weight gradient", "bias gradient"};
      for (int i = 0; i < 3; ++i) require_close(got[i], ref[i], 1e-4, 1e-4, what[i]);
    }
  }
  // MobileNet's rows of 28 (stride 1) and 14 (stride 2): gcc's kernel holds the width in registers,
  // a divisor of it (14), where LLVM's keeps the loops, which it unrolls and vectorizes itself.
  struct Case {
    const char* dev;
    I stride;
    const char* kernel;
  } cases[] = {{"CLANG", 1, "r_8_28_2_3_3_14("},
               {"CLANG", 2, "r_8_14_3_3_14("},
               {"LLVM", 1, "@r_8_28_28_3_3("},
               {"LLVM", 2, "@r_8_14_14_3_3("}};
  for (const Case& k : cases) {
    test::DeviceScope scope(k.dev);
    if (!scope.ok) continue;
    INFO(k.dev << " stride " << k.stride);
    Tensor x = Tensor::rand({1, 8, 28, 28}).realize(), w = Tensor::rand({8, 1, 3, 3}).realize();
    const auto src = test::kernel_sources(x.conv2d(w, {}, 8, {k.stride}, {1}, {1}));
    CHECK(std::any_of(src.begin(), src.end(),
                      [&](const std::string& s) { return s.find(k.kernel) != std::string::npos; }));
  }
}

// Max pools take the depthwise convs' path (their windows upcast across the width on CLANG); C's
// max selects: NaN still wins, ties (a ReLU's zeros) and -0 against +0 still give the second operand.
TEST_CASE("max_pool2d: random windows with ties and NaN on CLANG and LLVM match the CPU device",
          "[conv][depthwise]") {
  std::mt19937 gen(62);
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  std::uint64_t seed = 6200;
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    for (int trial = 0; trial < 6; ++trial) {
      V k, s, d, p, xs{pick(1, 2), pick(1, 4)};
      for (int j = 0; j < 2; ++j) {
        k.push_back(pick(1, 3)), s.push_back(pick(1, 3)), d.push_back(pick(1, 2));
        p.push_back(pick(0, k.back() / 2));
        xs.push_back(pick(d.back() * (k.back() - 1) + 1, 30));
      }
      INFO(dev << " x " << to_string(Dims(xs)) << " k " << to_string(Dims(k)) << " stride "
               << to_string(Dims(s)) << " dilation " << to_string(Dims(d)) << " pad " << to_string(Dims(p)));
      Vd xv = test::random_values(test::numel_of(xs), seed++);
      for (double& v : xv) v = std::max(v, 0.0);  // ties at 0, as after a ReLU
      xv[static_cast<std::size_t>(pick(0, static_cast<I>(xv.size()) - 1))] = std::nan("");
      xv[static_cast<std::size_t>(pick(0, static_cast<I>(xv.size()) - 1))] = -0.0;
      auto pooled = [&](const std::string& at) { return vals(on(xv, xs, at).max_pool2d(k, s, d, p)); };
      const Vd got = pooled(dev), want = pooled("CPU");
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i << ": " << got[i] << " against " << want[i]);
        CHECK(std::isnan(got[i]) == std::isnan(want[i]));
        if (!std::isnan(want[i])) CHECK(got[i] == want[i]);
      }
    }
  }
}

TEST_CASE("conv2d through the GEMM: ResNet's kinds of conv, forward and both gradients, are products",
          "[gemm][conv]") {
  for (const char* dev : {"CLANG", "LLVM"}) {
    test::DeviceScope scope(dev);
    if (!scope.ok) continue;
    struct Case {
      const char* what;
      Dims x, w;
      I groups, stride, pad;
      const char* forward;  // the forward's kernel: a product of cout x pixels x (cin k...), or none
      bool gathered;        // its windows gathered first (im2col); a 1x1 stride-1 conv reads x in place
    } cases[] = {
        {"3x3 pad 1", {2, 8, 9, 9}, {16, 8, 3, 3}, 1, 1, 1, "// gemm_2x16x81x72", true},
        {"3x3 stride 2", {1, 8, 9, 9}, {16, 8, 3, 3}, 1, 2, 1, "// gemm_1x16x25x72", true},
        {"1x1", {1, 8, 7, 7}, {16, 8, 1, 1}, 1, 1, 0, "// gemm_1x16x49x8", false},
        {"grouped 3x3", {1, 8, 6, 6}, {8, 4, 3, 3}, 2, 1, 1, "// gemm_2x4x36x36", true},
        {"depthwise 3x3", {1, 8, 6, 6}, {8, 1, 3, 3}, 8, 1, 1, nullptr, false},
        // the windows gathered in the GEMM's packing, not copied whole (METAGRAD_GEMM_WINDOW=1)
        {"3x3 pad 1, in the packing", {3, 8, 9, 9}, {16, 8, 3, 3}, 1, 1, 1, "// gemm_3x16x81x72", false},
        {"3x3 stride 2 dilation 2, in the packing",
         {1, 8, 11, 11},
         {16, 8, 3, 3},
         1,
         2,
         2,
         "// gemm_1x16x36x72",
         false},
    };
    for (const Case& c : cases) {
      INFO(dev << " " << c.what);
      const bool packing = std::string(c.what).find("in the packing") != std::string::npos;
      EnvScope env("METAGRAD_GEMM_WINDOW", packing ? "1" : "0");
      const I dilation = std::string(c.what).find("dilation 2") != std::string::npos ? 2 : 1;
      Tensor x = Tensor::rand(c.x).realize(), w = Tensor::rand(c.w).realize();
      auto src = test::kernel_sources(x.conv2d(w, {}, c.groups, {c.stride}, {dilation}, {c.pad}));
      if (!c.forward) {  // its padded input copied, then a rendered kernel across the output's width
        REQUIRE(src.size() == 2);
        CHECK_FALSE(ran_gemm(src));
        continue;
      }
      REQUIRE(src.size() == 1);
      CHECK(src[0].rfind(c.forward, 0) == 0);
      CHECK((src[0].find("gathered first") != std::string::npos) == c.gathered);
      CHECK((src[0].find("gathered in the packing") != std::string::npos) == packing);
      // the gradients: the input's (a product, then the windows summed back) and the weight's
      x.requires_grad_(), w.requires_grad_();
      Tensor y = x.conv2d(w, {}, c.groups, {c.stride}, {dilation}, {c.pad});
      (y * Tensor::rand(y.shape()).realize()).sum().backward();
      CHECK(ran_gemm(test::kernel_sources(*x.grad)));
      CHECK(ran_gemm(test::kernel_sources(*w.grad)));
    }
  }
}
