// The compiled part of the helpers layer (detail/helpers.hpp): what needs a library header that
// every file including helpers.hpp should not pay for.
#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "metagrad/detail/helpers.hpp"

namespace metagrad {

std::string detail::demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? out.get() : name;
}

}  // namespace metagrad
