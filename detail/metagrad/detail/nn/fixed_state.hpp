#pragma once
// nn/fixed_state.hpp's internals: one static tensor into a state dict, checked against one, and
// copied out of one.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "metagrad/nn/state.hpp"

namespace metagrad::fixed {

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

}  // namespace metagrad::fixed
