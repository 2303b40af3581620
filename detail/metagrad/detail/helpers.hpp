#pragma once
// Internals of helpers.hpp's layer: releasing a graph without recursion (~LazyBuffer, ~Function),
// and the small tools of the layers above that have no header of their own.
#include <string>
#include <utility>
#include <vector>

namespace metagrad {

namespace detail {
// Drops what `owned` holds without recursion. Freeing a graph node frees its sources, whose
// destructors would free theirs, one stack frame per node (10^5 overflowed the stack): the
// outermost call on a thread frees them one at a time, and the calls made meanwhile (from the
// destructors it runs) hand it what they own instead. The thread's list is a plain pointer,
// trivially destructible: graphs are still dropped while the program exits.
template <class T>
void release_flat(T owned) {
  thread_local std::vector<T>* releasing = nullptr;
  if (releasing) {
    releasing->push_back(std::move(owned));
    return;
  }
  std::vector<T> pending;
  pending.push_back(std::move(owned));
  releasing = &pending;
  while (!pending.empty()) {
    T next = std::move(pending.back());
    pending.pop_back();
    (void)next;  // freed here, at the end of the iteration: may push more
  }
  releasing = nullptr;
}

template <class T, class...>
using dependent = T;                     // delays needing a type complete until a template is instantiated
std::string demangle(const char* name);  // a type's readable name (runtime/helpers.cpp)

// A state dict's "prefix.key", or whichever of the two is not empty.
inline std::string join_key(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  return key.empty() ? prefix : prefix + "." + key;
}
}  // namespace detail

}  // namespace metagrad
