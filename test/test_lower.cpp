// metagrad::lower: static expressions evaluated inline and lowered to the dynamic path on every
// host device give the same numbers, for random data; lowering builds the dynamic path's own
// kernels; leaves are shared and bindable, and the lowered graph is differentiable.
// Tolerance: 1e-5 relative plus 1e-6 absolute (float32; only the order of summation and the exp
// and log approximations differ between the inline loops and the devices' kernels).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "metagrad/fixed/grad.hpp"
#include "metagrad/lower.hpp"

namespace fx = metagrad::fixed;
using fx::index_t;
using metagrad::Tensor;

namespace {

template <index_t... D>
fx::Tensor<float, D...> random_tensor(std::mt19937& rng, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  fx::Tensor<float, D...> t;
  for (float& x : t) x = static_cast<float>(u(rng));
  return t;
}

// (M, K) @ (K, N) from broadcasting, a multiply and a sum: movement ops and a reduce, no MatMul node.
template <index_t M, index_t K, index_t N, class A, class B>
auto broadcast_matmul(const A& a, const B& b) {
  return (a.template reshape<M, K, 1>().template expand<M, K, N>() *
          b.template reshape<1, K, N>().template expand<M, K, N>())
      .template sum<1>();
}

std::vector<std::string> host_devices() {
  std::vector<std::string> out;
  for (const auto& d : metagrad::Device::available())
    if (d == "CPU" || d == "CLANG" || d == "LLVM") out.push_back(d);
  return out;
}

// The expression evaluated inline, and lowered on each host device, agree element by element.
template <class E>
void check_lowered(const E& e) {
  using V = typename fx::expr_t<E>::value_type;
  fx::TensorOf<E> inline_result = e;
  for (const std::string& dev : host_devices()) {
    Tensor t = metagrad::lower(e, dev);
    REQUIRE(t.device() == dev);
    REQUIRE(t.shape() == fx::expr_t<E>::shape::dims);
    REQUIRE(t.dtype() == metagrad::dtype_of<V>);
    std::vector<double> got = t.to_vector<double>();
    for (index_t i = 0; i < fx::TensorOf<E>::size; ++i) {
      double want = static_cast<double>(inline_result[i]), g = got[static_cast<std::size_t>(i)];
      INFO("device " << dev << ", flat index " << i << ": lowered " << g << ", inline " << want);
      if (std::isnan(want))
        REQUIRE(std::isnan(g));
      else
        REQUIRE(std::abs(g - want) <= 1e-6 + 1e-5 * std::abs(want));
    }
  }
}

}  // namespace

TEST_CASE("lower: elementwise ops, broadcasting, scalars, comparisons and where", "[lower]") {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 5; ++trial) {
    auto a = random_tensor<4, 5>(rng);
    auto b = random_tensor<4, 5>(rng);
    auto c = random_tensor<1, 5>(rng);
    auto d = random_tensor<4, 1>(rng, 0.5, 3);
    check_lowered(((a * b + 2.f) / (c * c + 1.f)).relu() - a.sigmoid() * d);
    check_lowered(fx::where(a < b, a.exp(), (b * b + d).log()) + fx::maximum(a, c) - fx::minimum(b, 0.5f));
    check_lowered((d.sqrt() - a.neg()).sin() * fx::pow(d, 1.5f));
    check_lowered(a <= c);
    check_lowered((a != a.flip<1>()).cast<float>() * 3.f + (b > 0.f).cast<float>());
  }
}

namespace {
// Values a float -> integer cast must define: NaN, infinities, the limits of every integer type and
// their neighbours, halves (truncation), and random magnitudes up to 1e30 of either sign.
template <class T, index_t N>
fx::Tensor<T, N> cast_inputs(std::mt19937& rng) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {std::nan(""),
                           inf,
                           -inf,
                           0,
                           -0.0,
                           0.5,
                           -0.5,
                           0.99,
                           -0.99,
                           1.5,
                           -1.5,
                           2.7,
                           -2.7,
                           127,
                           127.5,
                           128,
                           -128,
                           -128.5,
                           -129,
                           255,
                           255.9,
                           256,
                           300.5,
                           -300.5,
                           2147483520.0,
                           2147483647,
                           2147483648.0,
                           -2147483648.0,
                           -2147483904.0,
                           3e9,
                           -3e9,
                           9.2233720368547748e18,
                           9.223372036854775807e18,
                           -9.223372036854775808e18,
                           1e19,
                           -1e19,
                           1e30,
                           -1e30};
  std::uniform_real_distribution<double> e(-2, 30), u(0, 1);
  while (v.size() < static_cast<std::size_t>(N))
    v.push_back((u(rng) < 0.5 ? -1 : 1) * std::pow(10.0, e(rng)));
  fx::Tensor<T, N> t;
  for (index_t i = 0; i < N; ++i) t[i] = static_cast<T>(v[static_cast<std::size_t>(i)]);
  return t;
}
// x.cast<U>() evaluated inline equals the same cast on every host device, exactly.
template <class U, class T, index_t N>
void check_cast(const fx::Tensor<T, N>& x) {
  fx::Tensor<U, N> got = x.template cast<U>();
  for (const std::string& dev : host_devices()) {
    std::vector<U> want = metagrad::lower(x.template cast<U>(), dev).template to_vector<U>();
    for (index_t i = 0; i < N; ++i) {
      INFO(dev << ": " << metagrad::dtype_of<T>.name << " " << x[i] << " as " << metagrad::dtype_of<U>.name);
      REQUIRE(+got[i] == +want[static_cast<std::size_t>(i)]);
    }
  }
}
template <class T>
void check_casts(std::mt19937& rng) {
  auto x = cast_inputs<T, 256>(rng);
  check_cast<std::int8_t>(x);
  check_cast<std::uint8_t>(x);
  check_cast<std::int32_t>(x);
  check_cast<std::int64_t>(x);
  check_cast<bool>(x);
}
}  // namespace

// Float -> integer casts saturate to the type's range and give 0 for NaN (static_cast is undefined
// there): the static path's cast gives each device's result (docs/design-changes.md).
TEST_CASE("lower: float to integer casts saturate, NaN gives 0, as on every device", "[lower]") {
  std::mt19937 rng(7);
  check_casts<float>(rng);
  check_casts<double>(rng);
}

TEST_CASE("lower: movement ops of leaves and of expressions", "[lower]") {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 5; ++trial) {
    auto a = random_tensor<4, 5>(rng);
    auto b = random_tensor<1, 5>(rng);
    check_lowered(a.permute<1, 0>().pad<1, 0, 0, 2>().flip<0>().shrink<1, 5, 0, 6>().reshape<2, 12>());
    check_lowered((a + b.expand<4, 5>()).transpose().reshape<20>().shrink<3, 17>() * 2.f);
    check_lowered((a * a).reshape<2, 2, 5>().permute<2, 0, 1>().flip<0, 2>().pad<0, 0, 1, 1, 2, 0>());
  }
}

TEST_CASE("lower: reductions, mean, softmax and log_softmax", "[lower]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 5; ++trial) {
    auto a = random_tensor<3, 4, 5>(rng);
    check_lowered(a.sum<1>());
    check_lowered(a.max<0, 2>(fx::keepdim) + a.min<0, 2>(fx::keepdim));
    check_lowered(a.mean<2>() * a.sum<2>());
    check_lowered(a.softmax<1>());
    check_lowered(a.log_softmax<-1>().exp().sum<2>());
    check_lowered((a.permute<2, 0, 1>() * 3.f).sum<0, 2>());
  }
}

TEST_CASE("lower: matmul, linear, conv2d, pooling, cross-entropy and an MLP forward pass", "[lower]") {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 3; ++trial) {
    auto x = random_tensor<8, 12>(rng);
    auto w1 = random_tensor<12, 16>(rng, -0.5, 0.5);
    auto b1 = random_tensor<16>(rng);
    auto w2 = random_tensor<16, 5>(rng, -0.5, 0.5);
    auto b2 = random_tensor<5>(rng);
    check_lowered(fx::matmul(x, w1));
    check_lowered(broadcast_matmul<8, 12, 16>(x, w1));
    check_lowered(fx::matmul(x.transpose(), random_tensor<8, 3>(rng)));
    check_lowered(fx::matmul(random_tensor<2, 3, 4>(rng), random_tensor<4, 5>(rng)));
    auto h = fx::linear(x, w1, b1).relu();
    check_lowered(fx::linear(h, w2, b2).log_softmax<1>());
    fx::Tensor<std::int32_t, 8> y;
    for (auto& v : y) v = std::uniform_int_distribution<std::int32_t>(0, 4)(rng);
    check_lowered(fx::sparse_categorical_crossentropy(fx::linear(h, w2, b2), y));
    auto img = random_tensor<2, 3, 8, 8>(rng);
    auto k = random_tensor<4, 3, 3, 3>(rng, -0.5, 0.5);
    check_lowered(fx::conv2d(img, k));
    check_lowered(fx::conv2d<2, 1>(img, k).relu());
    check_lowered(fx::max_pool2d<2>(img) + fx::avg_pool2d<2>(img));
  }
}

TEST_CASE("lower: the kernels are the dynamic path's own for the same computation", "[lower]") {
  std::mt19937 rng(5);
  auto a = random_tensor<6, 7>(rng);
  auto b = random_tensor<6, 7>(rng);
  auto kernels = [](const Tensor& t) {
    metagrad::GlobalCounters::cache.emplace();
    t.to_vector<float>();
    std::vector<std::string> src;
    for (const auto& e : *metagrad::GlobalCounters::cache) src.push_back(e.prg.prg);
    metagrad::GlobalCounters::cache.reset();
    return src;
  };
  metagrad::Lowering L("CLANG");
  Tensor A = L.leaf(a), B = L.leaf(b);
  std::vector<std::string> lowered = kernels(L(((a * b).sum<1>(fx::keepdim) + 1.f).exp()));
  std::vector<std::string> dynamic = kernels(((A * B).sum(1, true) + 1).exp());
  REQUIRE(!lowered.empty());
  REQUIRE(lowered == dynamic);
  // softmax reads its input three times in the expression tree: lowered once, as the dynamic path does.
  REQUIRE(kernels(L((a * b + 1.f).softmax<1>())) == kernels((A * B + 1).softmax(1)));
}

TEST_CASE("lower: a Lowering shares each leaf, binds given Tensors, and its graph differentiates",
          "[lower]") {
  std::mt19937 rng(6);
  auto x = random_tensor<5, 3>(rng);
  auto w = random_tensor<3, 2>(rng);
  metagrad::Lowering L("CPU");
  const Tensor& xl = L.leaf(x);
  REQUIRE(xl.to_vector<float>() == std::vector<float>(x.begin(), x.end()));
  REQUIRE(L.leaf(x).lazydata.get() == xl.lazydata.get());  // one Tensor per leaf
  Tensor wd(std::vector<float>(w.begin(), w.end()), {3, 2}, {.device = "CPU", .requires_grad = true});
  L.bind(w, wd);
  REQUIRE_THROWS_WITH(L.bind(x, wd), Catch::Contains("(5, 3)") && Catch::Contains("(3, 2)"));
  // d/dw sum(relu(x @ w)) = x^T @ (x @ w > 0), computed by loops.
  Tensor loss = L(fx::matmul(x, w).relu()).sum();
  loss.backward();
  std::vector<float> g = wd.grad->to_vector<float>();
  for (index_t k = 0; k < 3; ++k)
    for (index_t n = 0; n < 2; ++n) {
      double want = 0;
      for (index_t m = 0; m < 5; ++m) {
        double z = 0;
        for (index_t j = 0; j < 3; ++j) z += double(x(m, j)) * double(w(j, n));
        want += z > 0 ? x(m, k) : 0;
      }
      REQUIRE(g[static_cast<std::size_t>(k * 2 + n)] == Approx(want).margin(1e-5));
    }
}

namespace {

// A node for the type-level mlops (fixed::Vjp): its forward value and children, as expressions.
template <class E>
struct Node {
  E e;
  template <std::size_t I>
  using child_t = boost::mp11::mp_at_c<typename E::children_types, I>;
  E out() const { return e; }
  template <std::size_t I>
  auto x() const {
    return std::get<I>(e.children());
  }
};

// Vjp<op>::grad<0> of `e` (whose child 0 is the leaf a) for the incoming gradient g, lowered on each
// host device, against the dynamic path's backward of sum(e * g) through the lowered forward.
template <class E, class A, class G>
void check_vjp(const E& e, const A& a, const G& g) {
  auto ge = fx::Vjp<typename E::op_type>::template grad<0>(Node<E>{e}, g.expr());
  metagrad::Lowering ref("CPU");
  Tensor ad(std::vector<float>(a.begin(), a.end()), A::shape::dims, {.device = "CPU", .requires_grad = true});
  ref.bind(a, ad);
  (ref(e) * ref(g)).sum().backward();
  std::vector<float> want = ad.grad->to_vector<float>();
  for (const std::string& dev : host_devices()) {
    std::vector<float> got = metagrad::lower(ge, dev).template to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("device " << dev << ", element " << i);
      REQUIRE(got[i] == Approx(want[i]).margin(1e-5).epsilon(1e-4));
    }
  }
}

}  // namespace

TEST_CASE("lower: fixed::Vjp gradient expressions equal the dynamic backward on every host device",
          "[lower]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3; ++trial) {
    auto a = random_tensor<4, 6>(rng, 0.2, 2);
    auto b = random_tensor<4, 6>(rng, 0.5, 2);
    auto g = random_tensor<4, 6>(rng);
    check_vjp((a * b).expr(), a, g);
    check_vjp((a / b).expr(), a, g);
    check_vjp(a.exp().expr(), a, g);
    check_vjp(a.log().expr(), a, g);
    check_vjp(a.sigmoid().expr(), a, g);
    check_vjp(a.sqrt().expr(), a, g);
    fx::Tensor<float, 4, 6> c = a - 1.f;
    check_vjp(c.relu().expr(), c, g);
    check_vjp(a.sum<1>(fx::keepdim).expr(), a, random_tensor<4, 1>(rng));
    check_vjp(a.max<0>(fx::keepdim).expr(), a, random_tensor<1, 6>(rng));
    check_vjp(a.permute<1, 0>().expr(), a, random_tensor<6, 4>(rng));
    check_vjp(a.pad<1, 0, 0, 2>().expr(), a, random_tensor<5, 8>(rng));
    check_vjp(a.shrink<1, 3, 2, 6>().expr(), a, random_tensor<2, 4>(rng));
    check_vjp(a.flip<1>().expr(), a, g);
  }
}

TEST_CASE("lower: fixed::grad's gradient expressions, lowered to CLANG, equal the dynamic backward",
          "[lower]") {
  std::mt19937 rng(8);
  auto x = random_tensor<8, 12>(rng);
  auto w1 = random_tensor<12, 16>(rng, -0.5, 0.5);
  auto b1 = random_tensor<16>(rng);
  auto w2 = random_tensor<16, 5>(rng, -0.5, 0.5);
  auto loss = (fx::matmul((fx::matmul(x, w1) + b1).relu(), w2).log_softmax<1>() * 0.1f).sum<0, 1>();
  auto g = fx::grad(loss, w1, b1, w2);
  metagrad::Lowering L("CLANG");
  std::vector<Tensor> params{L.leaf(w1), L.leaf(b1), L.leaf(w2)};
  for (Tensor& p : params) p.requires_grad_();
  L(loss).backward();
  auto check = [](const Tensor& lowered, const Tensor& p) {
    std::vector<float> want = p.grad->to_vector<float>(), got = lowered.to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      REQUIRE(got[i] == Approx(want[i]).margin(1e-5).epsilon(1e-4));
  };
  metagrad::Lowering G("CLANG");  // the gradient expressions, as expressions: lowered, then realized
  check(G(get<0>(g)), params[0]);
  check(G(get<1>(g)), params[1]);
  check(G(get<2>(g)), params[2]);
}
