#pragma once
// The internals of cpu/parallel.hpp: one process-wide pool of persistent workers, header-only, which
// the static path's kernels, the runtime's host kernels and the GEMM share.
//
// Size: env THREADS (as the dynamic path) else every core; cpu::set_threads(n) changes it.
// Dispatch is a function pointer and a void* (no allocation): the caller publishes the job by
// bumping a generation counter, then every thread, the caller included, claims parts until none is
// left: first those of its own contiguous range (thread t of T owns parts [tP/T, (t+1)P/T), so the
// same call on the same data finds its part's operands in the same core's L2 again: taking parts
// in claim order instead cost a 6 x 25 x 8192 product half its speed at 2 threads), then the
// others' (a worker the OS has descheduled leaves its share to the others). The caller waits only
// for the parts others claimed, never for a worker that has not woken (on a busy machine that is a
// scheduler slice). Workers spin a little
// after a job (the next one of a training step is usually microseconds away), then sleep on the
// counter (a futex). A call made from inside a part, or while another thread's job runs, runs its
// parts inline. Parts take their scratch memory from the caller's arena, never their own, so which
// thread runs which part cannot make a later step allocate.
//
// How the kernels split their work (into kPartsPerThread contiguous ranges per thread, so
// per-element results do not depend on which thread computes them), each above a size threshold:
//   elementwise (eval.hpp)  the flat range (1-D loops; ranges start on 64-byte boundaries) or the
//                           outer rows; bitwise the same as one thread.
//   matmul (cpu/gemm.hpp)   rows of C, in whole MR-row strips, each part packing its own A blocks
//                           after the shared B panel is packed by all; bitwise the same.
//   reductions (reduce.hpp) along the innermost axis: output rows (W3a); everything into one
//                           value: one partial per part, combined in part order (W3c: deterministic
//                           for a thread count, rounded differently from one thread); the innermost
//                           axis kept: column ranges (W3b), bitwise the same. Other axis sets: one
//                           thread.
// Threads and the lock are POSIX's, not <thread>/<mutex>, and the sleep a futex, not
// std::atomic::wait: this header is compiled by every header-only unit, and <thread> alone (C++20:
// stop_token, semaphores, jthread) cost more to parse than the rest of the pool, atomic::wait's
// waiter pools more to instantiate.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "metagrad/detail/cpu/arena.hpp"

namespace metagrad::cpu::detail {

inline constexpr int kMaxThreads = 64;
inline constexpr int kPartsPerThread = 4;  // parts per thread where the split is free to choose
// Below these sizes one thread is faster than waking another: elements written (elementwise) or
// read (reductions), multiply-adds (matmul). 16K elements: a model's step runs many loops of 32K
// (a (4, 64, 128) activation's layernorm and residual), which at 64K the second core sat out while
// it spun between them (the static GPT step at 2 threads: its idle time halved, the step 6% faster).
inline constexpr std::int64_t kParallelElements = std::int64_t{1} << 14;
inline constexpr std::int64_t kParallelMacs = std::int64_t{1} << 20;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <class>
class BasicPool {
 public:
  using Fn = void (*)(void* ctx, int part, int parts);

  [[gnu::noinline]] static BasicPool& get();  // (its first-use setup not copied into every caller)
  ~BasicPool() { stop(); }
  int size() const { return workers_ + 1; }
  void resize(int n) {
    pthread_mutex_lock(&busy_);
    Unlock unlock{&busy_};
    stop();
    start(std::clamp(n, 1, kMaxThreads));
  }

  // fn(ctx, p, parts) once for each p in [0, parts), on whichever thread claims it; with each_thread
  // (parts == size()), part p on thread p (0: the caller). Returns when all are done.
  void run(int parts, Fn fn, void* ctx, bool each_thread = false);

 private:
  static constexpr int kSpin = 1 << 14;     // pauses (~0.1-0.5 ms) before a worker sleeps
  static constexpr int kMaxParts = 0xffff;  // a part's index fits a range counter's 16 bits
  // A range's counter: the job's generation (32 bits), then the next part to claim and the end
  // (16 bits each). One compare-exchange both checks that the job is the one the claimer saw and
  // takes a part, so nothing of the job is read before the claim holds: a slot being rewritten for
  // a later job may already show some of that job's fields.
  static std::uint64_t range(std::uint32_t g, int begin, int end) {
    return std::uint64_t{g} << 32 | static_cast<std::uint64_t>(begin) << 16 | static_cast<std::uint64_t>(end);
  }

  // A job's description. Jobs alternate between two slots: a slot is rewritten only after the job
  // that used it two jobs ago finished, so a worker that claimed a part reads a stable one.
  struct Job {
    std::atomic<Fn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int> parts{0};
    alignas(64) std::atomic<int> done{0};
    struct alignas(64) Next {  // thread r's range(generation, next part, end)
      std::atomic<std::uint64_t> value{0};
    };
    Next next[kMaxThreads];
  };

  struct Unlock {
    pthread_mutex_t* m;
    ~Unlock() { pthread_mutex_unlock(m); }
  };
  struct Start {  // what a worker's thread starts with
    BasicPool* pool;
    int index;
    std::uint32_t seen;
  };
  static void* enter(void* s) {
    auto* st = static_cast<Start*>(s);
    st->pool->work(st->index, st->seen);
    return nullptr;
  }

  explicit BasicPool(int n) { start(std::clamp(n, 1, kMaxThreads)); }
  static int default_size() {
    const char* v = std::getenv("THREADS");
    long n =
        v && *v ? std::strtol(v, nullptr, 10) : sysconf(_SC_NPROCESSORS_ONLN);  // (as hardware_concurrency)
    return static_cast<int>(std::clamp<long>(n, 1, kMaxThreads));
  }
  static bool& inside() {  // this thread is running a part: nested calls run inline
    thread_local bool in = false;
    return in;
  }
  void start(int n);
  void stop();
  // A new job (or stop) in wake_, and the sleeping workers woken; a worker asleep until wake_ is no
  // longer `seen`. (Both seq_cst: a bump that finds no sleeper came before the sleeper's own check.)
  void bump() {
    wake_.fetch_add(1);
    if (sleepers_.load() == 0) return;
#ifdef __linux__
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&wake_), FUTEX_WAKE_PRIVATE, kMaxThreads, nullptr,
            nullptr, 0);
#else
    wake_.notify_all();
#endif
  }
  void sleep(std::uint32_t seen) {
    sleepers_.fetch_add(1);
#ifdef __linux__
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&wake_), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr,
            0);
#else
    wake_.wait(seen);
#endif
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  // Claims parts of job g until none is left: thread `self`'s own range, then (unless `own`, as in
  // an each-thread job) the others'. A claim by a thread still looking at a finished job fails on
  // the generation, so no part runs twice or under the wrong job; one that succeeds leaves the job
  // unfinished, so its slot is not rewritten while the part runs.
  void claim(std::uint32_t g, Job& j, int self, bool own);
  void work(int index, std::uint32_t seen);

  int workers_ = 0;  // threads_[0, workers_) run work(1..workers_)
  pthread_t threads_[kMaxThreads];
  Start starts_[kMaxThreads];
  pthread_mutex_t busy_ = PTHREAD_MUTEX_INITIALIZER;  // one job at a time
  Job jobs_[2];
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<std::uint64_t> state_{0};  // the current job: generation << 1 | each-thread
  alignas(64) std::atomic<std::uint32_t> wake_{0};   // bumped per job: what sleeping workers wait on
  std::atomic<int> sleepers_{0};                     // workers in sleep()
};

// Pool is a class template only so that the runtime library can hold its one compiled copy: a unit
// built with METAGRAD_PREBUILT (linked against the library) declares it extern and compiles none of
// it (0.1 s of each static unit). Its larger members are defined out of the class, as an inline one
// would still be instantiated (clang does, to inline it).
using Pool = BasicPool<void>;
#ifdef METAGRAD_PREBUILT
extern template class BasicPool<void>;
#endif

template <class V>
BasicPool<V>& BasicPool<V>::get() {
  static BasicPool pool(default_size());
  return pool;
}

template <class V>
void BasicPool<V>::run(int parts, Fn fn, void* ctx, bool each_thread) {
  if (parts <= 1 || parts > kMaxParts || size() == 1 || inside() || pthread_mutex_trylock(&busy_) != 0) {
    for (int p = 0; p < parts; ++p) fn(ctx, p, parts);
    return;
  }
  Unlock unlock{&busy_};
  const int threads = size();
  const auto g = static_cast<std::uint32_t>(state_.load(std::memory_order_relaxed) >> 1) + 1;
  Job& j = jobs_[g & 1];
  j.fn.store(fn, std::memory_order_relaxed), j.ctx.store(ctx, std::memory_order_relaxed);
  j.parts.store(parts, std::memory_order_relaxed);
  j.done.store(0, std::memory_order_relaxed);
  for (int r = 0; r < threads; ++r) {
    // each-thread: part r on thread r (the last thread takes any parts beyond the threads)
    const int b = each_thread ? std::min(r, parts) : r * parts / threads;
    const int e =
        each_thread ? (r == threads - 1 ? parts : std::min(r + 1, parts)) : (r + 1) * parts / threads;
    j.next[r].value.store(range(g, b, e), std::memory_order_relaxed);
  }
  state_.store(std::uint64_t{g} << 1 | std::uint64_t{each_thread}, std::memory_order_release);
  bump();
  inside() = true;
  claim(g, j, 0, each_thread);
  inside() = false;
  // Only parts already claimed are waited for: a worker the OS has not scheduled yet claims none
  // (except in an each-thread job, which waits for every thread).
  for (int spin = 0; j.done.load(std::memory_order_acquire) != parts; ++spin)
    if (spin < kSpin)
      cpu_relax();
    else
      sched_yield();
}

template <class V>
void BasicPool<V>::start(int n) {
  stop_.store(false, std::memory_order_relaxed);
  const std::uint32_t w = wake_.load(std::memory_order_relaxed);  // before any bump they must see
  // A thread the system refuses leaves the pool smaller (std::thread threw).
  for (int i = 1; i < n; ++i) {
    starts_[workers_] = {this, i, w};
    if (pthread_create(&threads_[workers_], nullptr, &enter, &starts_[workers_]) != 0) break;
    ++workers_;
  }
}

template <class V>
void BasicPool<V>::stop() {
  if (workers_ == 0) return;
  stop_.store(true, std::memory_order_relaxed);
  bump();
  for (int i = 0; i < workers_; ++i) pthread_join(threads_[i], nullptr);
  workers_ = 0;
}

template <class V>
void BasicPool<V>::claim(std::uint32_t g, Job& j, int self, bool own) {
  const int threads = size();
  for (int k = 0; k < (own ? 1 : threads); ++k) {
    auto& next = j.next[(self + k) % threads].value;
    for (std::uint64_t s = next.load(std::memory_order_acquire);;) {
      if (static_cast<std::uint32_t>(s >> 32) != g) return;  // job g is finished, its slot reused
      const int p = static_cast<int>(s >> 16 & 0xffff);
      if (p >= static_cast<int>(s & 0xffff)) break;
      if (!next.compare_exchange_weak(s, s + (1 << 16), std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      j.fn.load(std::memory_order_relaxed)(j.ctx.load(std::memory_order_relaxed), p,
                                           j.parts.load(std::memory_order_relaxed));
      j.done.fetch_add(1, std::memory_order_release);
      s = next.load(std::memory_order_acquire);
    }
  }
}

template <class V>
void BasicPool<V>::work(int index, std::uint32_t seen) {
  inside() = true;
  for (;;) {
    for (int spin = 0; wake_.load(std::memory_order_acquire) == seen; ++spin)
      if (spin < kSpin)
        cpu_relax();
      else
        sleep(seen);
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    // Generation and kind in one load: a job's slot may already hold the next job's fields.
    const std::uint64_t s = state_.load(std::memory_order_acquire);
    const auto g = static_cast<std::uint32_t>(s >> 1);
    Arena::Scope scope;
    claim(g, jobs_[g & 1], index, s & 1);
  }
}

// f(part, parts) for each part, spread over the threads (the caller among them); with each_thread,
// f(p, threads()) on every thread p (tests read per-thread state so).
template <class F>
void parallel_parts(int parts, F&& f, bool each_thread = false) {
  using G = std::remove_reference_t<F>;
  Pool::get().run(
      parts, [](void* c, int p, int n) { (*static_cast<G*>(c))(p, n); },
      const_cast<void*>(static_cast<const void*>(&f)), each_thread);
}

// Parts for n units of work at least `grain` each: kPartsPerThread per thread, fewer when small.
inline int parts_for(std::int64_t n, std::int64_t grain) {
  int threads = Pool::get().size();
  if (threads == 1) return 1;
  return static_cast<int>(
      std::min<std::int64_t>(std::int64_t{threads} * kPartsPerThread, n / std::max<std::int64_t>(grain, 1)));
}
// f(begin, end) over [0, n) cut into parts_for(n, grain) ranges, each starting at a multiple of
// `align`; with one range, f(0, n) on the caller.
// (One function per F, called through the pool's pointer: nested lambdas through parallel_parts
// were four instantiations a call site, in every header-only unit.)
inline std::int64_t range_cut(std::int64_t n, std::int64_t align, int q, int np) {
  return q == np ? n : n * q / np / align * align;
}
template <class F>
void parallel_for(std::int64_t n, std::int64_t align, std::int64_t grain, F&& f) {
  int parts = parts_for(n, grain);
  if (parts <= 1) return f(std::int64_t{0}, n);
  struct Job {
    std::remove_reference_t<F>* f;
    std::int64_t n, align;
  } job{&f, n, align};
  Pool::get().run(
      parts,
      [](void* c, int p, int np) {
        const Job& j = *static_cast<const Job*>(c);
        const std::int64_t lo = range_cut(j.n, j.align, p, np), hi = range_cut(j.n, j.align, p + 1, np);
        if (lo < hi) (*j.f)(lo, hi);
      },
      &job);
}

// f(begin, end) over [0, count) products of `macs` multiply-adds each. A product too small to split
// over the threads itself (attention's 64 x 64 x 32 per head) would leave the whole batch on one
// core: the batch is split instead, each part at least one split product's work.
template <class F>
void parallel_products(std::int64_t count, std::int64_t macs, F&& f) {
  if (count > 1 && macs < kParallelMacs)
    parallel_for(count, 1, (kParallelMacs + macs - 1) / std::max<std::int64_t>(macs, 1), f);
  else
    f(std::int64_t{0}, count);
}

}  // namespace metagrad::cpu::detail
