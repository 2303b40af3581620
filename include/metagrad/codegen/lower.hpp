#pragma once
// Lowering, as a list of passes: AST -> Kernel -> hand-coded optimizations -> linearize -> render.
// DEBUG=3 prints the AST, 4 the source, 5 the UOps. Every compiled device lowers through this.
#include <functional>
#include <string>

#include "metagrad/codegen/linearizer.hpp"

namespace metagrad::codegen {

using Renderer = std::function<std::string(const LinearizedKernel&)>;
// An ASTRunner with the rendered source, launch size and estimates; its program is not built yet.
ASTRunner lower(const std::shared_ptr<LazyOp>& ast, DType out_dtype, const Renderer& render,
                const Opts& opts = Opts::host());

}  // namespace metagrad::codegen
