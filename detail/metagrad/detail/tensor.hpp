#pragma once
// The internals of tensor.hpp: the state every copy of a Tensor shares, and the members that reach
// into it. An undefined tensor (default-constructed) has a state without data.
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "metagrad/lazy.hpp"
#include "metagrad/mlops.hpp"

namespace metagrad {

namespace detail {
struct TensorState {
  std::shared_ptr<LazyBuffer> lazydata;  // null: an undefined tensor
  std::shared_ptr<TensorState> grad;
  std::optional<bool> requires_grad;
  std::shared_ptr<Function> ctx;
};

// The error of an op given an undefined tensor: std::invalid_argument, "<op>: the tensor is undefined
// (default-constructed)".
[[noreturn]] void undefined_tensor(const char* op);
[[noreturn]] void undefined_input(const char* mlop);  // the same, of an mlop's input: "mlops::Relu: ..."

template <auto M>
inline constexpr bool is_data_field = false;
template <>
inline constexpr bool is_data_field<&TensorState::lazydata> = true;

// A member of Tensor that reads and writes the shared state: `t.lazydata = x` changes every copy.
template <class T, T TensorState::*M>
class Field {
 public:
  explicit Field(TensorState* s) : s_(s) {}
  Field(const Field&) = delete;
  Field& operator=(const Field& o) { return *this = o.get(); }
  Field& operator=(T v) {
    s_->*M = std::move(v);
    return *this;
  }
  // The data field of an undefined tensor throws, so that no op dereferences its null data.
  T& get() const {
    if constexpr (is_data_field<M>)
      if (!(s_->*M)) [[unlikely]]
        undefined_tensor("Tensor.lazydata");
    return s_->*M;
  }
  operator T&() const { return get(); }  // NOLINT
  decltype(auto) operator->() const {
    if constexpr (std::is_pointer_v<T>)
      return get();
    else
      return get().operator->();
  }
  decltype(auto) operator*() const { return *get(); }
  explicit operator bool() const { return static_cast<bool>(s_->*M); }
  template <class U>
  friend bool operator==(const Field& f, const U& v) {
    return f.s_->*M == v;
  }
  void rebind(TensorState* s) { s_ = s; }

 private:
  TensorState* s_;
};
}  // namespace detail

}  // namespace metagrad
