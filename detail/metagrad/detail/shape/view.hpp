#pragma once
// The internals of shape/view.hpp: shapes as text and the errors of bad shapes and arguments.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "metagrad/detail/cat.hpp"

namespace metagrad::detail {

// Python tuple syntax, as the seed prints: (10, 10), (100,), ((0, 10), (2, 5)).
template <class Seq, class F>
std::string tuple_string(const Seq& seq, F item) {
  std::string out = "(";
  for (std::size_t i = 0; i < seq.size(); ++i) {
    if (i) out += ", ";
    out += item(seq[i]);
  }
  return out + (seq.size() == 1 ? ",)" : ")");
}
template <class Sizes>
std::string dims_string(const Sizes& dims) {
  return tuple_string(dims, [](std::int64_t d) { return std::to_string(d); });
}

// Not constexpr: only reached on bad input, where constant evaluation must fail.
template <class Sizes>
[[noreturn]] void shape_error(const char* op, const Sizes& shape, const std::string& why) {
  throw std::invalid_argument(cat(op, ": shape ", dims_string(shape), " ", why));
}
template <class Sizes>
[[noreturn]] void movement_error(const char* op, const Sizes& shape, const std::string& arg,
                                 const std::string& why) {
  throw std::invalid_argument(cat(op, " of shape ", dims_string(shape), " with ", arg, ": ", why));
}

}  // namespace metagrad::detail
