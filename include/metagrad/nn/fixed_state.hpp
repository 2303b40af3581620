#pragma once
// fx::save and fx::load: the static path's tensors in a safetensors file, through the dynamic
// path's reader and writer (nn/state.hpp), so both paths read each other's files.
//
//   fx::save("mlp.safetensors", fx::named("w1", w1), fx::named("b1", b1));
//   fx::load("mlp.safetensors", fx::named("w1", w1), fx::named("b1", b1));
//   fx::save("gpt.safetensors", model);  // a reflected model (fixed/model.hpp): blocks.0.attn.weight, ...
//   fx::load("gpt.safetensors", model);
//
// A tensor is a fixed::Tensor or a TensorMap (load writes through it into the user's memory). load
// checks every name, shape and dtype before it writes anything, so a failed load leaves the tensors
// as they were; its errors (std::runtime_error) name the file, the tensor and both shapes. It lives
// with the dynamic path (it links the library); the static path itself stays header-only.
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "metagrad/fixed/model.hpp"
#include "metagrad/fixed/tensor_map.hpp"
#include "metagrad/nn/state.hpp"

namespace metagrad::fixed {

// A tensor and its name in a file; load writes into the tensor.
template <class X>
struct Named {
  std::string name;
  X& tensor;
};
template <class X>
Named<X> named(std::string name, X& tensor) {
  return {std::move(name), tensor};
}

namespace detail::state {

template <class X>
void add(nn::StateDict& dict, const std::string& name, const X& tensor) {
  using T = std::remove_const_t<typename X::value_type>;
  using S = typename X::shape;
  static_assert(
      requires { dtype_of_t<T>::value; } && !std::is_same_v<T, bool>,
      "fixed::save: the tensor's element type has no safetensors dtype here (bool: cast it to uint8)");
  const T* p = tensor.data();
  dict.add(name, metagrad::Tensor(std::vector<T>(p, p + S::size), S::dims));
}

template <class X>
void check(const nn::StateDict& dict, const std::string& path, const std::string& name, X& tensor) {
  using T = typename X::value_type;
  static_assert(!std::is_const_v<X> && !std::is_const_v<std::remove_pointer_t<decltype(tensor.data())>>,
                "fixed::load: a tensor to load into must be writable (not const, not a TensorMap<const T>)");
  const std::string where = "fixed::load '" + path + "': tensor '" + name + "'";
  if (!dict.contains(name)) {
    std::string have;
    for (const std::string& k : dict.keys()) have += (have.empty() ? "" : ", ") + k;
    throw std::runtime_error(where + " is not in the file (it has: " + have + ")");
  }
  const metagrad::Tensor& t = dict.at(name);
  if (t.shape() != X::shape::dims)
    throw std::runtime_error(where + " is " + to_string(t.shape()) + " in the file, the fixed::Tensor is " +
                             to_string(X::shape::dims));
  if (!(t.dtype() == dtype_of<T>))
    throw std::runtime_error(where + " is " + t.dtype().name + " in the file, the fixed::Tensor's " +
                             dtype_of<T>.name);
}

template <class X>
void copy(const nn::StateDict& dict, const std::string& name, X& tensor) {
  std::vector<typename X::value_type> v = dict.at(name).template to_vector<typename X::value_type>();
  std::copy(v.begin(), v.end(), tensor.data());
}

}  // namespace detail::state

template <class... X>
void save(const std::string& path, const Named<X>&... items) {
  nn::StateDict dict;
  (detail::state::add(dict, items.name, std::as_const(items.tensor)), ...);
  nn::safe_save(dict, path);
}

template <class... X>
void load(const std::string& path, const Named<X>&... items) {
  nn::StateDict dict = nn::safe_load(path);
  (detail::state::check(dict, path, items.name, items.tensor),
   ...);  // everything first: a failed load changes nothing
  (detail::state::copy(dict, items.name, items.tensor), ...);
}

// A whole static model (fixed/model.hpp), each tensor under its dotted name (blocks.0.attn.weight),
// as nn::get_state_dict names a dynamic model's: a file either path reads.
template <ReflectedModel M>
void save(const std::string& path, const M& model) {
  nn::StateDict dict;
  for_each_named([&](const std::string& name, const auto& t) { detail::state::add(dict, name, t); }, model);
  nn::safe_save(dict, path);
}
template <ReflectedModel M>
void load(const std::string& path, M& model) {
  nn::StateDict dict = nn::safe_load(path);
  for_each_named([&](const std::string& name, auto& t) { detail::state::check(dict, path, name, t); }, model);
  for_each_named([&](const std::string& name, auto& t) { detail::state::copy(dict, name, t); }, model);
}

}  // namespace metagrad::fixed
