#pragma once
// The linearizer: a Kernel becomes a flat list of UOps (loops, accumulators, loads with validity,
// ALU ops, stores), the one kernel IR every renderer (C, OpenCL C, LLVM IR) reads. Index and
// validity arithmetic stays symbolic here; renderers only translate it.
#include <string>
#include <vector>

#include "metagrad/codegen/kernel.hpp"

namespace metagrad::codegen {

enum class UOps : std::uint8_t {
  LOOP,  // for name in [0, extent) — the first global loop is the one threads split
  ENDLOOP,
  DEFINE_ACC,  // an accumulator, initialised to value (or to vin[0] where it has one)
  LOAD,        // buf[idx] where valid, else 0
  CONST,
  ALU,    // alu applied to vin
  ACC,    // vin[0] (an accumulator) = alu(vin[0], vin[1])
  STORE,  // buf[idx] = vin[0]
  LOCAL,  // OpenCL: name is the work-item's index in its group, [0, extent); closed by ENDLOOP
  GROUP,  // OpenCL: alu over the group's vin[0] values (through local memory), in every work-item
};

struct UOp {
  UOp(UOps uop_, DType dtype_ = dtypes::float32, std::vector<int> vin_ = {}, Op alu_ = UnaryOps::NOOP,
      int buf_ = -1, symbolic::Node idx_ = 0, symbolic::Node valid_ = 1, double value_ = 0,
      std::string name_ = {}, std::int64_t extent_ = 0, bool threaded_ = false)
      : uop(uop_),
        dtype(dtype_),
        vin(std::move(vin_)),
        alu(alu_),
        buf(buf_),
        idx(std::move(idx_)),
        valid(std::move(valid_)),
        value(value_),
        name(std::move(name_)),
        extent(extent_),
        threaded(threaded_) {}
  UOps uop;
  DType dtype = dtypes::float32;
  std::vector<int> vin;
  Op alu = UnaryOps::NOOP;
  int buf = -1;
  symbolic::Node idx = 0, valid = 1;
  double value = 0;
  std::string name;         // LOOP variable
  std::int64_t extent = 0;  // LOOP trip count
  bool threaded = false;    // LOOP: its range is split across threads / work items
};

// A host kernel (C, LLVM IR) with more buffers than this takes them as one array, `void* const* args`,
// rather than as arguments of their own (which callers pass through a table of signatures).
constexpr std::size_t kMaxBufferArguments = 32;

struct LinearizedKernel {
  std::string name;
  std::vector<UOp> uops;
  std::vector<DType> buf_dtypes;  // [0] the output (a multi-store's others follow the inputs)
  std::int64_t global_size = 1;   // trip count of the threaded loop
  std::int64_t local_size = 0;    // OpenCL: work-items per group (the threaded loop is the group)
  std::int64_t op_estimate = 0;
  bool reassociate = false;  // the reduce's float additions may be reordered (Kernel::reassociate)
  // A row kernel (Kernel::rows): elementwise work follows its reduces, so only the additions
  // themselves may be reordered (C's function-wide associative-math would move the rest).
  bool rows = false;
};

LinearizedKernel linearize(const Kernel& k);
// Whether the kernel stores into its buffer i (0, and a multi-store's others: ast.hpp).
bool written(const LinearizedKernel& k, std::size_t i);
// The dtype an ALU uop reads: its first operand's, except WHERE's, which reads its branches' (the
// condition is tested for non-zero); renderers convert the operands to it.
inline DType alu_input_dtype(const UOp& u, const std::vector<UOp>& uops) {
  if (u.vin.empty()) return u.dtype;
  return uops.at(static_cast<std::size_t>(u.vin[u.alu == TernaryOps::WHERE ? 1 : 0])).dtype;
}
std::string to_string(const UOp& u);  // one line, for DEBUG=5

}  // namespace metagrad::codegen
