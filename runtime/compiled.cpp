// The compiled-device half of the seed's ops.py: kernels cached by AST, run through ASTRunner.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "metagrad/lazy.hpp"

namespace metagrad {

std::optional<std::vector<CacheEntry>> GlobalCounters::cache;

void ASTRunner::exec(const std::vector<RawBuffer*>& bufs) const {
  auto t0 = std::chrono::steady_clock::now();
  (*clprg)(global_size, local_size, bufs);
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GlobalCounters::time_sum += t;
  GlobalCounters::kernel_count += 1;
  GlobalCounters::global_ops += op_estimate;
  GlobalCounters::global_mem += mem_estimate;
  if (getenv_int("DEBUG") >= 2) {
    std::fprintf(stderr, "*** %-28s %8.2f us  %8.2f GFLOPS  %8.2f GB/s\n", name.c_str(), t * 1e6,
                 static_cast<double>(op_estimate) / t * 1e-9, static_cast<double>(mem_estimate) / t * 1e-9);
  }
}

const ASTRunner& Compiled::runner(const LazyOp& ast, DType out_dtype) {
  static std::mutex mu;
  std::string key = ast_key(ast, out_dtype);
  std::lock_guard lock(mu);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ASTRunner r = codegen_(std::make_shared<LazyOp>(ast), out_dtype);
  r.clprg = runtime_(r.name, r.prg);
  r.clprg->op_estimate = r.op_estimate;
  return cache_.emplace(std::move(key), std::move(r)).first->second;
}

void Compiled::exec_ast(const LazyOp& ast, const std::shared_ptr<RawBuffer>& output) {
  const ASTRunner& r = runner(ast, output->dtype);
  std::vector<std::shared_ptr<RawBuffer>> owned{output};
  for (const auto& leaf : ast.buffers()) owned.push_back(leaf->base()->realized);
  std::vector<RawBuffer*> bufs;
  for (const auto& b : owned) bufs.push_back(b.get());
  r.exec(bufs);
  if (GlobalCounters::cache) GlobalCounters::cache->push_back({r, std::move(owned)});
}

}  // namespace metagrad
