#pragma once
// Everything a user of metagrad names, in namespace metagrad: the dynamic path (Tensor, nn, optim,
// TinyJit, devices), the static path (metagrad/fixed.hpp), lowering of static expressions to the
// dynamic graph (metagrad::lower) and ahead-of-time generators (metagrad::aot), plus the version
// macros. Device-specific headers (metagrad/backends/ops_llvm.hpp, metagrad/backends/ops_opencl.hpp) stay
// separate.
#include "metagrad/aot.hpp"
#include "metagrad/ast.hpp"
#include "metagrad/backends/host_program.hpp"
#include "metagrad/backends/ops_clang.hpp"
#include "metagrad/datasets/fashion_mnist.hpp"
#include "metagrad/device.hpp"
#include "metagrad/device/disk_cache.hpp"
#include "metagrad/device/raw_buffer.hpp"
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
#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/shape/symbolic.hpp"
#include "metagrad/shape/view.hpp"
#include "metagrad/tensor.hpp"
#include "metagrad/version.hpp"
