#pragma once
// Everything a user of metagrad names, in namespace metagrad: the dynamic path (Tensor, nn, optim,
// TinyJit, devices), the static path (metagrad/fixed.hpp), lowering of static expressions to the
// dynamic graph (metagrad::lower) and ahead-of-time generators (metagrad::aot), plus the version
// macros. Device-specific headers (metagrad/runtime/ops_llvm.hpp, metagrad/runtime/ops_opencl.hpp) stay
// separate.
#include "metagrad/aot.hpp"
#include "metagrad/ast.hpp"
#include "metagrad/datasets/fashion_mnist.hpp"
#include "metagrad/device.hpp"
#include "metagrad/fixed.hpp"
#include "metagrad/helpers.hpp"
#include "metagrad/jit.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/lower.hpp"
#include "metagrad/mlops.hpp"
#include "metagrad/nn.hpp"
#include "metagrad/nn/optim.hpp"
#include "metagrad/nn/state.hpp"
#include "metagrad/ops.hpp"
#include "metagrad/runtime/disk_cache.hpp"
#include "metagrad/runtime/host_program.hpp"
#include "metagrad/runtime/lib.hpp"
#include "metagrad/runtime/ops_clang.hpp"
#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/shape/symbolic.hpp"
#include "metagrad/shape/view.hpp"
#include "metagrad/tensor.hpp"
#include "metagrad/version.hpp"
