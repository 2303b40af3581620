#pragma once
// Heap allocations while `counting`: the C library's malloc family, replaced for the program that
// includes this (once: it defines malloc), so that a test or bench sees an AOT library's call
// allocate. COUNTS_MALLOC is defined where it counts (not under the sanitizers, which own malloc).
#include <cstddef>

namespace {
bool counting = false;
unsigned long mallocs = 0;  // (stays 0 under the sanitizers)
}  // namespace

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // (the sanitizers own malloc)
#define COUNTS_MALLOC
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) {
  mallocs += counting;
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t s) {
  mallocs += counting;
  return __libc_calloc(n, s);
}
void* realloc(void* p, std::size_t n) {
  mallocs += counting;
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  mallocs += counting;
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  mallocs += counting;
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;  // ENOMEM
}
}
#endif
