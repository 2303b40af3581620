/* An AOT library's threads (runtime/aot/aot.cpp pastes this text into NAME.c, the P prefix taking the
   library's; CMake reads it at build time; compiled as C by test/aot (aot_gemm_c_*)): a team started on
   first use once NAME_set_threads asked for more than one thread, parked on a condition variable between
   uses (a wake-up costs a few microseconds; starting and joining threads for each product cost 30 us on
   Zen 3), joined when the library is unloaded. Calls into a library are one at a time, so one team
   serves it. P_run_parts(parts, fn, ctx) calls fn(ctx, p, parts) once for each p in [0, parts), part 0
   on the caller, and returns when all have returned (gemm_driver.h's seam); P_run_range(fn, args, n) runs a
   kernel's range [0, n) in equal slices, as the CLANG device's thread pool does. */
#include <pthread.h>
#include <stdint.h>

#define P_TMAX 64
static int P_threads = 1;
static void P_use_threads(int threads) { P_threads = threads < 1 ? 1 : threads > P_TMAX ? P_TMAX : threads; }

static pthread_mutex_t P_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t P_wake = PTHREAD_COND_INITIALIZER, P_done = PTHREAD_COND_INITIALIZER;
static struct {
  pthread_t thread[P_TMAX];
  unsigned long born[P_TMAX]; /* the round a thread started in: it waits for the next */
  unsigned long round;        /* one for each P_run_parts */
  int started, workers, parts, pending, stop;
  void (*fn)(void*, int, int);
  void* ctx;
} P_team;

static void* P_worker(void* arg) {
  const int p = (int)(intptr_t)arg; /* its part: 1 .. P_TMAX - 1 */
  unsigned long seen;
  pthread_mutex_lock(&P_mu);
  seen = P_team.born[p];
  for (;;) {
    while (P_team.round == seen && !P_team.stop) pthread_cond_wait(&P_wake, &P_mu);
    if (P_team.stop) break;
    seen = P_team.round;
    if (p <= P_team.workers) {
      void (*fn)(void*, int, int) = P_team.fn;
      void* ctx = P_team.ctx;
      const int parts = P_team.parts;
      pthread_mutex_unlock(&P_mu);
      fn(ctx, p, parts);
      pthread_mutex_lock(&P_mu);
      if (--P_team.pending == 0) pthread_cond_signal(&P_done);
    }
  }
  pthread_mutex_unlock(&P_mu);
  return 0;
}

static void P_run_parts(int parts, void (*fn)(void*, int, int), void* ctx) {
  int p, workers;
  pthread_mutex_lock(&P_mu);
  while (P_team.started < parts - 1 && P_team.started < P_TMAX - 1) {
    p = P_team.started + 1;
    P_team.born[p] = P_team.round;
    if (pthread_create(&P_team.thread[p], 0, P_worker, (void*)(intptr_t)p) != 0) break;
    ++P_team.started;
  }
  workers = P_team.started < parts - 1 ? P_team.started : parts - 1;
  P_team.fn = fn, P_team.ctx = ctx, P_team.parts = parts, P_team.workers = workers, P_team.pending = workers;
  ++P_team.round;
  if (workers) pthread_cond_broadcast(&P_wake);
  pthread_mutex_unlock(&P_mu);
  fn(ctx, 0, parts);
  for (p = workers + 1; p < parts; ++p) fn(ctx, p, parts); /* parts no thread could be started for */
  pthread_mutex_lock(&P_mu);
  while (P_team.pending) pthread_cond_wait(&P_done, &P_mu);
  pthread_mutex_unlock(&P_mu);
}

/* The team is joined before the library's code goes (dlclose, or the process's exit). */
__attribute__((destructor)) static void P_stop_team(void) {
  int p;
  pthread_mutex_lock(&P_mu);
  P_team.stop = 1;
  pthread_cond_broadcast(&P_wake);
  pthread_mutex_unlock(&P_mu);
  for (p = 1; p <= P_team.started; ++p) pthread_join(P_team.thread[p], 0);
  P_team.started = 0, P_team.stop = 0;
}

/* A kernel's range [0, n) in equal slices over the threads: fn(args, start, end) calls the kernel. */
typedef struct {
  void (*fn)(void* const*, int64_t, int64_t);
  void* const* args;
  int64_t n;
} P_range;
__attribute__((unused)) static void P_range_part(void* r_, int p, int parts) {
  const P_range* r = (const P_range*)r_;
  r->fn(r->args, r->n * p / parts, r->n * (p + 1) / parts);
}
__attribute__((unused)) static void P_run_range(void (*fn)(void* const*, int64_t, int64_t), void* const* args,
                                                int64_t n) {
  P_range r;
  const int parts = n < P_threads ? (int)n : P_threads;
  if (parts <= 1) {
    fn(args, 0, n);
    return;
  }
  r.fn = fn, r.args = args, r.n = n;
  P_run_parts(parts, P_range_part, &r);
}
