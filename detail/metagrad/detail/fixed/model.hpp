#pragma once
// fixed/model.hpp's internals: what a member is to the walk, a model's parameter types, and the walk.
#include <array>
#include <boost/hana/accessors.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/unpack.hpp>
#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "metagrad/fixed/shape.hpp"

namespace metagrad::fixed {

template <class T, index_t... D>
class Tensor;

namespace detail::model {

template <class X>
struct is_tensor : std::false_type {};
template <class T, index_t... D>
struct is_tensor<Tensor<T, D...>> : std::true_type {};

template <class X>
struct array_of {
  static constexpr std::size_t size = 0;
};
template <class M, std::size_t N>
struct array_of<std::array<M, N>> {
  using type = M;
  static constexpr std::size_t size = N;
};
template <class M, std::size_t N>
struct array_of<M[N]> {
  using type = M;
  static constexpr std::size_t size = N;
};

// What a member is to the walk.
enum class Kind { param, array, reflected, plain, other };
template <class X>
constexpr Kind kind_of() {
  if constexpr (is_tensor<X>::value)
    return Kind::param;
  else if constexpr (array_of<X>::size > 0)
    return Kind::array;
  else if constexpr (boost::hana::Struct<X>::value)
    return Kind::reflected;
  else if constexpr (std::is_arithmetic_v<X> || std::is_enum_v<X> ||
                     std::is_convertible_v<X, std::string_view>)
    return Kind::plain;
  else
    return Kind::other;
}

// A model: parameters, or what holds them (a struct, an array).
template <class X>
inline constexpr bool is_model = kind_of<X>() == Kind::param || kind_of<X>() == Kind::array
                                 || kind_of<X>() == Kind::reflected;

// The parameter types of X in the walk's order, an mp_list.
template <class X, Kind K = kind_of<X>()>
struct params {
  using type = boost::mp11::mp_list<>;
};
template <class X>
struct params<X, Kind::param> {
  using type = boost::mp11::mp_list<X>;
};
template <class X>
struct params<X, Kind::array> {
  using type = boost::mp11::mp_apply<
      boost::mp11::mp_append,
      boost::mp11::mp_repeat_c<boost::mp11::mp_list<typename params<typename array_of<X>::type>::type>,
                               array_of<X>::size>>;
};
template <class S>
auto member_params() {
  return boost::hana::unpack(boost::hana::accessors<S>(), [](auto... a) {
    return boost::mp11::mp_append<boost::mp11::mp_list<>,
                                  typename params<std::remove_cvref_t<decltype(boost::hana::second(a)(
                                      std::declval<S&>()))>>::type...>{};
  });
}
template <class X>
struct params<X, Kind::reflected> {
  using type = decltype(member_params<X>());
};

template <class X>
constexpr void check_member() {
  static_assert(
      kind_of<X>() != Kind::other,
      "fixed: a static model's member is neither a parameter (a fixed::Tensor, a reflected struct, a "
      "std::array or C array of them) nor a plain value (a number, an enum, a string)");
}

inline std::string join(const std::string& prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
}

// A member's or block's name under its parent's: built only where the walk is named.
struct NoName {};
template <bool Named, class Key>
auto child(const auto& name, Key key) {
  if constexpr (Named)
    return join(name, key());
  else
    return NoName{};
}

// f(name, t0, t...) (or, unnamed, f(t0, t...)) for each parameter of m0 and the same parameters of
// ms (models of m0's type).
template <bool Named, class F, class Name, class M0, class... M>
void walk(F& f, const Name& name, M0& m0, M&... ms) {
  using X = std::remove_cvref_t<M0>;
  constexpr Kind k = kind_of<X>();
  if constexpr (k == Kind::param) {
    if constexpr (Named)
      f(name, m0, ms...);
    else
      f(m0, ms...);
  } else if constexpr (k == Kind::array) {
    for (std::size_t i = 0; i < array_of<X>::size; ++i)
      walk<Named>(f, child<Named>(name, [&] { return std::to_string(i); }), m0[i], ms[i]...);
  } else if constexpr (k == Kind::reflected) {
    boost::hana::for_each(boost::hana::accessors<X>(), [&](const auto& a) {
      auto&& member = boost::hana::second(a)(m0);
      using V = std::remove_cvref_t<decltype(member)>;
      check_member<V>();
      if constexpr (kind_of<V>() != Kind::plain && kind_of<V>() != Kind::other)
        walk<Named>(f,
                    child<Named>(name, [&] { return boost::hana::to<const char*>(boost::hana::first(a)); }),
                    member, boost::hana::second(a)(ms)...);
    });
  }
}

}  // namespace detail::model

}  // namespace metagrad::fixed
