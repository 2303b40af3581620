#pragma once
// fx::save and fx::load: the static path's tensors in a safetensors file, through the dynamic
// path's reader and writer (nn/state.hpp), so both paths read each other's files.
//
//   fx::save("mlp.safetensors", fx::named("w1", w1), fx::named("b1", b1));
//   fx::load("mlp.safetensors", fx::named("w1", w1), fx::named("b1", b1));
//
// A tensor is a fixed::Tensor or a TensorMap (load writes through it into the user's memory). load
// checks every name, shape and dtype before it writes anything, so a failed load leaves the tensors
// as they were; its errors (std::runtime_error) name the file, the tensor and both shapes. It lives
// with the dynamic path (it links the library); the static path itself stays header-only.
#include <string>
#include <type_traits>
#include <vector>

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
  auto add = [&](const auto& item) {
    using T = std::remove_const_t<typename std::remove_cvref_t<decltype(item.tensor)>::value_type>;
    using S = typename std::remove_cvref_t<decltype(item.tensor)>::shape;
    static_assert(
        requires { dtype_of_t<T>::value; } && !std::is_same_v<T, bool>,
        "fixed::save: the tensor's element type has no safetensors dtype here (bool: cast it to uint8)");
    const T* p = item.tensor.data();
    dict.add(item.name, metagrad::Tensor(std::vector<T>(p, p + S::size), S::dims));
  };
  (add(items), ...);
  nn::safe_save(dict, path);
}

template <class... X>
void load(const std::string& path, const Named<X>&... items) {
  nn::StateDict dict = nn::safe_load(path);
  auto check = [&](const auto& item) {
    using Tn = std::remove_cvref_t<decltype(item.tensor)>;
    using T = typename Tn::value_type;
    static_assert(
        !std::is_const_v<std::remove_reference_t<decltype(item.tensor)>> &&
            !std::is_const_v<std::remove_pointer_t<decltype(item.tensor.data())>>,
        "fixed::load: a tensor to load into must be writable (not const, not a TensorMap<const T>)");
    const std::string where = "fixed::load '" + path + "': tensor '" + item.name + "'";
    if (!dict.contains(item.name)) {
      std::string have;
      for (const std::string& k : dict.keys()) have += (have.empty() ? "" : ", ") + k;
      throw std::runtime_error(where + " is not in the file (it has: " + have + ")");
    }
    const metagrad::Tensor& t = dict.at(item.name);
    if (t.shape() != Tn::shape::dims)
      throw std::runtime_error(where + " is " + to_string(t.shape()) + " in the file, the fixed::Tensor is " +
                               to_string(Tn::shape::dims));
    if (!(t.dtype() == dtype_of<T>))
      throw std::runtime_error(where + " is " + t.dtype().name + " in the file, the fixed::Tensor's " +
                               dtype_of<T>.name);
  };
  (check(items), ...);  // everything first: a failed load changes nothing
  auto copy = [&](const auto& item) {
    using T = typename std::remove_cvref_t<decltype(item.tensor)>::value_type;
    std::vector<T> v = dict.at(item.name).template to_vector<T>();
    std::copy(v.begin(), v.end(), item.tensor.data());
  };
  (copy(items), ...);
}

}  // namespace metagrad::fixed
