#include "metagrad/codegen/pipeline.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

namespace metagrad::codegen {

namespace {

// DEBUG=4's source: what precedes the kernel's own function (the renderer's helpers and pragmas,
// the same for every kernel) is printed the first time it is seen in the process, not each time.
void print_source(const std::string& src, const std::string& name) {
  std::size_t at = src.find(name);
  std::size_t line = at == std::string::npos ? 0 : src.rfind('\n', at);
  line = line == std::string::npos || at == std::string::npos ? 0 : line + 1;
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard lock(mu);
  std::string prelude = src.substr(0, line);
  if (!prelude.empty() && seen.insert(prelude).second)
    std::fprintf(stderr, "// prelude of every kernel on this device (printed once)\n%s", prelude.c_str());
  std::fprintf(stderr, "%s\n", src.c_str() + line);
}

}  // namespace

ASTRunner run_pipeline(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const Renderer& render,
                       const Opts& opts) {
  Kernel k(ast, out_dtype);
  k.hand_coded_optimizations(opts);
  LinearizedKernel lin = linearize(k);
  ASTRunner r;
  r.name = lin.name;
  r.prg = render(lin);
  r.global_size = {lin.global_size * std::max<std::int64_t>(lin.local_size, 1)};
  if (lin.local_size) r.local_size = {lin.local_size};
  r.op_estimate = lin.op_estimate;
  long debug = getenv_int("DEBUG");
  // Named, so that a kernel of DEBUG=2's lines can be found among the ASTs printed before a realize.
  if (debug >= 3) std::fprintf(stderr, "AST of %s:\n%s", lin.name.c_str(), to_string(*ast).c_str());
  if (debug >= 5)
    for (const auto& u : lin.uops) std::fprintf(stderr, "%s\n", to_string(u).c_str());
  if (debug >= 4) print_source(r.prg, lin.name);
  return r;
}

}  // namespace metagrad::codegen
