#pragma once
// The static path's elementwise functions, one traits entry per Fn (as Eigen's functor_traits):
// all that inline evaluation (eval.hpp), the VJP table (vjp.hpp) and lowering (lower.hpp) know of
// a function is here, so a new one is its Fn value and method (expr.hpp, elementwise.hpp) and its
// entry below. An entry has
//   name          for messages and fixed::describe
//   float_only    needs a floating-point operand (the method's static_assert)
//   cost          rough cycles per element (Eigen's Cost): the contiguous loop writes its vector
//                 form out by hand only for the expensive functions (kVectorCost and up)
//   vector        scalar() also runs on detail/fixed/simd.hpp's vectors, or vec() is that vector form
//   scalar(x...)  one element
//   grad<I>(n, g) d loss / d child I, or `none`: n is the node (n.out(), n.x<I>()), g the incoming
//                 gradient; the dynamic path's rule (runtime/mlops.cpp), so both paths agree
//   lower(t...)   the same function on the dynamic path, t the lowered children (Tensor methods)
// grad and lower are templates over their operands, so this file needs neither grad.hpp nor Tensor.
#include <cmath>
#include <cstddef>
#include <numbers>
#include <type_traits>

#include "metagrad/detail/fixed/functions.hpp"
#include "metagrad/fixed/expr.hpp"
#include "metagrad/fixed/math.hpp"

namespace metagrad::fixed {

inline constexpr int kVectorCost = 10;

template <Fn F>
struct FnTraits;

template <>
struct FnTraits<Fn::NEG> : detail::Simple {
  static constexpr const char* name = "neg";
  template <class X>
  static X scalar(X x) {
    return X(-x);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    return -g;
  }
  static auto lower(const auto& x) { return x.neg(); }
};
template <>
struct FnTraits<Fn::EXP> : detail::Transcendental {
  static constexpr const char* name = "exp";
  static constexpr bool vector = detail::kVectorMath;
  template <class X>
  static X scalar(X x) {
    return math::exp(x);
  }
#if defined(__AVX512F__)
  template <class V>
  static V vec(V x) {
    return detail::float_vector<V>(x, detail::vexp, scalar<double>);
  }
#endif
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return n.out() * g;
  }
  static auto lower(const auto& x) { return x.exp(); }
};
template <>
struct FnTraits<Fn::LOG> : detail::Transcendental {
  static constexpr const char* name = "log";
  template <class X>
  static X scalar(X x) {
    return std::log(x);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return g / n.template x<0>();
  }
  static auto lower(const auto& x) { return x.log(); }
};
template <>
struct FnTraits<Fn::SIN> : detail::Transcendental {
  static constexpr const char* name = "sin";
  template <class X>
  static X scalar(X x) {
    return std::sin(x);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {  // cos(x) = sin(pi/2 - x)
    using T = typename G::value_type;
    return (T(std::numbers::pi / 2) - n.template x<0>()).sin() * g;
  }
  static auto lower(const auto& x) { return x.sin(); }
};
template <>
struct FnTraits<Fn::SQRT> : detail::Transcendental {
  static constexpr const char* name = "sqrt";
  template <class X>
  static X scalar(X x) {
    return std::sqrt(x);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    using T = typename G::value_type;
    return g / (n.out() * T(2));
  }
  static auto lower(const auto& x) { return x.sqrt(); }
};
template <>
struct FnTraits<Fn::RELU> : detail::Simple {
  static constexpr const char* name = "relu";
  template <class X>
  static X scalar(X x) {
    return X(x > X{} ? x : X{});
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {  // 1 where the output is positive (0 at 0, as PyTorch)
    using T = typename G::value_type;
    return (T(1) - (n.out() == T(0)).template cast<T>()) * g;
  }
  static auto lower(const auto& x) { return x.relu(); }
};
template <>
struct FnTraits<Fn::SIGMOID> : detail::Transcendental {
  static constexpr const char* name = "sigmoid";
  static constexpr bool vector = detail::kVectorMath;
  static constexpr int cost = 25;
  template <class X>
  static X scalar(X x) {
    return math::sigmoid(x);
  }
#if defined(__AVX512F__)
  template <class V>
  static V vec(V x) {
    return detail::float_vector<V>(x, detail::vsigmoid, scalar<double>);
  }
#endif
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    using T = typename G::value_type;
    auto s = n.out();
    return s * (T(1) - s) * g;
  }
  static auto lower(const auto& x) { return x.sigmoid(); }
};

template <>
struct FnTraits<Fn::ADD> : detail::Simple {
  static constexpr const char* name = "add";
  template <class X>
  static X scalar(X x, X y) {
    return X(x + y);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    return g;
  }
  static auto lower(const auto& x, const auto& y) { return x.add(y); }
};
template <>
struct FnTraits<Fn::SUB> : detail::Simple {
  static constexpr const char* name = "sub";
  template <class X>
  static X scalar(X x, X y) {
    return X(x - y);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N&, const G& g) {
    if constexpr (I == 0)
      return g;
    else
      return -g;
  }
  static auto lower(const auto& x, const auto& y) { return x.sub(y); }
};
template <>
struct FnTraits<Fn::MUL> : detail::Simple {
  static constexpr const char* name = "mul";
  template <class X>
  static X scalar(X x, X y) {
    return X(x * y);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    return n.template x<1 - I>() * g;
  }
  static auto lower(const auto& x, const auto& y) { return x.mul(y); }
};
template <>
struct FnTraits<Fn::DIV> : detail::Simple {
  static constexpr const char* name = "div";
  static constexpr int cost = 4;
  template <class X>
  static X scalar(X x, X y) {
    return X(x / y);
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {
    auto y = n.template x<1>();
    if constexpr (I == 0)
      return g / y;
    else
      return -g * n.template x<0>() / (y * y);
  }
  static auto lower(const auto& x, const auto& y) { return x.div(y); }
};
template <>
struct FnTraits<Fn::POW> : detail::FnDefaults {
  static constexpr const char* name = "pow";
  static constexpr int cost = 40;
  template <class X>
  static X scalar(X x, X y) {
    return X(std::pow(x, y));
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {  // d/dx = y x^(y-1), d/dy = x^y ln x
    using T = typename G::value_type;
    if constexpr (I == 0)
      return n.template x<1>() * pow(n.template x<0>(), n.template x<1>() - T(1)) * g;
    else
      return n.out() * n.template x<0>().log() * g;
  }
  static auto lower(const auto& x, const auto& y) { return x.pow(y); }
};
template <>
struct FnTraits<Fn::MAX> : detail::Extremum<true> {};
template <>
struct FnTraits<Fn::MIN> : detail::Extremum<false> {};

template <>
struct FnTraits<Fn::CMPLT> : detail::Comparison {
  static constexpr const char* name = "lt";
  template <class X>
  static bool scalar(X x, X y) {
    return x < y;
  }
  static auto lower(const auto& x, const auto& y) { return x.lt(y); }
};
template <>
struct FnTraits<Fn::CMPLE> : detail::Comparison {
  static constexpr const char* name = "le";
  template <class X>
  static bool scalar(X x, X y) {
    return x <= y;
  }
  static auto lower(const auto& x, const auto& y) { return x.le(y); }
};
template <>
struct FnTraits<Fn::CMPEQ> : detail::Comparison {
  static constexpr const char* name = "eq";
  template <class X>
  static bool scalar(X x, X y) {
    return x == y;
  }
  static auto lower(const auto& x, const auto& y) { return x.eq(y); }
};
template <>
struct FnTraits<Fn::CMPNE> : detail::Comparison {
  static constexpr const char* name = "ne";
  template <class X>
  static bool scalar(X x, X y) {
    return x != y;
  }
  static auto lower(const auto& x, const auto& y) { return x.ne(y); }
};

// cond ? x : y, a true select: the branch not taken never reaches the result (nor its gradient).
template <>
struct FnTraits<Fn::WHERE> : detail::FnDefaults {
  static constexpr const char* name = "where";
  template <class C, class X>
  static X scalar(C c, X x, X y) {
    return c ? x : y;
  }
  template <std::size_t I, class N, class G>
  static auto grad(const N& n, const G& g) {  // the taken branch gets g
    using T = typename G::value_type;
    if constexpr (I == 0)
      return none{};
    else if constexpr (I == 1)
      return where(n.template x<0>(), g, T(0));
    else
      return where(n.template x<0>(), T(0), g);
  }
  static auto lower(const auto& c, const auto& x, const auto& y) { return c.where(x, y); }
};

}  // namespace metagrad::fixed
