#pragma once
// The codegen pipeline, as a list of passes: AST -> Kernel -> hand-coded optimizations ->
// linearize -> render. DEBUG=3 prints the AST, 4 the source, 5 the UOps. Every compiled device
// turns its kernels into source through this. (Not metagrad::lower, lower.hpp: that turns a static
// expression into a Tensor graph.)
#include <functional>
#include <memory>
#include <string>

#include "metagrad/codegen/linearizer.hpp"
#include "metagrad/device.hpp"

namespace metagrad::codegen {

using Renderer = std::function<std::string(const LinearizedKernel&)>;
// An ASTRunner with the rendered source, launch size and op estimate; its program is not built yet
// (and its mem_estimate, which depends on the buffers it runs on, is Compiled's to fill).
ASTRunner run_pipeline(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const Renderer& render,
                       const Opts& opts = Opts::host());

}  // namespace metagrad::codegen
