#include "metagrad/runtime/threadpool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "metagrad/helpers.hpp"

namespace metagrad {

namespace {

// Each run publishes one Job; a worker takes it under the lock and counts itself in `active`, so
// the Job outlives every worker still touching it.
class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f) {
    std::lock_guard turn(turn_);
    Job job{&f, n, static_cast<int>(std::min<std::int64_t>(n, size()))};
    job.remaining = job.chunks;
    {
      std::lock_guard lock(m_);
      job_ = &job;
      ++generation_;
    }
    cv_.notify_all();
    drain(job);
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return job.remaining == 0 && job.active == 0; });
    job_ = nullptr;
  }

 private:
  struct Job {
    const std::function<void(std::int64_t, std::int64_t)>* f;
    std::int64_t n;
    int chunks;
    std::atomic<int> next{0}, remaining{0};
    int active = 0;  // workers inside drain(); guarded by m_
  };

  static void drain(Job& job) {
    for (int c; (c = job.next++) < job.chunks;) {
      (*job.f)(job.n * c / job.chunks, job.n * (c + 1) / job.chunks);
      --job.remaining;
    }
  }
  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++job->active;
      }
      drain(*job);
      std::lock_guard lock(m_);
      --job->active;
      done_.notify_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex m_, turn_;
  std::condition_variable cv_, done_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p(static_cast<int>(std::max<long>(
      1, getenv_int("THREADS", static_cast<long>(std::max(1u, std::thread::hardware_concurrency()))))));
  return p;
}

}  // namespace

int thread_count() { return pool().size(); }

void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f) {
  if (n <= 0) return;
  if (n == 1 || pool().size() == 1) return f(0, n);
  pool().run(n, f);
}

}  // namespace metagrad
