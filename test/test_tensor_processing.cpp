// Processing hlops (matmul, linear, conv2d, conv_transpose2d, pooling, normalisation, dropout,
// sequential) against plain loops in double, their gradients against finite differences, and their
// errors.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "gradcheck.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
using metagrad::test::check_gradients;
using metagrad::test::random_tensor;
using metagrad::test::require_close;

namespace {
using Vd = std::vector<double>;
using I = std::int64_t;

Vd vals(const Tensor& t) { return t.to_vector<double>(); }

// Row-major strides of a shape.
Dims strides_of(const Dims& s) {
  Dims st = Dims::filled(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// numpy.matmul on row-major data: 1-D operands are promoted and their axis dropped; batch
// dimensions broadcast.
std::pair<Vd, Dims> ref_matmul(const Vd& a, Dims as, const Vd& b, Dims bs) {
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(0, 1);
  if (b1) bs.push_back(1);
  I n = as[as.size() - 2], k = as[as.size() - 1], m = bs[bs.size() - 1];
  std::size_t nb = std::max(as.size(), bs.size()) - 2;
  auto batch_of = [nb](const Dims& s) {
    Dims out = Dims::filled(nb, 1);
    for (std::size_t i = 0; i + 2 < s.size(); ++i) out[nb - (s.size() - 2) + i] = s[i];
    return out;
  };
  Dims ab = batch_of(as), bb = batch_of(bs), ob;
  for (std::size_t i = 0; i < nb; ++i) ob.push_back(std::max(ab[i], bb[i]));
  Dims abst = strides_of(ab), bbst = strides_of(bb);
  I batches = prod(ob);
  Vd out(static_cast<std::size_t>(batches * n * m));
  for (I bi = 0; bi < batches; ++bi) {
    I rem = bi, ao = 0, bo = 0;
    for (std::size_t i = nb; i-- > 0;) {
      I idx = rem % ob[i];
      rem /= ob[i];
      if (ab[i] != 1) ao += idx * abst[i];
      if (bb[i] != 1) bo += idx * bbst[i];
    }
    for (I r = 0; r < n; ++r)
      for (I c = 0; c < m; ++c) {
        double acc = 0;
        for (I j = 0; j < k; ++j)
          acc += a[static_cast<std::size_t>(ao * n * k + r * k + j)] *
                 b[static_cast<std::size_t>(bo * k * m + j * m + c)];
        out[static_cast<std::size_t>((bi * n + r) * m + c)] = acc;
      }
  }
  Dims os = ob;
  if (!a1) os.push_back(n);
  if (!b1) os.push_back(m);
  return {out, os};
}

struct ConvArgs {
  I groups = 1, sy = 1, sx = 1, dy = 1, dx = 1, pl = 0, pr = 0, pt = 0, pb = 0;
};

// Direct convolution (cross-correlation), NCHW, weight (cout, cin/groups, kh, kw).
std::pair<Vd, Dims> ref_conv2d(const Vd& x, const Dims& xs, const Vd& w, const Dims& ws, const Vd* bias,
                               const ConvArgs& c) {
  I N = xs[0], C = xs[1], H = xs[2], W = xs[3], CO = ws[0], CG = ws[1], KH = ws[2], KW = ws[3];
  I OH = (H + c.pt + c.pb - c.dy * (KH - 1) - 1) / c.sy + 1,
    OW = (W + c.pl + c.pr - c.dx * (KW - 1) - 1) / c.sx + 1;
  I per_group = CO / c.groups;
  Vd out(static_cast<std::size_t>(N * CO * OH * OW));
  for (I n = 0; n < N; ++n)
    for (I oc = 0; oc < CO; ++oc)
      for (I oy = 0; oy < OH; ++oy)
        for (I ox = 0; ox < OW; ++ox) {
          double acc = bias ? (*bias)[static_cast<std::size_t>(oc)] : 0;
          I g = oc / per_group;
          for (I ic = 0; ic < CG; ++ic)
            for (I ky = 0; ky < KH; ++ky)
              for (I kx = 0; kx < KW; ++kx) {
                I iy = oy * c.sy - c.pt + ky * c.dy, ix = ox * c.sx - c.pl + kx * c.dx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                acc += x[static_cast<std::size_t>(((n * C + g * CG + ic) * H + iy) * W + ix)] *
                       w[static_cast<std::size_t>(((oc * CG + ic) * KH + ky) * KW + kx)];
              }
          out[static_cast<std::size_t>(((n * CO + oc) * OH + oy) * OW + ox)] = acc;
        }
  return {out, {N, CO, OH, OW}};
}

// Transposed convolution as the scatter it is: weight (cin, cout/groups, kh, kw).
std::pair<Vd, Dims> ref_conv_transpose2d(const Vd& x, const Dims& xs, const Vd& w, const Dims& ws, I groups,
                                         I s, I d, I p, I op) {
  I N = xs[0], C = xs[1], H = xs[2], W = xs[3], CG = C / groups, OCG = ws[1], KH = ws[2], KW = ws[3];
  I OH = (H - 1) * s - 2 * p + d * (KH - 1) + op + 1, OW = (W - 1) * s - 2 * p + d * (KW - 1) + op + 1,
    CO = OCG * groups;
  Vd out(static_cast<std::size_t>(N * CO * OH * OW), 0.0);
  for (I n = 0; n < N; ++n)
    for (I ic = 0; ic < C; ++ic)
      for (I y = 0; y < H; ++y)
        for (I xx = 0; xx < W; ++xx)
          for (I oc = 0; oc < OCG; ++oc)
            for (I ky = 0; ky < KH; ++ky)
              for (I kx = 0; kx < KW; ++kx) {
                I oy = y * s - p + ky * d, ox = xx * s - p + kx * d;
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                I g = ic / CG;
                out[static_cast<std::size_t>(((n * CO + g * OCG + oc) * OH + oy) * OW + ox)] +=
                    x[static_cast<std::size_t>(((n * C + ic) * H + y) * W + xx)] *
                    w[static_cast<std::size_t>(((ic * OCG + oc) * KH + ky) * KW + kx)];
              }
  return {out, {N, CO, OH, OW}};
}

// Pooling over the last two axes; max if `is_max`, else mean.
std::pair<Vd, Dims> ref_pool(const Vd& x, const Dims& xs, I kh, I kw, I sh, I sw, bool is_max) {
  I H = xs[xs.size() - 2], W = xs[xs.size() - 1], lead = prod(xs) / (H * W);
  I OH = (H - kh) / sh + 1, OW = (W - kw) / sw + 1;
  Vd out;
  for (I b = 0; b < lead; ++b)
    for (I oy = 0; oy < OH; ++oy)
      for (I ox = 0; ox < OW; ++ox) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0;
        for (I ky = 0; ky < kh; ++ky)
          for (I kx = 0; kx < kw; ++kx) {
            double v = x[static_cast<std::size_t>((b * H + oy * sh + ky) * W + ox * sw + kx)];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        out.push_back(is_max ? acc : acc / static_cast<double>(kh * kw));
      }
  Dims os = xs;
  os[os.size() - 2] = OH, os[os.size() - 1] = OW;
  return {out, os};
}

// A float64 tensor of `shape` that is a non-contiguous view: made in reversed axis order, then permuted.
Tensor permuted_random(const Dims& shape, std::uint64_t seed) {
  Dims rev;
  std::vector<I> order;
  for (std::size_t i = shape.size(); i-- > 0;) rev.push_back(shape[i]), order.push_back(static_cast<I>(i));
  return random_tensor(rev, seed).permute(order);
}
}  // namespace

TEST_CASE("matmul matches numpy semantics: 1-D, 2-D, batched, broadcast", "[processing]") {
  struct Case {
    Dims a, b;
  };
  std::vector<Case> cases = {
      {{3}, {3}},
      {{4}, {4, 5}},
      {{2, 4}, {4}},
      {{3, 4}, {4, 5}},
      {{1, 1}, {1, 1}},
      {{2, 3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{3}, {2, 3, 4}},
      {{2, 3, 4}, {4}},
      {{1, 3, 2}, {4, 2, 3}},
      {{7, 1}, {1, 6}},
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    INFO(to_string(c.a) << " @ " << to_string(c.b));
    Tensor a = random_tensor(c.a, seed++), b = random_tensor(c.b, seed++);
    Tensor out = a.matmul(b);
    auto [want, ws] = ref_matmul(vals(a), c.a, vals(b), c.b);
    REQUIRE(out.shape() == ws);
    require_close(vals(out), want, 1e-12, 1e-12);
    require_close(vals(a.dot(b)), want, 1e-12, 1e-12);
    if (c.b.size() < 2) continue;
    // The same values with b's k axis inner in its buffer (b = B^T): matmul's other form.
    Tensor bt = b.transpose(-1, -2).contiguous().transpose(-1, -2);
    require_close(vals(a.matmul(bt)), want, 1e-12, 1e-12);
  }
}

TEST_CASE("matmul: non-contiguous operands, float32, empty inner dimension", "[processing]") {
  Tensor a = permuted_random({3, 5}, 11), b = random_tensor({7, 5}, 12).permute({1, 0});
  auto [want, ws] = ref_matmul(vals(a), {3, 5}, vals(b), {5, 7});
  require_close(vals(a.matmul(b)), want, 1e-12, 1e-12);
  Tensor fa = random_tensor({2, 3, 4}, 13).flip({1}).cast(dtypes::float32);
  Tensor fb =
      random_tensor({4, 2}, 14).pad({{1, 0}, {0, 1}}, 0).cast(dtypes::float32);  // (5, 3): padded rows/cols
  auto [w2, s2] = ref_matmul(vals(fa), {2, 3, 4}, vals(fb.shrink({{1, 5}, {0, 3}})), {4, 3});
  Tensor out = fa.matmul(fb.shrink({{1, 5}, {0, 3}}));
  REQUIRE(out.dtype() == dtypes::float32);
  REQUIRE(out.shape() == s2);
  require_close(vals(out), w2, 1e-5, 1e-5);
  // Empty operands: no rows, and k == 0 (a sum over nothing is zero).
  Tensor e = Tensor::ones({0, 3}).matmul(Tensor::ones({3, 2}));
  REQUIRE(e.shape() == Dims{0, 2});
  REQUIRE(vals(e).empty());
  Tensor z = Tensor::ones({2, 0}).matmul(Tensor::ones({0, 3}));
  REQUIRE(z.shape() == Dims{2, 3});
  require_close(vals(z), Vd(6, 0.0));
}

TEST_CASE("matmul is one fused multiply-reduce kernel", "[processing]") {
  // As many kernels as one elementwise op: the product is never a buffer of its own.
  auto kernels = [](const std::function<Tensor()>& f) {
    GlobalCounters::reset();
    f().realize();
    return GlobalCounters::kernel_count;
  };
  Tensor a = random_tensor({4, 3}, 21), b = random_tensor({3, 5}, 22);
  Tensor c = permuted_random({2, 3, 4}, 23), d = random_tensor({4, 2}, 24);
  a.realize(), b.realize(), c.realize(), d.realize();
  std::int64_t one = kernels([&] { return a + 1; });
  REQUIRE(one >= 1);
  REQUIRE(kernels([&] { return a.matmul(b); }) == one);
  REQUIRE(kernels([&] { return c.matmul(d); }) == one);
  // The bias joins the reduce's kernel too.
  Tensor bias = random_tensor({5}, 25), x = random_tensor({1, 2, 5, 5}, 26),
         w = random_tensor({3, 2, 3, 3}, 27), cb = random_tensor({3}, 28);
  bias.realize(), x.realize(), w.realize(), cb.realize();
  REQUIRE(kernels([&] { return a.linear(b, bias); }) == one);
  REQUIRE(kernels([&] { return x.conv2d(w, cb, 1, {1}, {1}, {1}); }) == one);
}

TEST_CASE("linear is x @ weight + bias", "[processing]") {
  Tensor x = random_tensor({4, 3}, 31), w = random_tensor({3, 2}, 32), b = random_tensor({2}, 33);
  auto [want, ws] = ref_matmul(vals(x), {4, 3}, vals(w), {3, 2});
  Vd bv = vals(b);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 2];
  require_close(vals(x.linear(w, b)), want, 1e-12, 1e-12);
  // Batched input; a bias that broadcasts over rows as well.
  Tensor xb = random_tensor({2, 4, 3}, 35), bb = random_tensor({4, 1}, 36);
  auto [wantb, wsb] = ref_matmul(vals(xb), {2, 4, 3}, vals(w), {3, 2});
  Vd bbv = vals(bb);
  for (std::size_t i = 0; i < wantb.size(); ++i) wantb[i] += bbv[(i / 2) % 4];
  Tensor outb = xb.linear(w, bb);
  REQUIRE(outb.shape() == Dims{2, 4, 2});
  require_close(vals(outb), wantb, 1e-12, 1e-12);
  Tensor scale = random_tensor({3}, 34);  // a 1-D weight scales elementwise, as tinygrad
  Vd xv = vals(x), sv = vals(scale), want1;
  for (std::size_t i = 0; i < xv.size(); ++i) want1.push_back(xv[i] * sv[i % 3]);
  require_close(vals(x.linear(scale)), want1, 1e-12, 1e-12);
}

TEST_CASE("conv2d matches a direct loop: padding, stride, dilation, groups, bias", "[processing]") {
  struct Case {
    Dims x, w;
    ConvArgs a;
    std::vector<I> stride, dilation, padding;
    bool bias;
  };
  std::vector<Case> cases = {
      {{1, 1, 5, 5}, {1, 1, 3, 3}, {}, {1}, {1}, {0}, false},
      {{2, 3, 6, 5}, {4, 3, 3, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1}, {1}, {1}, true},
      {{1, 2, 7, 7}, {3, 2, 3, 3}, {1, 2, 2, 1, 1, 0, 0, 0, 0}, {2}, {1}, {0}, true},
      {{1, 2, 8, 7}, {2, 2, 2, 3}, {1, 3, 2, 1, 1, 1, 1, 2, 2}, {3, 2}, {1}, {2, 1}, false},
      {{1, 2, 9, 9}, {2, 2, 3, 3}, {1, 1, 1, 2, 2, 0, 0, 0, 0}, {1}, {2}, {0}, false},
      {{1, 4, 6, 6}, {6, 2, 3, 3}, {2, 1, 1, 1, 1, 1, 1, 1, 1}, {1}, {1}, {1}, true},
      {{2, 4, 7, 6}, {4, 1, 2, 3}, {4, 2, 1, 1, 2, 1, 0, 2, 1}, {2, 1}, {1, 2}, {1, 0, 2, 1}, true},
      {{1, 2, 4, 4}, {2, 2, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0, 0}, {1}, {1}, {0}, false},
      {{1, 1, 3, 3}, {1, 1, 3, 3}, {1, 1, 1, 1, 1, 0, 0, 0, 0}, {1}, {1}, {0}, false},  // one output pixel
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    INFO("x " << to_string(c.x) << " w " << to_string(c.w) << " groups " << c.a.groups);
    Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++),
           b = random_tensor({c.w[0]}, seed++);
    std::optional<Tensor> bias;
    if (c.bias) bias = b;
    Tensor out = x.conv2d(w, bias, c.a.groups, c.stride, c.dilation, c.padding);
    Vd bv = vals(b);
    auto [want, ws] = ref_conv2d(vals(x), c.x, vals(w), c.w, c.bias ? &bv : nullptr, c.a);
    REQUIRE(out.shape() == ws);
    require_close(vals(out), want, 1e-12, 1e-12);
  }
}

TEST_CASE("conv2d on non-contiguous input and weight, and in float32", "[processing]") {
  Tensor x = permuted_random({1, 2, 5, 4}, 150), w = random_tensor({3, 3, 2, 2}, 151).permute({2, 3, 0, 1});
  ConvArgs a{1, 1, 1, 1, 1, 1, 1, 1, 1};
  auto [want, ws] = ref_conv2d(vals(x), {1, 2, 5, 4}, vals(w), {2, 2, 3, 3}, nullptr, a);
  Tensor out = x.conv2d(w, {}, 1, {1}, {1}, {1});
  REQUIRE(out.shape() == ws);
  require_close(vals(out), want, 1e-12, 1e-12);
  Tensor out32 = x.cast(dtypes::float32).conv2d(w.cast(dtypes::float32), {}, 1, {1}, {1}, {1});
  REQUIRE(out32.dtype() == dtypes::float32);
  require_close(vals(out32), want, 1e-5, 1e-5);
}

TEST_CASE("conv2d, conv_transpose2d and pooling of an empty batch are empty", "[processing]") {
  Tensor x = Tensor::ones({0, 2, 5, 5});
  Tensor c = x.conv2d(Tensor::ones({3, 2, 3, 3}), Tensor::ones({3}));
  REQUIRE(c.shape() == Dims{0, 3, 3, 3});
  REQUIRE(vals(c).empty());
  REQUIRE(x.max_pool2d().shape() == Dims{0, 2, 2, 2});
  REQUIRE(vals(x.avg_pool2d({3}, {1})).empty());
  Tensor t = x.conv_transpose2d(Tensor::ones({2, 1, 3, 3}), {}, 1, {2});
  REQUIRE(t.shape() == Dims{0, 1, 11, 11});
  REQUIRE(vals(t).empty());
}

TEST_CASE("conv_transpose2d matches a direct scatter loop", "[processing]") {
  struct Case {
    Dims x, w;
    I groups, s, d, p, op;
  };
  std::vector<Case> cases = {
      {{1, 1, 3, 3}, {1, 1, 2, 2}, 1, 1, 1, 0, 0}, {{2, 2, 3, 4}, {2, 3, 3, 3}, 1, 2, 1, 1, 1},
      {{1, 4, 3, 3}, {4, 1, 3, 2}, 2, 2, 1, 0, 0}, {{1, 2, 4, 3}, {2, 2, 2, 2}, 1, 1, 2, 1, 1},
      {{1, 2, 2, 3}, {2, 1, 3, 3}, 2, 3, 2, 2, 2},
  };
  std::uint64_t seed = 200;
  for (const auto& c : cases) {
    INFO("x " << to_string(c.x) << " w " << to_string(c.w) << " groups " << c.groups << " s " << c.s << " d "
              << c.d << " p " << c.p << " op " << c.op);
    Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++),
           b = random_tensor({c.w[1] * c.groups}, seed++);
    auto [want, ws] = ref_conv_transpose2d(vals(x), c.x, vals(w), c.w, c.groups, c.s, c.d, c.p, c.op);
    Tensor out = x.conv_transpose2d(w, {}, c.groups, {c.s}, {c.d}, {c.p}, {c.op});
    REQUIRE(out.shape() == ws);
    require_close(vals(out), want, 1e-12, 1e-12);
    Vd bv = vals(b), wb = want;
    I plane = ws[2] * ws[3];
    for (std::size_t i = 0; i < wb.size(); ++i)
      wb[i] += bv[static_cast<std::size_t>((static_cast<I>(i) / plane) % ws[1])];
    require_close(vals(x.conv_transpose2d(w, b, c.groups, {c.s}, {c.d}, {c.p}, {c.op})), wb, 1e-12, 1e-12);
  }
}

TEST_CASE("avg_pool2d and max_pool2d match direct loops", "[processing]") {
  struct Case {
    Dims x;
    I kh, kw, sh, sw;
  };
  std::vector<Case> cases = {
      {{1, 1, 4, 4}, 2, 2, 2, 2}, {{2, 3, 5, 7}, 2, 3, 2, 3}, {{1, 2, 6, 5}, 3, 2, 1, 1},
      {{1, 1, 7, 7}, 2, 2, 3, 3}, {{3, 5, 5}, 3, 3, 2, 1},    {{1, 1, 3, 3}, 3, 3, 3, 3},
      {{2, 1, 4, 1}, 2, 1, 1, 1},
  };
  std::uint64_t seed = 300;
  for (const auto& c : cases) {
    INFO("x " << to_string(c.x) << " k " << c.kh << "x" << c.kw << " s " << c.sh << "x" << c.sw);
    Tensor x = random_tensor(c.x, seed++);
    for (bool is_max : {false, true}) {
      auto [want, ws] = ref_pool(vals(x), c.x, c.kh, c.kw, c.sh, c.sw, is_max);
      Tensor out =
          is_max ? x.max_pool2d({c.kh, c.kw}, {c.sh, c.sw}) : x.avg_pool2d({c.kh, c.kw}, {c.sh, c.sw});
      REQUIRE(out.shape() == ws);
      require_close(vals(out), want, 1e-12, 1e-12);
    }
  }
  // The stride defaults to the kernel; a non-contiguous input.
  Tensor x = permuted_random({1, 2, 6, 4}, 350);
  auto [want, ws] = ref_pool(vals(x), {1, 2, 6, 4}, 2, 2, 2, 2, true);
  require_close(vals(x.max_pool2d()), want, 1e-12, 1e-12);
  auto [want3, ws3] = ref_pool(vals(x), {1, 2, 6, 4}, 3, 3, 3, 3, false);
  REQUIRE(x.avg_pool2d({3}).shape() == ws3);
  require_close(vals(x.avg_pool2d({3})), want3, 1e-12, 1e-12);
}

TEST_CASE("layernorm and batchnorm match direct loops", "[processing]") {
  Tensor x = random_tensor({2, 3, 4}, 400);
  Vd xv = vals(x);
  SECTION("layernorm over the last axis") {
    Vd want(xv.size());
    for (std::size_t r = 0; r < 6; ++r) {
      double m = 0, v = 0;
      for (std::size_t j = 0; j < 4; ++j) m += xv[r * 4 + j] / 4;
      for (std::size_t j = 0; j < 4; ++j) v += (xv[r * 4 + j] - m) * (xv[r * 4 + j] - m) / 4;
      for (std::size_t j = 0; j < 4; ++j) want[r * 4 + j] = (xv[r * 4 + j] - m) / std::sqrt(v + 1e-5);
    }
    require_close(vals(x.layernorm()), want, 1e-10, 1e-10);
  }
  SECTION("layernorm over axes (1, 2), eps 0.1") {
    Vd want(xv.size());
    for (std::size_t r = 0; r < 2; ++r) {
      double m = 0, v = 0;
      for (std::size_t j = 0; j < 12; ++j) m += xv[r * 12 + j] / 12;
      for (std::size_t j = 0; j < 12; ++j) v += (xv[r * 12 + j] - m) * (xv[r * 12 + j] - m) / 12;
      for (std::size_t j = 0; j < 12; ++j) want[r * 12 + j] = (xv[r * 12 + j] - m) / std::sqrt(v + 0.1);
    }
    require_close(vals(x.layernorm({1, 2}, 0.1)), want, 1e-10, 1e-10);
  }
  SECTION("batchnorm over (N, C, H, W) and (N, C)") {
    Tensor x4 = random_tensor({2, 3, 2, 2}, 401), w = random_tensor({3}, 402), b = random_tensor({3}, 403),
           m = random_tensor({3}, 404), s = random_tensor({3}, 405, 0.5, 2);
    Vd v4 = vals(x4), wv = vals(w), bv = vals(b), mv = vals(m), sv = vals(s), want, want_plain;
    for (std::size_t i = 0; i < v4.size(); ++i) {
      std::size_t c = (i / 4) % 3;
      want.push_back((v4[i] - mv[c]) * wv[c] * sv[c] + bv[c]);
      want_plain.push_back((v4[i] - mv[c]) * sv[c]);
    }
    require_close(vals(x4.batchnorm(w, b, m, s)), want, 1e-12, 1e-12);
    require_close(vals(x4.batchnorm({}, {}, m, s)), want_plain, 1e-12, 1e-12);
    Tensor x2 = random_tensor({4, 3}, 406);
    Vd v2 = vals(x2), want2;
    for (std::size_t i = 0; i < v2.size(); ++i)
      want2.push_back((v2[i] - mv[i % 3]) * wv[i % 3] * sv[i % 3] + bv[i % 3]);
    require_close(vals(x2.batchnorm(w, b, m, s)), want2, 1e-12, 1e-12);
    // invstd that is not 1-D broadcasts as given (tinygrad).
    require_close(vals(x4.batchnorm({}, {}, m, s.reshape({1, 3, 1, 1}))), want_plain, 1e-12, 1e-12);
  }
}

TEST_CASE("dropout: identity unless training, else zero or scaled by 1/(1-p)", "[processing]") {
  Tensor x = random_tensor({40, 50}, 500, 1, 2);  // no zeros in x
  Vd xv = vals(x);
  require_close(vals(x.dropout(0.5)), xv);
  Tensor::TrainingGuard on;
  require_close(vals(x.dropout(0)), xv);
  Tensor::manual_seed(7);
  Vd out = vals(x.dropout(0.25));
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0)
      ++dropped;
    else
      REQUIRE(out[i] == Approx(xv[i] / 0.75).epsilon(1e-12));
  }
  double frac = static_cast<double>(dropped) / static_cast<double>(out.size());
  REQUIRE(frac > 0.2);
  REQUIRE(frac < 0.3);
  require_close(vals(x.dropout(1)), Vd(xv.size(), 0.0));
  // The gradient is the same mask, scaled.
  Tensor xg = random_tensor({5, 6}, 501, 1, 2, true);
  Tensor y = xg.dropout(0.5);
  y.sum().backward();
  Vd yv = vals(y), xgv = vals(xg), gv = vals(*xg.grad);
  for (std::size_t i = 0; i < yv.size(); ++i) REQUIRE(gv[i] == Approx(yv[i] / xgv[i]).epsilon(1e-12));
  REQUIRE_THROWS_WITH(x.dropout(1.5), Contains("dropout") && Contains("1.5"));
  REQUIRE_THROWS_WITH(x.dropout(-0.1), Contains("dropout"));
}

TEST_CASE("sequential applies the layers in order", "[processing]") {
  Tensor x = random_tensor({2, 3}, 600);
  Tensor y = x.sequential({[](const Tensor& t) { return t * 2; }, [](const Tensor& t) { return t + 1; },
                           [](const Tensor& t) { return t.relu(); }});
  Vd xv = vals(x), want;
  for (double v : xv) want.push_back(std::max(0.0, v * 2 + 1));
  require_close(vals(y), want);
  require_close(vals(x.sequential({})), xv);
}

TEST_CASE("gradients of matmul and linear", "[processing]") {
  auto mm = [](const std::vector<Tensor>& t) { return t[0].matmul(t[1]); };
  check_gradients(mm, {random_tensor({3, 4}, 700), random_tensor({4, 2}, 701)});
  check_gradients(mm, {random_tensor({2, 1, 2, 3}, 702), random_tensor({3, 3, 2}, 703)});
  check_gradients(mm, {random_tensor({3}, 704), random_tensor({3}, 705)});
  check_gradients(mm, {random_tensor({4}, 706), random_tensor({2, 4, 3}, 707)});
  check_gradients(mm, {random_tensor({2, 3, 4}, 708), random_tensor({4}, 709)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].linear(t[1], t[2]); },
                  {random_tensor({3, 4}, 710), random_tensor({4, 2}, 711), random_tensor({2}, 712)});
  // A weight stored (out, in) and used transposed, as nn::Linear's: matmul's k-inner form.
  auto mm_t = [](const std::vector<Tensor>& t) { return t[0].matmul(t[1].transpose(-1, -2)); };
  check_gradients(mm_t, {random_tensor({3, 4}, 713), random_tensor({2, 4}, 714)});
  check_gradients(mm_t, {random_tensor({4}, 715), random_tensor({2, 3, 4}, 716)});
  check_gradients(mm_t, {random_tensor({2, 1, 2, 3}, 717), random_tensor({3, 2, 3}, 718)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].linear(t[1].transpose(), t[2]); },
                  {random_tensor({3, 4}, 719), random_tensor({2, 4}, 720), random_tensor({2}, 721)});
}

TEST_CASE("a matmul's weight gradient comes out in the weight's own layout", "[processing]") {
  // Read transposed, the optimizer's update of a large weight is a strided gather (it took 8% of
  // the W5 step): the gradient must be a plain view of its reduce, whichever way the weight is stored.
  auto grad_st = [](Tensor x, Tensor w, const Tensor& leaf) {
    x.matmul(w).sum().backward();
    return (*leaf.grad).lazydata->st;
  };
  for (auto [batch, m, k, n] : std::vector<std::array<std::int64_t, 4>>{{0, 5, 7, 3}, {2, 4, 6, 5}}) {
    INFO("batch " << batch << ", " << m << " x " << k << " x " << n);
    Dims xs = batch ? Dims{batch, m, k} : Dims{m, k}, ws = batch ? Dims{batch, k, n} : Dims{k, n},
         wts = batch ? Dims{batch, n, k} : Dims{n, k};
    Tensor x = random_tensor(xs, 730), w = random_tensor(ws, 731).requires_grad_(),
           wt = random_tensor(wts, 732).requires_grad_();
    REQUIRE(grad_st(x, w, w).contiguous());                      // w (k, n): the (m, k, n) product
    REQUIRE(grad_st(x, wt.transpose(-1, -2), wt).contiguous());  // W (n, k) as W^T: (m, n, k)
  }
}

TEST_CASE("gradients of conv2d with stride, padding, dilation, groups", "[processing]") {
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].conv2d(t[1], t[2]); },
      {random_tensor({1, 2, 4, 4}, 800), random_tensor({2, 2, 2, 2}, 801), random_tensor({2}, 802)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].conv2d(t[1], {}, 2, {2, 1}, {1, 2}, {1, 0, 1, 2});
      },
      {random_tensor({1, 4, 4, 4}, 803), random_tensor({2, 2, 2, 2}, 804)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].conv2d(t[1], {}, 1, {2}, {1}, {1}); },
                  {random_tensor({2, 1, 5, 4}, 805), random_tensor({2, 1, 3, 3}, 806)});
}

TEST_CASE("gradients of conv_transpose2d", "[processing]") {
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].conv_transpose2d(t[1], t[2], 1, {2}, {1}, {1}, {1}); },
      {random_tensor({1, 2, 3, 3}, 900), random_tensor({2, 2, 2, 2}, 901), random_tensor({2}, 902)});
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].conv_transpose2d(t[1], {}, 2, {1}, {2}, {0}); },
      {random_tensor({1, 2, 3, 2}, 903), random_tensor({2, 1, 2, 2}, 904)});
}

TEST_CASE("gradients of pooling, layernorm, batchnorm", "[processing]") {
  auto x = random_tensor({1, 2, 5, 5}, 1000);
  check_gradients([](const std::vector<Tensor>& t) { return t[0].avg_pool2d({2, 3}, {1, 2}); }, {x});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].max_pool2d({2, 2}, {1, 1});
      },
      {x});  // overlapping
  check_gradients([](const std::vector<Tensor>& t) { return t[0].max_pool2d({2, 2}, {3, 3}); }, {x});  // gaps
  check_gradients([](const std::vector<Tensor>& t) { return t[0].layernorm(); },
                  {random_tensor({3, 4}, 1001)});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].layernorm({0, 2}, 0.01);
      },
      {random_tensor({2, 2, 3}, 1002)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].batchnorm(t[1], t[2], t[3], t[4]); },
                  {random_tensor({2, 3, 2, 1}, 1003), random_tensor({3}, 1004), random_tensor({3}, 1005),
                   random_tensor({3}, 1006), random_tensor({3}, 1007, 0.5, 2)});
}

TEST_CASE("processing errors name the op and both shapes", "[processing]") {
  Tensor a = Tensor::ones({64, 128}), b = Tensor::ones({64, 10});
  REQUIRE_THROWS_AS(a.matmul(b), std::invalid_argument);
  REQUIRE_THROWS_WITH(a.matmul(b), Contains("matmul: (64, 128) @ (64, 10)") && Contains("128 vs 64"));
  REQUIRE_THROWS_WITH(Tensor::ones({2, 3, 4}).matmul(Tensor::ones({3, 4, 5})),
                      Contains("matmul: (2, 3, 4) @ (3, 4, 5)") && Contains("batch"));
  REQUIRE_THROWS_WITH(Tensor::ones({3}).matmul(Tensor::ones({4})), Contains("(3,) @ (4,)"));
  REQUIRE_THROWS_WITH(Tensor::ones({2, 3}).linear(Tensor::ones({2, 3})), Contains("matmul: (2, 3) @ (2, 3)"));
  REQUIRE_THROWS_WITH(Tensor::full({}, 2).matmul(Tensor::ones({3})), Contains("matmul: () @ (3,)"));

  Tensor x = Tensor::ones({1, 3, 8, 8});
  REQUIRE_THROWS_AS(x.conv2d(Tensor::ones({4, 2, 3, 3})), std::invalid_argument);
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 2, 3, 3})),
                      Contains("conv2d: input (1, 3, 8, 8), weight (4, 2, 3, 3)") && Contains("3 channels"));
  REQUIRE_THROWS_WITH(Tensor::ones({3, 8, 8}).conv2d(Tensor::ones({4, 3, 3, 3})),
                      Contains("input (3, 8, 8), weight (4, 3, 3, 3)") && Contains("4-D"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 3, 3})), Contains("weight (4, 3, 3)"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 3, 3, 3}), {}, 1, {1}, {1}, {1, 2, 3}),
                      Contains("padding (1, 2, 3)"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 3, 9, 3})),
                      Contains("weight (4, 3, 9, 3)") && Contains("smaller than the kernel (9, 3)"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 3, 3, 3}), {}, 1, {0}),
                      Contains("weight (4, 3, 3, 3): stride (0,)"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({3, 1, 3, 3}), {}, 2), Contains("groups"));
  REQUIRE_THROWS_WITH(x.conv2d(Tensor::ones({4, 3, 3, 3}), Tensor::ones({3})), Contains("bias (3,)"));
  REQUIRE_THROWS_WITH(x.conv_transpose2d(Tensor::ones({2, 3, 3, 3})),
                      Contains("conv_transpose2d: input (1, 3, 8, 8), weight (2, 3, 3, 3)"));
  REQUIRE_THROWS_WITH(x.conv_transpose2d(Tensor::ones({3, 3, 3, 3}), {}, 1, {2}, {1}, {0}, {2}),
                      Contains("output_padding"));
  REQUIRE_THROWS_WITH(x.conv_transpose2d(Tensor::ones({3, 2, 3, 3}), Tensor::ones({3})),
                      Contains("conv_transpose2d: input (1, 3, 8, 8), weight (3, 2, 3, 3): the bias (3,)"));
  REQUIRE_THROWS_WITH(Tensor::ones({4}).max_pool2d(), Contains("max_pool2d: input (4,)"));
  REQUIRE_THROWS_WITH(x.avg_pool2d({9, 2}), Contains("avg_pool2d") && Contains("(9, 2)"));
  REQUIRE_THROWS_WITH(x.avg_pool2d({1, 2, 3}), Contains("kernel_size (1, 2, 3)"));
  REQUIRE_THROWS_WITH(x.batchnorm({}, {}, Tensor::ones({4}), Tensor::ones({3})),
                      Contains("batchnorm: input (1, 3, 8, 8)") && Contains("mean has shape (4,)"));
}

// ---- pooling options: padding, ceil_mode, count_include_pad, dilation, indices, 1-D and 3-D ----
namespace {
struct PoolRef {
  Vd avg, max, index;
  Dims shape;
};

// PyTorch's pooling over the last n axes of x, by direct loops: output sizes by its formula, each
// window's positions start + t d read where inside the input (padding is -inf for max, 0 for avg),
// the avg divisor counting the positions inside the padded input (count_include_pad) or the input,
// the max's index the first in scan order of the largest value, flat in the unpadded plane.
PoolRef ref_pool_nd(const Vd& x, const Dims& xs, const std::vector<I>& k, const std::vector<I>& s,
                    const std::vector<I>& d, const std::vector<I>& p, bool ceil_mode,
                    bool count_include_pad) {
  std::size_t n = k.size(), np = xs.size() - n;
  std::vector<I> in(xs.begin() + static_cast<std::ptrdiff_t>(np), xs.end()), out;
  for (std::size_t j = 0; j < n; ++j) {
    I num = in[j] + 2 * p[j] - d[j] * (k[j] - 1) - 1;
    I o = (ceil_mode ? (num + s[j] - 1) / s[j] : num / s[j]) + 1;
    if (ceil_mode && (o - 1) * s[j] >= in[j] + p[j]) --o;
    out.push_back(o);
  }
  I plane = 1, oplane = 1, batch = 1, kn = 1;
  for (std::size_t j = 0; j < n; ++j) plane *= in[j], oplane *= out[j], kn *= k[j];
  for (std::size_t i = 0; i < np; ++i) batch *= xs[i];
  PoolRef r;
  r.shape = Dims(std::vector<I>(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(np)));
  for (I o : out) r.shape.push_back(o);
  for (I b = 0; b < batch; ++b)
    for (I oi = 0; oi < oplane; ++oi) {
      std::vector<I> o(n);
      for (I rest = oi, j = static_cast<I>(n); j-- > 0;) o[j] = rest % out[j], rest /= out[j];
      double sum = 0, best = -INFINITY, best_at = -1, count = 0;
      for (I ti = 0; ti < kn; ++ti) {
        std::vector<I> t(n);
        for (I rest = ti, j = static_cast<I>(n); j-- > 0;) t[j] = rest % k[j], rest /= k[j];
        bool inside = true, padded_inside = true;
        I flat = 0;
        for (std::size_t j = 0; j < n; ++j) {
          I at = o[j] * s[j] - p[j] + t[j] * d[j];
          inside = inside && at >= 0 && at < in[j];
          padded_inside = padded_inside && at >= -p[j] && at < in[j] + p[j];
          flat = flat * in[j] + at;
        }
        if (count_include_pad ? padded_inside : inside) count += 1;
        if (!inside) continue;
        double v = x[static_cast<std::size_t>(b * plane + flat)];
        sum += v;
        if (v > best) best = v, best_at = static_cast<double>(flat);
      }
      r.avg.push_back(sum / count), r.max.push_back(best), r.index.push_back(best_at);
    }
  return r;
}
}  // namespace

TEST_CASE("pooling with padding, ceil_mode, count_include_pad and dilation matches direct loops, 1-D to 3-D",
          "[processing]") {
  std::mt19937_64 gen(4040);
  auto pick = [&](I lo, I hi) { return std::uniform_int_distribution<I>(lo, hi)(gen); };
  int checked = 0, skipped = 0;
  metagrad::test::Sampler sample;  // a third of the cases on PoCL (gradcheck.hpp)
  for (int c = 0; c < 36; ++c) {
    if (!sample()) {
      ++skipped;
      continue;
    }
    std::size_t n = static_cast<std::size_t>(c % 3) + 1;
    std::vector<I> k, s, d, p;
    Dims xs{pick(1, 2), pick(1, 2)};
    for (std::size_t j = 0; j < n; ++j) {
      k.push_back(pick(1, n == 3 ? 2 : 3)), s.push_back(pick(1, 3)), d.push_back(c % 4 == 3 ? 2 : 1);
      p.push_back(pick(0, k.back() / 2));
      xs.push_back(pick(d.back() * (k.back() - 1) + 1, n == 3 ? 4 : 7));
    }
    bool ceil_mode = c % 2 == 1, cip = c % 5 != 0;
    INFO("x " << to_string(xs) << " k " << to_string(Dims(k)) << " s " << to_string(Dims(s)) << " d "
              << to_string(Dims(d)) << " p " << to_string(Dims(p)) << " ceil " << ceil_mode << " cip "
              << cip);
    Tensor x = random_tensor(xs, static_cast<std::uint64_t>(5000 + c));
    PoolRef want = ref_pool_nd(vals(x), xs, k, s, d, p, ceil_mode, cip);
    Tensor avg = n == 1   ? x.avg_pool1d(k, s, d, p, ceil_mode, cip)
                 : n == 2 ? x.avg_pool2d(k, s, d, p, ceil_mode, cip)
                          : x.avg_pool3d(k, s, d, p, ceil_mode, cip);
    Tensor mx = n == 1   ? x.max_pool1d(k, s, d, p, ceil_mode)
                : n == 2 ? x.max_pool2d(k, s, d, p, ceil_mode)
                         : x.max_pool3d(k, s, d, p, ceil_mode);
    auto [values, index] = n == 1   ? x.max_pool1d_with_indices(k, s, d, p, ceil_mode)
                           : n == 2 ? x.max_pool2d_with_indices(k, s, d, p, ceil_mode)
                                    : x.max_pool3d_with_indices(k, s, d, p, ceil_mode);
    REQUIRE(avg.shape() == want.shape);
    REQUIRE(mx.shape() == want.shape);
    REQUIRE(index.shape() == want.shape);
    REQUIRE(index.dtype() == dtypes::int64);
    require_close(vals(avg), want.avg, 1e-12, 1e-12, "avg");
    require_close(vals(mx), want.max, 1e-12, 1e-12, "max");
    require_close(vals(values), want.max, 1e-12, 1e-12, "max values");
    require_close(vals(index), want.index, 0, 0, "max indices");
    ++checked;
  }
  REQUIRE(checked + skipped == 36);
  REQUIRE(checked >= 12);
}

TEST_CASE("pooling: PyTorch's values by hand, integer max, ties, and max_unpool", "[processing]") {
  // 1x1x3x3 of 1..9, kernel 2, stride 2, padding 1, ceil_mode: windows rows {-1,0},{1,2} (plus none:
  // a window starting at 3 = in + p is dropped). count_include_pad divides by 4 everywhere
  // (no window reaches past the padding); without it by the real elements.
  Tensor x = Tensor::arange(1, 10, 1, {.dtype = dtypes::float32}).reshape({1, 1, 3, 3});
  REQUIRE(x.avg_pool2d({2, 2}, {2, 2}, {1}, {1}, true).shape() == Dims{1, 1, 2, 2});
  require_close(vals(x.avg_pool2d({2, 2}, {2, 2}, {1}, {1}, true)), {0.25, 1.25, 2.75, 7.0}, 1e-6, 1e-6);
  require_close(vals(x.avg_pool2d({2, 2}, {2, 2}, {1}, {1}, true, false)), {1, 2.5, 5.5, 7.0}, 1e-6, 1e-6);
  // ceil_mode without padding: the last window hangs over the edge and divides by what it holds,
  // in both count_include_pad modes (PyTorch: the divisor never counts the overhang).
  require_close(vals(x.avg_pool2d({2, 2}, {2, 2}, {1}, {0}, true)), {3, 4.5, 7.5, 9}, 1e-6, 1e-6);
  require_close(vals(x.max_pool2d({2, 2}, {2, 2}, {1}, {1}, true)), {1, 3, 7, 9}, 0, 0);
  // Integer input: the padding is the dtype's lowest, not a wrapped -inf.
  Tensor xi = Tensor(std::vector<std::int32_t>{-5, -7, -9, -1}, {1, 2, 2});
  Tensor mi = xi.max_pool1d({2}, {2}, {1}, {1}, true);
  REQUIRE(mi.dtype() == dtypes::int32);
  require_close(vals(mi), {-5, -7, -9, -1}, 0, 0);
  // Ties: the first in scan order.
  Tensor tie = Tensor::ones({1, 1, 2, 4});
  require_close(vals(tie.max_pool2d_with_indices().second), {0, 2}, 0, 0);

  // max_unpool2d puts each maximum back at its index, zeros elsewhere; its output size defaults to the
  // pooling's input size, output_size overrides it.
  Tensor y = random_tensor({2, 3, 4, 6}, 4100);
  auto [v, idx] = y.max_pool2d_with_indices({2, 2});
  Tensor un = v.max_unpool2d(idx, {2, 2});
  REQUIRE(un.shape() == y.shape());
  Vd yv = vals(y), uv = vals(un),
     mv = vals(y.max_pool2d({2, 2}).repeat_interleave(2, 2).repeat_interleave(2, 3));
  for (std::size_t i = 0; i < yv.size(); ++i) REQUIRE(uv[i] == (yv[i] == mv[i] ? yv[i] : 0.0));
  REQUIRE(v.max_unpool2d(idx, {2, 2}, {}, {1}, {0}, std::vector<I>{5, 7}).shape() == Dims{2, 3, 5, 7});
  // 1-D and 3-D, with padding: the unpooled size is (in - 1) s - 2p + d (k - 1) + 1.
  Tensor z = random_tensor({1, 2, 5}, 4101);
  auto [v1, i1] = z.max_pool1d_with_indices({3}, {2}, {1}, {1});
  Tensor u1 = v1.max_unpool1d(i1, {3}, {2}, {1}, {1});
  REQUIRE(u1.shape() == Dims{1, 2, 5});
  Vd zv = vals(z), u1v = vals(u1), i1v = vals(i1), v1v = vals(v1);
  for (std::size_t i = 0; i < i1v.size(); ++i) {
    auto at = (i / 3) * 5 + static_cast<std::size_t>(i1v[i]);
    REQUIRE(u1v[at] == v1v[i]);
    REQUIRE(zv[at] == v1v[i]);
  }
  Tensor w3 = random_tensor({1, 2, 4, 4, 4}, 4102);
  auto [v3, i3] = w3.max_pool3d_with_indices({2});
  REQUIRE(v3.max_unpool3d(i3, {2}).shape() == w3.shape());
  REQUIRE(v3.max_unpool3d(i3, {2}).sum().item<double>() == Approx(v3.sum().item<double>()).epsilon(1e-12));
}

TEST_CASE("gradients of pooling with padding, ceil_mode, dilation, 1-D and 3-D, and max_unpool",
          "[processing]") {
  auto x = random_tensor({1, 2, 5, 4}, 4200);
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].avg_pool2d({3, 2}, {2, 2}, {1}, {1}, true, false);
      },
      {x});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].avg_pool2d({3, 3}, {2, 1}, {1}, {1, 0}, true, true);
      },
      {x});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].max_pool2d({3, 2}, {2, 2}, {1, 2}, {1}, true);
      },
      {x});
  check_gradients(
      [](const std::vector<Tensor>& t) {
        return t[0].max_pool2d_with_indices({2, 2}, {1}, {1}, {1}).first;
      },
      {x});
  check_gradients(
      [](const std::vector<Tensor>& t) { return t[0].avg_pool1d({3}, {2}, {1}, {1}, true, false); },
      {random_tensor({2, 7}, 4201)});
  check_gradients([](const std::vector<Tensor>& t) { return t[0].max_pool3d({2}, {2}, {1}, {1}, true); },
                  {random_tensor({1, 1, 3, 4, 3}, 4202)});
  auto [v, idx] = x.max_pool2d_with_indices({2, 2});
  check_gradients([&](const std::vector<Tensor>& t) { return t[0].max_unpool2d(idx, {2, 2}); }, {v});
}

TEST_CASE("pooling options: errors name the op and the shapes", "[processing]") {
  Tensor x = Tensor::ones({1, 1, 4, 4});
  REQUIRE_THROWS_WITH(x.max_pool2d({2, 2}, {}, {1}, {2}), Contains("max_pool2d: input (1, 1, 4, 4)") &&
                                                              Contains("padding (2,)") &&
                                                              Contains("half the kernel (2, 2)"));
  REQUIRE_THROWS_WITH(x.avg_pool2d({2, 2}, {}, {1}, {1, 2, 3}),
                      Contains("avg_pool2d") && Contains("padding (1, 2, 3)"));
  REQUIRE_THROWS_WITH(Tensor::ones({4}).max_pool3d({2}), Contains("max_pool3d: input (4,)"));
  REQUIRE_THROWS_WITH(Tensor::ones({2, 3}).avg_pool1d({4}),
                      Contains("avg_pool1d: input (2, 3)") && Contains("(4,)"));
  auto [v, idx] = x.max_pool2d_with_indices();
  REQUIRE_THROWS_WITH(v.max_unpool2d(idx.reshape({1, 1, 4}), {2, 2}),
                      Contains("max_unpool2d: input (1, 1, 2, 2), indices (1, 1, 4)"));
  REQUIRE_THROWS_WITH(v.max_unpool2d(idx.cast(dtypes::float32), {2, 2}),
                      Contains("max_unpool2d") && Contains("integer"));
  // An index past the (too small) output names the op and the sizes.
  REQUIRE_THROWS_WITH(v.max_unpool2d(idx + 20, {2, 2}), Contains("max_unpool2d") && Contains("(4, 4)"));
}
