#pragma once
// The internals of mlops.hpp.
#include <string>

namespace metagrad::detail {
template <class T, class...>
using dependent = T;                     // delays needing Tensor complete until apply() is instantiated
std::string demangle(const char* name);  // a type's readable name (runtime/mlops.cpp)
}  // namespace metagrad::detail
