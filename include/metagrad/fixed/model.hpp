#pragma once
// A static model: a plain struct of fixed::Tensors reflected with Boost.Hana (BOOST_HANA_DEFINE_STRUCT
// inside it, or BOOST_HANA_ADAPT_STRUCT after it), its members tensors, nested reflected structs,
// std::arrays or C arrays of them, and plain values (sizes, flags), which are no parameters. Its
// parameters are declared once, in the struct; every consumer walks them with one traversal:
//
//   struct Linear { BOOST_HANA_DEFINE_STRUCT(Linear, (fx::Tensor<float, 4, 3>, weight), (Bias, bias)); };
//   struct Net { BOOST_HANA_DEFINE_STRUCT(Net, (std::array<Linear, 2>, layers)); };
//   fx::for_each_param([](auto& w, const auto& g) { w -= 0.1f * g; }, net, grads);  // in step
//   fx::for_each_named([](const std::string& name, auto& t) { ... }, net);  // layers.0.weight, ...
//   auto [g, loss] = fx::grad(loss_expr, net);  // g: a Net of the gradients
//   float l = fx::grad_into(g, loss_expr, net);  // into an existing Net
//
// fx::save / fx::load (nn/fixed_state.hpp), the optimizers (fixed/optim.hpp) and AOT generators
// (Lowering::bind of each tensor) are built on these. The walk is a Hana for_each over each struct's
// members and a loop over an array's blocks (one instantiation per block type, not per block), and
// a model's parameter types are an Mp11 list, so neither recursion goes deeper than the nesting.
// A member that is neither a parameter nor a plain value is a compile error that names it.
#include <array>
#include <boost/hana/accessors.hpp>
#include <boost/hana/adapt_struct.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/define_struct.hpp>
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
#include <tuple>
#include <type_traits>
#include <utility>

#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

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

template <class S>
using member_t = std::remove_cvref_t<decltype(std::declval<S&>())>;

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

// A static model (see above): a fixed::Tensor, or a reflected struct, std::array or C array whose
// members are models or plain values.
template <class M>
concept StaticModel = detail::model::kind_of<std::remove_cvref_t<M>>()
!= detail::model::Kind::plain&& detail::model::kind_of<std::remove_cvref_t<M>>() !=
    detail::model::Kind::other;
// A static model that is not a single tensor: what fx::grad, fx::save and the optimizers take whole.
template <class M>
concept ReflectedModel = StaticModel<M> && !detail::model::is_tensor<std::remove_cvref_t<M>>::value;

// The model's parameter types in the walk's order (an mp_list).
template <StaticModel M>
using params_t = typename detail::model::params<std::remove_cvref_t<M>>::type;

// f(t, u...) for each parameter t of m and the parameter at the same place in each of ms (models of
// m's type: its gradients, an optimizer's state), in declaration order.
template <class F, StaticModel M, class... Ms>
void for_each_param(F&& f, M&& m, Ms&&... ms) {
  static_assert((std::is_same_v<std::remove_cvref_t<M>, std::remove_cvref_t<Ms>> && ...),
                "fx::for_each_param: the models walked together must be of one type");
  detail::model::walk<false>(f, detail::model::NoName{}, m, ms...);
}
// f(name, t, u...) likewise, name dotted as PyTorch's named_parameters (blocks.0.attn.weight).
template <class F, StaticModel M, class... Ms>
void for_each_named(F&& f, M&& m, Ms&&... ms) {
  static_assert((std::is_same_v<std::remove_cvref_t<M>, std::remove_cvref_t<Ms>> && ...),
                "fx::for_each_named: the models walked together must be of one type");
  detail::model::walk<true>(f, std::string(), m, ms...);
}

// The model's parameters as a tuple of references, in the walk's order: what the variadic
// consumers (fx::grad(loss, p...), Lowering::grad) take, through std::apply.
template <StaticModel M>
auto parameters(M& m) {
  using L = params_t<M>;
  using Q = std::conditional_t<std::is_const_v<M>, const void*, void*>;
  std::array<Q, boost::mp11::mp_size<L>::value> at{};
  std::size_t i = 0;
  for_each_param([&](auto& t) { at[i++] = &t; }, m);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<std::conditional_t<std::is_const_v<M>, const boost::mp11::mp_at_c<L, I>,
                                         boost::mp11::mp_at_c<L, I>>&...>(
        *static_cast<std::conditional_t<std::is_const_v<M>, const boost::mp11::mp_at_c<L, I>,
                                        boost::mp11::mp_at_c<L, I>>*>(at[I])...);
  }
  (std::make_index_sequence<boost::mp11::mp_size<L>::value>{});
}

// d loss / d every parameter of the model into `grads` (a model of its type); returns the loss.
template <Operand L, ReflectedModel M>
typename expr_t<L>::value_type grad_into(M& grads, const L& loss, const M& model) {
  return std::apply(
      [&](auto&... g) {
        return std::apply([&](const auto&... p) { return grad_into(std::tie(g...), loss, p...); },
                          fixed::parameters(model));
      },
      fixed::parameters(grads));
}

// A model's gradients (a model of its type) and the loss: `auto [g, loss] = fx::grad(l, model);`.
template <class M, class T>
struct ModelGradients {
  M grads;
  T loss;
};
template <Operand L, ReflectedModel M>
ModelGradients<M, typename expr_t<L>::value_type> grad(const L& loss, const M& model) {
  ModelGradients<M, typename expr_t<L>::value_type> out{};
  out.loss = grad_into(out.grads, loss, model);
  return out;
}

}  // namespace metagrad::fixed
