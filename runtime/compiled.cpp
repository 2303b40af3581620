// The compiled-device half of the seed's ops.py: kernels cached by AST, run through ASTRunner.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>

#include "metagrad/lazy.hpp"
#include "metagrad/runtime/buffer_pool.hpp"
#include "metagrad/runtime/gemm.hpp"

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

Compiled::Compiled(BufferFactory buffer, Codegen codegen, Runtime runtime)
    : pool_(std::make_shared<BufferPool>(
          std::move(buffer), static_cast<std::size_t>(getenv_int("METAGRAD_POOL_MB", 1024)) << 20)),
      codegen_(std::move(codegen)),
      runtime_(std::move(runtime)) {}

std::shared_ptr<RawBuffer> Compiled::alloc(std::size_t size, DType dtype) {
  return pool_->alloc(size, dtype);
}

const ASTRunner& Compiled::runner(const LazyOp& ast, DType out_dtype) {
  return runner(ast, out_dtype, ast.buffers());
}

const ASTRunner& Compiled::runner(const LazyOp& ast, DType out_dtype,
                                  const std::vector<LazyBufferPtr>& leaves) {
  static std::mutex mu;
  std::string key = ast_key(ast, out_dtype, leaves);
  if (!gemm::enabled()) key += '\x01';  // rendered even where a host device would run the GEMM
  std::lock_guard lock(mu);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  ASTRunner r = codegen_(std::make_shared<LazyOp>(ast), out_dtype);
  if (!r.clprg) {  // (a contraction on a host device comes with its program: the runtime GEMM)
    r.clprg = runtime_(r.name, r.prg);
    r.clprg->op_estimate = r.op_estimate;
  }
  return cache_.emplace(std::move(key), std::move(r)).first->second;
}

void Compiled::exec_ast(const LazyOp& ast, const std::shared_ptr<RawBuffer>& output) {
  std::vector<LazyBufferPtr> leaves = ast.buffers();
  const ASTRunner& r = runner(ast, output->dtype, leaves);
  std::vector<RawBuffer*> bufs{output.get()};
  bufs.reserve(leaves.size() + 1);
  for (const auto& leaf : leaves) bufs.push_back(leaf->base()->realized.get());
  r.exec(bufs);
  if (GlobalCounters::cache) {  // the JIT's capture keeps every buffer the kernel touched alive
    std::vector<std::shared_ptr<RawBuffer>> owned{output};
    for (const auto& leaf : leaves) owned.push_back(leaf->base()->realized);
    GlobalCounters::cache->push_back({r, std::move(owned)});
  }
}

}  // namespace metagrad
