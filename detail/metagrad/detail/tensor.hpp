#pragma once
// The internals of tensor.hpp: the state every copy of a Tensor shares, and the members that reach
// into it.
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "metagrad/lazy.hpp"
#include "metagrad/mlops.hpp"

namespace metagrad {

namespace detail {
struct TensorState {
  std::shared_ptr<LazyBuffer> lazydata;
  std::shared_ptr<TensorState> grad;
  std::optional<bool> requires_grad;
  std::shared_ptr<Function> ctx;
};

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
  T& get() const { return s_->*M; }
  operator T&() const { return get(); }  // NOLINT
  decltype(auto) operator->() const {
    if constexpr (std::is_pointer_v<T>)
      return get();
    else
      return get().operator->();
  }
  decltype(auto) operator*() const { return *get(); }
  explicit operator bool() const { return static_cast<bool>(get()); }
  template <class U>
  friend bool operator==(const Field& f, const U& v) {
    return f.get() == v;
  }
  void rebind(TensorState* s) { s_ = s; }

 private:
  TensorState* s_;
};
}  // namespace detail

}  // namespace metagrad
