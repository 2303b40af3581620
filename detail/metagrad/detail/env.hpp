#pragma once
// Environment flags that every op reads (DEBUG, GRAPH, METAGRAD_SCHEDULE_CACHE, ...), read again
// only when the environment has changed: scanning it took about a tenth of an eager op (W6).
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

extern char** environ;

namespace metagrad::detail {

// This thread's version of the environment: it changes whenever setenv, unsetenv or putenv may
// have changed a variable since the last call. The entries are compared, pointer by pointer, with
// the ones seen at the last change (setenv and putenv store a new string; unsetenv moves the
// entries after it). A putenv'd string written to in place afterwards is not seen: call setenv.
inline std::uint64_t env_version() {
  thread_local std::vector<char*> seen;
  thread_local std::uint64_t version = 0;
  char** e = environ;
  auto same = [&] {
    if (!e) return seen.empty();
    for (std::size_t i = 0; i < seen.size(); ++i)  // (a shorter environment differs at its null)
      if (e[i] != seen[i]) return false;
    return e[seen.size()] == nullptr;
  };
  if (!same()) {
    seen.clear();
    for (std::size_t i = 0; e && e[i]; ++i) seen.push_back(e[i]);
    ++version;
  }
  return version;
}

// read() (which reads the environment) once per thread and version of the environment. Each call
// site keeps its own value by its lambda's type: read is a lambda, never a function pointer.
template <class Read>
requires std::is_class_v<Read>
auto env_cached(Read read) {
  thread_local std::uint64_t at = ~std::uint64_t{0};
  thread_local decltype(read()) value{};
  if (std::uint64_t v = env_version(); v != at) value = read(), at = v;
  return value;
}

}  // namespace metagrad::detail
