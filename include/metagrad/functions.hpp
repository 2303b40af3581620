#pragma once
// The elementwise functions, one definition for both paths: a traits entry per Fn (as Eigen's
// functor_traits) holds all that either path knows of a function. The static path's nodes
// (fixed::op::Map<F>, inline evaluation, fixed::grad, lowering) and the dynamic path's mlops
// (mlops::Map<F>, runtime/tensor/mlops.cpp) are both generated from it, so a new differentiable function
// is one entry here plus its method on each front end (fixed::ExprBase, Tensor).
//
// An entry has
//   name          for messages, fixed::describe and the mlop's name
//   arity         1, 2 or 3 operands
//   comparison    the result is bool (and has no gradient)
//   float_only    needs a floating-point operand (the static method's static_assert)
//   cost          rough cycles per element (Eigen's Cost): the static contiguous loop writes its
//                 vector form out by hand only for the expensive functions (kVectorCost up,
//                 detail/fixed/vec_form.hpp)
//   vector        scalar() also runs on GCC vectors (detail/fixed/simd.hpp), as plain arithmetic does
//   scalar(x...)  one element: the static path's inline evaluation
//   forward(x...) the function in the primitives of ops.hpp (exp2, log2, sin, +, -, *, /, pow,
//                 ==, maximum, where): the dynamic path's lowering; only for functions the dynamic
//                 path has as an mlop (the others, such as neg and sqrt, are hlops there)
//   grad(n, g)    the backward rule: a std::tuple of d loss / d child I for every child, each
//                 `when<I>(n, [&] { ... })` so that a path computes only the children it needs
//   lower(t...)   the function as a metagrad::Tensor method, for lowering a static expression
//
// forward and grad are written once in a small vocabulary that both paths instantiate: operands
// are static expressions or the dynamic path's adaptor over LazyBuffer (runtime/tensor/mlops.cpp), with
// +, -, *, / (also with a double on either side), unary -, ==, != (against an operand or a
// double), where(c, a, b) and maximum(a, b) (either side may be a double), pow(a, b), and the
// methods of the functions themselves (x.exp(), x.log(), x.sin(), ...). A node n gives the
// forward's value (n.out()), child I's (arg<I>(n)) and whether child I needs a gradient (when).
// Each path writes those operations as it always did (the dynamic -g is 0 - g, its x != y is
// (x == y) == 0), so the dynamic path's kernels are the ones its hand-written mlops made.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <tuple>
#include <type_traits>
#include <utility>

#include "metagrad/fixed/math.hpp"  // scalar exp and sigmoid the compiler vectorises

namespace metagrad::fn {

// Every elementwise function, in no order that means anything: each property is in its traits.
enum class Fn : std::uint8_t {
  NEG,
  EXP,
  LOG,
  SIN,
  SQRT,
  RELU,
  SIGMOID,
  ERF,
  GELU,
  ATAN,
  ASIN,
  ACOS,
  EXP2,
  ADD,
  SUB,
  MUL,
  DIV,
  POW,
  MAX,
  MIN,
  CMPLT,
  CMPLE,
  CMPEQ,
  CMPNE,
  WHERE,
  COUNT_  // the number of functions, not one
};
inline constexpr int kFnCount = static_cast<int>(Fn::COUNT_);

// A backward rule's result for a child that gets no gradient (comparisons, a where's condition).
struct none {};

template <Fn F>
struct FnTraits;

// The node protocol of the rules, as free functions: child I's forward value, and f() where child
// I needs a gradient (else the path's "no gradient").
template <std::size_t I, class N>
auto arg(const N& n) {
  return n.template x<I>();
}
template <std::size_t I, class N, class F>
auto when(const N& n, F f) {
  return n.template when<I>(f);
}

struct Defaults {
  static constexpr int arity = 1;
  static constexpr bool comparison = false, float_only = false, vector = false;
  static constexpr int cost = 1;
};
// Cheap, exact on vectors as on scalars (GCC vector extensions take the same operators).
struct Simple : Defaults {
  static constexpr bool vector = true;
};
struct Binary : Simple {
  static constexpr int arity = 2;
};
struct Transcendental : Defaults {
  static constexpr bool float_only = true;
  static constexpr int cost = 20;
};
struct Comparison : Defaults {
  static constexpr int arity = 2;
  static constexpr bool comparison = true;
  template <class N, class G>
  static auto grad(const N&, const G&) {
    return std::tuple<none, none>{};
  }
};
// max and min: as PyTorch, ties split the gradient equally, the side that loses gets 0 (a select:
// an inf in g gives 0, not NaN), and with a NaN on either side both get g.
template <bool IsMax>
struct Extremum : Binary {
  static constexpr const char* name = IsMax ? "maximum" : "minimum";
  template <class X>
  static X scalar(X x, X y) {  // a NaN on either side gives NaN, as the dynamic MAX
    if constexpr (IsMax)
      return X(x > y || x != x ? x : y);
    else
      return X(x < y || x != x ? x : y);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    auto x = arg<0>(n), y = arg<1>(n), out = n.out();
    auto tie = x == y;
    auto half = g * 0.5;
    auto side = [&](const auto& other) { return where(tie, half, where(other == out, 0.0, g)); };
    return std::tuple{when<0>(n, [&] { return side(y); }), when<1>(n, [&] { return side(x); })};
  }
  static auto lower(const auto& x, const auto& y) {
    if constexpr (IsMax)
      return x.maximum(y);
    else
      return x.minimum(y);
  }
};

// erf's two pieces (Norbert Juffa's float minimax coefficients): x + x p(x^2) below kErfSplit,
// sign(x) (1 - exp(q(|x|))) from there; both within 7e-8 of erf in float arithmetic, fused or not (measured:
// test_functions.cpp).
inline constexpr float kErfSplit = 0.927734375f;
inline constexpr float kErfSmall[] = {-5.96761703e-4f, 4.99119423e-3f,  -2.67681349e-2f,
                                      1.12819925e-1f,  -3.76125336e-1f, 1.28379166e-1f};
inline constexpr float kErfLarge[] = {-1.72853470e-5f, 3.83197126e-4f,  -3.88396438e-3f, 2.42546219e-2f,
                                      -1.06777877e-1f, -6.34846687e-1f, -1.28717512e-1f};

template <>
struct FnTraits<Fn::NEG> : Simple {
  static constexpr const char* name = "neg";
  template <class X>
  static X scalar(X x) {
    return X(-x);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return -g; })};
  }
  static auto lower(const auto& x) { return x.neg(); }
};
template <>
struct FnTraits<Fn::EXP> : Transcendental {
  static constexpr const char* name = "exp";
  template <class X>
  static X scalar(X x) {
    return fixed::math::exp(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return (x * (1 / std::numbers::ln2)).exp2();
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return n.out() * g; })};
  }
  static auto lower(const auto& x) { return x.exp(); }
};
// 2^x: the primitive under exp and sigmoid. Exact at integers (a power of two, not e^(x ln 2)
// rounded twice), on every device and in the static path's vector form.
template <>
struct FnTraits<Fn::EXP2> : Transcendental {
  static constexpr const char* name = "exp2";
  template <class X>
  static X scalar(X x) {
    return std::exp2(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return x.exp2();
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return n.out() * std::numbers::ln2 * g; })};
  }
  static auto lower(const auto& x) { return x.exp2(); }
};
template <>
struct FnTraits<Fn::LOG> : Transcendental {
  static constexpr const char* name = "log";
  template <class X>
  static X scalar(X x) {
    return std::log(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return x.log2() * std::numbers::ln2;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return g / arg<0>(n); })};
  }
  static auto lower(const auto& x) { return x.log(); }
};
template <>
struct FnTraits<Fn::SIN> : Transcendental {
  static constexpr const char* name = "sin";
  template <class X>
  static X scalar(X x) {
    return std::sin(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return x.sin();  // a primitive
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {  // cos(x) = sin(pi/2 - x)
    return std::tuple{when<0>(n, [&] { return (std::numbers::pi / 2 - arg<0>(n)).sin() * g; })};
  }
  static auto lower(const auto& x) { return x.sin(); }
};
template <>
struct FnTraits<Fn::SQRT> : Transcendental {
  static constexpr const char* name = "sqrt";
  template <class X>
  static X scalar(X x) {
    return std::sqrt(x);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return g / (n.out() * 2.0); })};
  }
  static auto lower(const auto& x) { return x.sqrt(); }
};
template <>
struct FnTraits<Fn::RELU> : Simple {
  static constexpr const char* name = "relu";
  template <class X>
  static X scalar(X x) {              // the dynamic MAX(x, 0): NaN passes, -0 gives +0
    return X(!(x <= X{}) ? x : X{});  // one compare (NaN compares false): a select, vectorised
  }
  template <class X>
  static auto forward(const X& x) {
    return maximum(x, 0.0);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {  // g where the output is not 0 (0 at 0, as PyTorch)
    return std::tuple{when<0>(n, [&] { return where(n.out() != 0.0, g, 0.0); })};
  }
  static auto lower(const auto& x) { return x.relu(); }
};
// 1 / (1 + exp(-x)) with one exp (overflow gives 1 / inf = 0); the backward uses the output only:
// s (1 - s) is finite everywhere, where the formula's own chain rule gives inf / inf at large -x.
template <>
struct FnTraits<Fn::SIGMOID> : Transcendental {
  static constexpr const char* name = "sigmoid";
  static constexpr int cost = 25;
  template <class X>
  static X scalar(X x) {
    return fixed::math::sigmoid(x);
  }
  template <class X>
  static auto forward(const X& x) {
    auto e = (x * (-1 / std::numbers::ln2)).exp2();
    return 1.0 / (1.0 + e);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] {
      auto s = n.out();
      return s * (1.0 - s) * g;
    })};
  }
  static auto lower(const auto& x) { return x.sigmoid(); }
};
// The Gauss error function (exact GELU): two polynomials joined at |x| = kErfSplit, exact at
// 0, +-inf; NaN stays NaN. d erf(x) = 2 / sqrt(pi) exp(-x^2).
template <>
struct FnTraits<Fn::ERF> : Transcendental {
  static constexpr const char* name = "erf";
  static constexpr int cost = 30;
  static float scalar(float x) {
    using fixed::math::madd;
    float t = x < 0 ? -x : x, s = x * x;
    const float* q = kErfLarge;
    float r = madd(madd(q[0], t, q[1]), s, madd(q[2], t, q[3]));
    for (int i = 4; i < 7; ++i) r = madd(r, t, q[i]);
    float big = 1.f - fixed::math::exp(madd(r, t, -t));
    big = x < 0 ? -big : big;
    float p = kErfSmall[0];
    for (int i = 1; i < 6; ++i) p = madd(p, s, kErfSmall[i]);
    float y = t < kErfSplit ? madd(p, x, x) : big;
    return x != x ? x : y;
  }
  static double scalar(double x) { return std::erf(x); }
  template <class X>
  static auto forward(const X& x) {
    const float* q = kErfLarge;
    auto t = maximum(x, -x), s = x * x;
    auto r = (t * q[0] + q[1]) * s + (t * q[2] + q[3]);
    for (int i = 4; i < 7; ++i) r = r * t + q[i];
    auto e = 1.0 - ((r * t - t) * (1 / std::numbers::ln2)).exp2();
    auto p = s * kErfSmall[0] + kErfSmall[1];
    for (int i = 2; i < 6; ++i) p = p * s + kErfSmall[i];
    auto y = where(maximum(t, kErfSplit) == t, where(x == t, e, -e), p * x + x);
    return where(x == x, y, x);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] {
      auto x = arg<0>(n);
      return (x * x * -1.0).exp() * (2 * std::numbers::inv_sqrtpi) * g;
    })};
  }
  static auto lower(const auto& x) { return x.erf(); }
};

// GELU's tanh approximation (PyTorch's gelu(approximate="tanh")), 0.5 x (1 + tanh(u)) with
// u = sqrt(2 / pi) (x + 0.044715 x^3), as x sigmoid(2u): one exp, and one function for the
// scheduler, so forward and backward are a kernel each (the composition of tanh, products and
// sums was six passes over a transformer's widest activation). Where 1 + tanh(u) rounds to 0 this
// keeps x sigmoid(2u)'s digits. d/dx = s + x s (1 - s) 2u', s = sigmoid(2u).
template <>
struct FnTraits<Fn::GELU> : Transcendental {
  static constexpr const char* name = "gelu";
  static constexpr int cost = 30;
  static constexpr double k = 0.7978845608028654, c = 0.044715;  // sqrt(2 / pi), the cubic's weight
  template <class X>
  static X scalar(X x) {
    return X(x * fixed::math::sigmoid(X(2 * k) * x * (X(1) + X(c) * x * x)));
  }
  template <class X>
  static auto two_u_sigmoid(const X& x) {  // sigmoid(2u), as SIGMOID's forward
    auto e = ((x * (1.0 + x * x * c)) * (-2 * k / std::numbers::ln2)).exp2();
    return 1.0 / (1.0 + e);
  }
  template <class X>
  static auto forward(const X& x) {
    return x * two_u_sigmoid(x);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] {
      auto x = arg<0>(n);
      auto s = two_u_sigmoid(x);
      return (s + x * s * (1.0 - s) * ((1.0 + x * x * (3 * c)) * (2 * k))) * g;
    })};
  }
  static auto lower(const auto& x) { return x.gelu(); }
};

// atan in the primitives (Cephes' atan: within 2 ulps in float64, and so in float32): |x| reduced
// to [0, 0.66] by atan(t) = pi/2 - atan(1/t) above tan(3pi/8) and pi/4 + atan((t - 1) / (t + 1))
// from 0.66, then a rational function r + r z P(z) / Q(z), z = r^2. NaN stays NaN (no branch holds),
// +-inf gives +-pi/2 (-1/inf is 0).
inline constexpr double kAtanP[] = {-8.750608600031904122785e-1, -1.615753718733365076637e1,
                                    -7.500855792314704667340e1, -1.228866684490136173410e2,
                                    -6.485021904942025371773e1};
inline constexpr double kAtanQ[] = {2.485846490142306297962e1, 1.650270098316988542046e2,
                                    4.328810604912902668951e2, 4.853903996359136964868e2,
                                    1.945506571482613964425e2};
template <class X>
auto atan_of(const X& x) {
  auto t = maximum(x, -x);
  auto big = maximum(t, 2.41421356237309504880) == t, mid = maximum(t, 0.66) == t;
  auto r = where(big, -1.0 / t, where(mid, (t - 1.0) / (t + 1.0), t));
  auto z = r * r;
  auto p = z * kAtanP[0] + kAtanP[1], q = z + kAtanQ[0];
  for (int i = 2; i < 5; ++i) p = p * z + kAtanP[i];
  for (int i = 1; i < 5; ++i) q = q * z + kAtanQ[i];
  auto a = r * (z * p / q) + r;
  auto y = where(big, std::numbers::pi / 2 + a, where(mid, std::numbers::pi / 4 + a, a));
  return where(maximum(x, 0.0) == x, y, -y);
}
// sqrt(1 - x^2) as sqrt(1 - x) sqrt(1 + x): exact near |x| = 1, where it matters, and NaN for every
// |x| > 1 (the product (1 - x)(1 + x) overflows to -inf at 1e30, where a power gives sqrt(-inf) = inf).
template <class X>
auto root_one_minus_square(const X& x) {
  return (1.0 - x).sqrt() * (1.0 + x).sqrt();
}
template <>
struct FnTraits<Fn::ATAN> : Transcendental {
  static constexpr const char* name = "atan";
  static constexpr int cost = 30;
  template <class X>
  static X scalar(X x) {
    return std::atan(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return atan_of(x);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] {
      auto x = arg<0>(n);
      return g / (x * x + 1.0);
    })};
  }
  static auto lower(const auto& x) { return x.atan(); }
};
// asin(x) = atan(x / sqrt(1 - x^2)): +-pi/2 at +-1 (x / 0 is +-inf), NaN outside [-1, 1].
template <>
struct FnTraits<Fn::ASIN> : Transcendental {
  static constexpr const char* name = "asin";
  static constexpr int cost = 40;
  template <class X>
  static X scalar(X x) {
    return std::asin(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return atan_of(x / root_one_minus_square(x));
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return g / root_one_minus_square(arg<0>(n)); })};
  }
  static auto lower(const auto& x) { return x.asin(); }
};
// acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): keeps its relative precision near x = 1 (where
// pi/2 - asin(x) cancels), pi at -1, NaN outside [-1, 1].
template <>
struct FnTraits<Fn::ACOS> : Transcendental {
  static constexpr const char* name = "acos";
  static constexpr int cost = 40;
  template <class X>
  static X scalar(X x) {
    return std::acos(x);
  }
  template <class X>
  static auto forward(const X& x) {
    return atan_of(((1.0 - x) / (1.0 + x)).sqrt()) * 2.0;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return -g / root_one_minus_square(arg<0>(n)); })};
  }
  static auto lower(const auto& x) { return x.acos(); }
};

template <>
struct FnTraits<Fn::ADD> : Binary {
  static constexpr const char* name = "add";
  template <class X>
  static X scalar(X x, X y) {
    return X(x + y);
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return x + y;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return g; }), when<1>(n, [&] { return g; })};
  }
  static auto lower(const auto& x, const auto& y) { return x.add(y); }
};
template <>
struct FnTraits<Fn::SUB> : Binary {
  static constexpr const char* name = "sub";
  template <class X>
  static X scalar(X x, X y) {
    return X(x - y);
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return x - y;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return g; }), when<1>(n, [&] { return -g; })};
  }
  static auto lower(const auto& x, const auto& y) { return x.sub(y); }
};
template <>
struct FnTraits<Fn::MUL> : Binary {
  static constexpr const char* name = "mul";
  template <class X>
  static X scalar(X x, X y) {
    return X(x * y);
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return x * y;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    return std::tuple{when<0>(n, [&] { return arg<1>(n) * g; }), when<1>(n, [&] { return arg<0>(n) * g; })};
  }
  static auto lower(const auto& x, const auto& y) { return x.mul(y); }
};
template <>
struct FnTraits<Fn::DIV> : Binary {
  static constexpr const char* name = "div";
  static constexpr int cost = 4;
  template <class X>
  static X scalar(X x, X y) {
    return X(x / y);
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return x / y;
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    auto dy = when<1>(n, [&] {
      auto y = arg<1>(n);
      return -g * arg<0>(n) / (y * y);
    });
    return std::tuple{when<0>(n, [&] { return g / arg<1>(n); }), dy};
  }
  static auto lower(const auto& x, const auto& y) { return x.div(y); }
};
template <>
struct FnTraits<Fn::POW> : Defaults {
  static constexpr const char* name = "pow";
  static constexpr int arity = 2, cost = 40;
  template <class X>
  static X scalar(X x, X y) {
    return X(std::pow(x, y));
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return pow(x, y);
  }
  // d/dx = y x^(y-1), 0 where y = 0; d/dy = x^y ln(x), 0 where x = 0 and y >= 0: PyTorch's rules,
  // which keep 0 * inf = NaN (x = 0) out of the gradient.
  template <class N, class G>
  static auto grad(const N& n, const G& g) {
    auto x = arg<0>(n), y = arg<1>(n);
    auto dx = when<0>(n, [&] { return where(y != 0.0, y * pow(x, y - 1.0) * g, 0.0); });
    auto dy = when<1>(n, [&] {
      auto y_nonneg = maximum(y, 0.0) == y;
      auto zero_base = (x == 0.0) * y_nonneg;  // bools: and
      return where(zero_base == 0.0, n.out() * x.log() * g, 0.0);
    });
    return std::tuple{dx, dy};
  }
  static auto lower(const auto& x, const auto& y) { return x.pow(y); }
};
template <>
struct FnTraits<Fn::MAX> : Extremum<true> {
  template <class X>
  static auto forward(const X& x, const X& y) {
    return maximum(x, y);
  }
};
template <>
struct FnTraits<Fn::MIN> : Extremum<false> {};

template <>
struct FnTraits<Fn::CMPLT> : Comparison {
  static constexpr const char* name = "lt";
  template <class X>
  static bool scalar(X x, X y) {
    return x < y;
  }
  static auto lower(const auto& x, const auto& y) { return x.lt(y); }
};
template <>
struct FnTraits<Fn::CMPLE> : Comparison {
  static constexpr const char* name = "le";
  template <class X>
  static bool scalar(X x, X y) {
    return x <= y;
  }
  static auto lower(const auto& x, const auto& y) { return x.le(y); }
};
template <>
struct FnTraits<Fn::CMPEQ> : Comparison {
  static constexpr const char* name = "eq";
  template <class X>
  static bool scalar(X x, X y) {
    return x == y;
  }
  template <class X>
  static auto forward(const X& x, const X& y) {
    return x == y;
  }
  static auto lower(const auto& x, const auto& y) { return x.eq(y); }
};
template <>
struct FnTraits<Fn::CMPNE> : Comparison {
  static constexpr const char* name = "ne";
  template <class X>
  static bool scalar(X x, X y) {
    return x != y;
  }
  static auto lower(const auto& x, const auto& y) { return x.ne(y); }
};

// cond ? x : y, a true select: the branch not taken never reaches the result (nor its gradient).
template <>
struct FnTraits<Fn::WHERE> : Defaults {
  static constexpr const char* name = "where";
  static constexpr int arity = 3;
  template <class C, class X>
  static X scalar(C c, X x, X y) {
    return c ? x : y;
  }
  template <class C, class X>
  static auto forward(const C& c, const X& x, const X& y) {
    return where(c, x, y);
  }
  template <class N, class G>
  static auto grad(const N& n, const G& g) {  // the taken branch gets g
    auto c = arg<0>(n);
    return std::tuple{none{}, when<1>(n, [&] { return where(c, g, 0.0); }),
                      when<2>(n, [&] { return where(c == 0.0, g, 0.0); })};
  }
  static auto lower(const auto& c, const auto& x, const auto& y) { return c.where(x, y); }
};

// A function's arity and whether it compares, for code that holds F as a value.
constexpr int arity(Fn f) {
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    int a = 0;
    ((static_cast<int>(f) == I ? a = FnTraits<Fn(I)>::arity : 0), ...);
    return a;
  }
  (std::make_integer_sequence<int, kFnCount>{});
}
constexpr bool is_comparison(Fn f) {
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    return ((static_cast<int>(f) == I && FnTraits<Fn(I)>::comparison) || ...);
  }
  (std::make_integer_sequence<int, kFnCount>{});
}

}  // namespace metagrad::fn
