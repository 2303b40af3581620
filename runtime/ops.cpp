// Printing of ops.
#include "metagrad/ops.hpp"

namespace metagrad {

std::string to_string(Op op) {
  static const char* const names[][7] = {
      {"UnaryOps.NOOP", "UnaryOps.EXP2", "UnaryOps.LOG2", "UnaryOps.CAST", "UnaryOps.SIN"},
      {"BinaryOps.ADD", "BinaryOps.SUB", "BinaryOps.MUL", "BinaryOps.DIV", "BinaryOps.POW", "BinaryOps.CMPEQ",
       "BinaryOps.MAX"},
      {"TernaryOps.WHERE"},
      {"ReduceOps.SUM", "ReduceOps.MAX"},
      {"MovementOps.RESHAPE", "MovementOps.PERMUTE", "MovementOps.EXPAND", "MovementOps.PAD",
       "MovementOps.SHRINK", "MovementOps.STRIDE"},
      {"FusedOps.MULACC"},
      {"LoadOps.EMPTY", "LoadOps.RAND", "LoadOps.CONST", "LoadOps.FROM", "LoadOps.CONTIGUOUS",
       "LoadOps.CUSTOM"}};
  return names[static_cast<int>(op.type)][op.value];
}

}  // namespace metagrad
