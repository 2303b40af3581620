#pragma once
// The static path's inlining macros: METAGRAD_INLINE puts a kernel's small functions inside its
// loop, METAGRAD_NOINLINE keeps one copy of a kernel however many callers it has.
#if defined(__GNUC__)
#define METAGRAD_INLINE __attribute__((always_inline)) inline
#define METAGRAD_NOINLINE __attribute__((noinline))  // one copy of a kernel however many callers
#else
#define METAGRAD_INLINE inline
#define METAGRAD_NOINLINE
#endif
