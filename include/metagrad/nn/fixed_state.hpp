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

#include "metagrad/detail/nn/fixed_state.hpp"
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
