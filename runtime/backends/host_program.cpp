// Host kernels (CLANG, LLVM): calling a compiled function on buffer pointers, split across the
// thread pool, and the runners of an AST rendered as C-style source.
#include "metagrad/backends/host_program.hpp"

#include <array>
#include <stdexcept>
#include <utility>

#include "metagrad/backends/gemm_program.hpp"
#include "metagrad/codegen/gemm.hpp"
#include "metagrad/device/gemm.hpp"

#include "metagrad/codegen/pipeline.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device/threadpool.hpp"

namespace metagrad {

namespace {

// Calls fn with the buffer pointers (and the range) for up to kMaxHostArgs buffers.
template <std::size_t... I>
void call_bufs(void* fn, void* const* a, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))...)>(fn)(a[I]...);
}
template <std::size_t... I>
void call_range(void* fn, void* const* a, std::int64_t s, std::int64_t e, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(decltype((void)I, static_cast<void*>(nullptr))..., std::int64_t, std::int64_t)>(
      fn)(a[I]..., s, e);
}
template <std::size_t... N>
constexpr auto make_table(std::index_sequence<N...>) {
  using Bufs = void (*)(void*, void* const*);
  using Range = void (*)(void*, void* const*, std::int64_t, std::int64_t);
  return std::pair{
      std::array<Bufs, sizeof...(N)>{
          [](void* f, void* const* a) { call_bufs(f, a, std::make_index_sequence<N>{}); }...},
      std::array<Range, sizeof...(N)>{[](void* f, void* const* a, std::int64_t s, std::int64_t e) {
        call_range(f, a, s, e, std::make_index_sequence<N>{});
      }...}};
}
constexpr auto kCallers = make_table(std::make_index_sequence<kMaxHostArgs + 1>{});

}  // namespace

HostProgram::~HostProgram() = default;

std::vector<void*> host_pointers(const char* device, const std::vector<RawBuffer*>& bufs) {
  std::vector<void*> ptrs;
  ptrs.reserve(bufs.size());  // (one allocation per kernel launch, not one per growth)
  for (RawBuffer* b : bufs) ptrs.push_back(host_pointer(device, b));
  return ptrs;
}

void* host_pointer(const char* device, RawBuffer* b) {
  auto* m = dynamic_cast<RawMallocBuffer*>(b);
  if (!m) throw std::invalid_argument(detail::cat(device, ": buffers must be RawMallocBuffers"));
  return m->data();
}

void call_host(void* fn, void* const* ptrs, std::size_t count) {
  if (count > kMaxHostArgs)
    throw std::runtime_error(detail::cat("a host kernel called with ", std::to_string(count),
                                         " buffers and no range; at most ", std::to_string(kMaxHostArgs),
                                         " are supported"));
  kCallers.first[count](fn, ptrs);
}

void call_host_range(void* fn, void* const* ptrs, std::size_t count, std::int64_t start, std::int64_t end) {
  if (count > kMaxHostArgs)  // (the kernel takes the array itself)
    return reinterpret_cast<void (*)(void* const*, std::int64_t, std::int64_t)>(fn)(ptrs, start, end);
  kCallers.second[count](fn, ptrs, start, end);
}

void run_host(void* fn, void* const* ptrs, std::size_t count, std::int64_t n, std::int64_t op_estimate) {
  // Below ~a few hundred thousand ops, waking other threads costs more than it saves.
  if (op_estimate < (1 << 18)) return call_host_range(fn, ptrs, count, 0, n);
  parallel_for(n, [&](std::int64_t s, std::int64_t e) { call_host_range(fn, ptrs, count, s, e); });
}

ASTRunner host_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const codegen::Renderer& render,
                      const Compiled::Runtime& compile, const Compiled::BufferFactory& scratch,
                      const codegen::Opts& opts) {
  if (out_dtype == dtypes::float32 && gemm::enabled()) {
    codegen::Kernel k(ast, out_dtype);
    if (auto plan = codegen::match_gemm(k)) return gemm_runner(k, *plan, render, compile, scratch);
  }
  return codegen::run_pipeline(ast, out_dtype, render, opts);
}

ASTRunner cstyle_runner(const std::shared_ptr<LazyOp>& ast, DType out_dtype,
                        const codegen::CStyleLanguage& lang, const codegen::Opts& opts) {
  return codegen::run_pipeline(
      ast, out_dtype, [&](const codegen::LinearizedKernel& k) { return codegen::render_cstyle(k, lang); },
      opts);
}

}  // namespace metagrad
