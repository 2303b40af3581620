#pragma once
// The internals of nn/state.hpp.
#include <string>

#include "metagrad/shape/view.hpp"

namespace metagrad::nn {

class StateDict;

namespace detail {
// "prefix.key", or whichever of the two is not empty.
inline std::string join_key(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  return key.empty() ? prefix : metagrad::detail::cat(prefix, ".", key);
}
// load_state_dict's work (runtime/nn/state.cpp): checks `from` against the model's
// tensors `into`, then assigns them.
void load_state_dict(const StateDict& into, const StateDict& from, bool strict);
}  // namespace detail

}  // namespace metagrad::nn
