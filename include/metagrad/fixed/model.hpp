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
#include <boost/hana/define_struct.hpp>
#include <boost/mp11/algorithm.hpp>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "metagrad/detail/fixed/model.hpp"
#include "metagrad/fixed/grad.hpp"
#include "metagrad/fixed/tensor.hpp"

namespace metagrad::fixed {

// A static model (see above): a fixed::Tensor, or a reflected struct, std::array or C array whose
// members are models or plain values.
template <class M>
concept StaticModel = detail::model::is_model<std::remove_cvref_t<M>>;
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
