#pragma once
// detail::cat: every part appended to one string, the way every error message in the library is
// built. Also sidesteps a g++ 12 -O3 false -Wrestrict on `"(" + str`.
#include <string>

namespace metagrad::detail {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string out;
  ((out += parts), ...);
  return out;
}

}  // namespace metagrad::detail
