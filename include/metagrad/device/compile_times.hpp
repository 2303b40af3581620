#pragma once
// How a thread's wait for kernels (GlobalCounters::compile_time) splits: a cold start's report
// (bench_gpt --cold) tells code generation from the compilers' work.

namespace metagrad {

struct CompileTimes {
  // Seconds this thread spent generating kernels' code (linearizing, optimizing, rendering) inside
  // GlobalCounters::compile_time, since the process started: read it before and after. (A contraction
  // built alone at its first run compiles its epilogue inside its code generation.)
  static inline thread_local double codegen = 0;
};

}  // namespace metagrad
