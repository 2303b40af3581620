#include "metagrad/codegen/pipeline.hpp"

#include <algorithm>
#include <cstdio>

namespace metagrad::codegen {

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
  if (debug >= 3) std::fprintf(stderr, "%s", to_string(*ast).c_str());
  if (debug >= 5)
    for (const auto& u : lin.uops) std::fprintf(stderr, "%s\n", to_string(u).c_str());
  if (debug >= 4) std::fprintf(stderr, "%s\n", r.prg.c_str());
  return r;
}

}  // namespace metagrad::codegen
