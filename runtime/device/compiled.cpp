// The compiled-device half of the seed's ops.py: kernels cached by AST, run through ASTRunner.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "metagrad/detail/env.hpp"
#include "metagrad/device.hpp"
#include "metagrad/device/buffer_pool.hpp"
#include "metagrad/device/compile_times.hpp"
#include "metagrad/device/gemm.hpp"

namespace metagrad {

thread_local std::optional<std::vector<CacheEntry>> GlobalCounters::cache;

void ASTRunner::exec(const std::vector<RawBuffer*>& bufs) const {
  auto t0 = std::chrono::steady_clock::now();
  launch(bufs);
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GlobalCounters::time_sum += t;
  GlobalCounters::kernel_count += 1;
  GlobalCounters::global_ops += op_estimate;
  GlobalCounters::global_mem += mem_estimate;
  if (detail::env_cached([] { return getenv_int("DEBUG"); }) >= 2)
    print_kernel_line(name, bufs.size(), t, op_estimate, mem_estimate);
}

Compiled::Compiled(BufferFactory buffer, Codegen codegen, Runtime runtime, bool concurrent_compiles,
                   DiskProbe on_disk, Precompile precompile)
    : pool_(std::make_shared<BufferPool>(
          std::move(buffer), static_cast<std::int64_t>(getenv_int("METAGRAD_POOL_MB", 1024)) * (1 << 20))),
      codegen_(std::move(codegen)),
      runtime_(std::move(runtime)),
      concurrent_compiles_(concurrent_compiles),
      on_disk_(std::move(on_disk)),
      precompile_(std::move(precompile)) {}

std::shared_ptr<RawBuffer> Compiled::alloc(std::size_t size, DType dtype) {
  return pool_->alloc(size, dtype);
}

namespace {
std::mutex runners_mu;  // guards every Compiled's cache_

std::uint64_t write_mask(const LazyOp& ast) {
  std::uint64_t m = 0;
  for (std::int64_t j : stored_buffers(ast))
    if (j < 64) m |= std::uint64_t{1} << j;
  return m;
}

std::string runner_key(const LazyOp& ast, DType out_dtype) {
  std::string key = ast_key(ast, out_dtype);
  if (!gemm::enabled()) key += '\x01';  // rendered even where a host device would run the GEMM
  return key;
}
}  // namespace

bool Compiled::cached(const LazyOp& ast, DType out_dtype) const {
  std::string key = runner_key(ast, out_dtype);
  std::lock_guard lock(runners_mu);
  return cache_.count(key) != 0;
}

std::string Compiled::kernel_name(const LazyOp& ast, DType out_dtype) const {
  std::string key = runner_key(ast, out_dtype);
  std::lock_guard lock(runners_mu);
  auto it = cache_.find(key);
  return it == cache_.end() ? "" : it->second.name;
}

std::size_t Compiled::kernels() const {
  std::lock_guard lock(runners_mu);
  return cache_.size();
}

namespace {
// Adds the wall time of its scope to a counter (GlobalCounters::compile_time, CompileTimes::codegen).
struct Clock {
  double& into;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Clock() { into += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};
}  // namespace

void Compiled::prebuild(const std::vector<std::pair<const LazyOp*, DType>>& kernels) {
  build(kernels, false, nullptr);
}

void Compiled::prebuild(const std::vector<std::pair<const LazyOp*, DType>>& kernels, const Notice& notice) {
  build(kernels, true, notice);
}

void Compiled::build(const std::vector<std::pair<const LazyOp*, DType>>& kernels, bool all,
                     const Notice& notice) {
  if (!all && !concurrent_compiles_) return;  // runner() builds them one after another as they run
  Clock clock{GlobalCounters::compile_time};
  struct Job {
    std::string key;
    const LazyOp* ast;
    DType dtype;
    ASTRunner r;
    bool failed = false;
  };
  std::vector<Job> jobs;
  {
    std::lock_guard lock(runners_mu);
    std::unordered_set<std::string> seen;
    for (const auto& [ast, dtype] : kernels)
      if (std::string key = runner_key(*ast, dtype); !cache_.count(key) && seen.insert(key).second)
        jobs.push_back({std::move(key), ast, dtype, {}});
  }
  if (jobs.empty() || (!all && jobs.size() < 2)) return;
  // Code generation in order (DEBUG=4's sources stay in order), then the programs in parallel.
  auto generate = [&] {
    {
      std::lock_guard codegen_lock(runners_mu);
      Clock codegen_clock{CompileTimes::codegen};
      for (Job& j : jobs) {
        try {
          j.r = codegen_(std::make_shared<LazyOp>(*j.ast), j.dtype);
        } catch (...) {
          j.failed = true;  // runner() generates it again and throws where the kernel runs
          continue;
        }
        j.r.same_index_reads = same_index_reads(*j.ast);
        j.r.writes = write_mask(*j.ast);
        j.r.mem_estimate = -1;  // set by runner(), which sees the buffers
      }
    }
    if (notice) {
      std::size_t from_disk = 0;
      // A kernel whose program came with its code generation (a contraction) is from the cache
      // when every kernel it builds is.
      auto cached = [&](const ASTRunner& r) {
        if (!r.clprg) return on_disk_(r.prg);
        for (const std::string* src : r.clprg->parts())
          if (!on_disk_(*src)) return false;
        return true;
      };
      for (const Job& j : jobs) from_disk += !j.failed && on_disk_ && cached(j.r);
      notice(jobs.size(), from_disk);
    }
  };
  std::atomic<std::size_t> next = 0;
  auto programs = [&] {
    for (std::size_t i; (i = next++) < jobs.size();) {
      ASTRunner& r = jobs[i].r;
      if (jobs[i].failed || r.clprg) continue;  // a contraction's GEMM comes with its program
      try {
        r.clprg = runtime_(r.name, r.prg);
        r.clprg->op_estimate = r.op_estimate;
      } catch (...) {
        jobs[i].failed = true;  // as above
      }
    }
  };
  if (precompile_ && getenv_int("METAGRAD_GROUP_COMPILE", 1)) {
    // The device builds what generation and the programs' construction asked for, together.
    precompile_([&] { generate(), programs(); });
  } else {
    generate();
    std::size_t n = concurrent_compiles_ ? std::min<std::size_t>(
                                               jobs.size(), std::max(1u, std::thread::hardware_concurrency()))
                                         : 1;
    std::vector<std::thread> threads;
    for (std::size_t t = 1; t < n; ++t) threads.emplace_back(programs);
    programs();
    for (auto& t : threads) t.join();
  }
  std::lock_guard lock(runners_mu);
  for (Job& j : jobs)
    if (!j.failed) cache_.emplace(std::move(j.key), std::move(j.r));
}

const ASTRunner& Compiled::runner(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  std::string key = runner_key(ast, bufs.at(0)->dtype);
  std::lock_guard lock(runners_mu);
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (it->second.mem_estimate < 0) {  // prebuilt: its buffers are known now
      it->second.mem_estimate = 0;
      for (const auto& b : bufs) it->second.mem_estimate += static_cast<std::int64_t>(b->nbytes());
    }
    return it->second;
  }
  Clock clock{GlobalCounters::compile_time};
  ASTRunner r = [&] {
    Clock codegen_clock{CompileTimes::codegen};
    return codegen_(std::make_shared<LazyOp>(ast), bufs[0]->dtype);
  }();
  r.same_index_reads = same_index_reads(ast);
  r.writes = write_mask(ast);
  r.mem_estimate = 0;  // the bytes of the buffers it runs on
  for (const auto& b : bufs) r.mem_estimate += static_cast<std::int64_t>(b->nbytes());
  if (!r.clprg) {  // (a contraction on a host device comes with its program: the runtime GEMM)
    r.clprg = runtime_(r.name, r.prg);
    r.clprg->op_estimate = r.op_estimate;
  }
  return cache_.emplace(std::move(key), std::move(r)).first->second;
}

void Compiled::exec_ast(const LazyOp& ast, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  exec(runner(ast, bufs), bufs);
}

void Compiled::exec(const ASTRunner& r, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  // The thread's list of pointers, borrowed (a kernel that runs another, a custom fill, finds it
  // taken and makes its own): an eager op allocates one thing fewer.
  thread_local std::vector<RawBuffer*> spare;
  std::vector<RawBuffer*> raw = std::move(spare);
  raw.clear();
  for (const auto& b : bufs) raw.push_back(b.get());
  r.exec(raw);
  spare = std::move(raw);
  // The JIT's capture keeps every buffer the kernel touched alive.
  if (GlobalCounters::cache) GlobalCounters::cache->push_back({r, bufs});
}

}  // namespace metagrad
