// Printing of ops and ASTs, and LazyOp::buffers.
#include "metagrad/ops.hpp"

#include <algorithm>

#include "metagrad/lazy.hpp"

namespace metagrad {

std::string to_string(Op op) {
  static const char* const names[][7] = {
      {"UnaryOps.NOOP", "UnaryOps.EXP2", "UnaryOps.LOG2", "UnaryOps.CAST", "UnaryOps.SIN"},
      {"BinaryOps.ADD", "BinaryOps.SUB", "BinaryOps.MUL", "BinaryOps.DIV", "BinaryOps.POW", "BinaryOps.CMPEQ",
       "BinaryOps.MAX"},
      {"ReduceOps.SUM", "ReduceOps.MAX"},
      {"MovementOps.RESHAPE", "MovementOps.PERMUTE", "MovementOps.EXPAND", "MovementOps.PAD",
       "MovementOps.SHRINK", "MovementOps.STRIDE"},
      {"FusedOps.MULACC"},
      {"LoadOps.EMPTY", "LoadOps.RAND", "LoadOps.CONST", "LoadOps.FROM", "LoadOps.CONTIGUOUS",
       "LoadOps.CUSTOM"}};
  return names[static_cast<int>(op.type)][op.value];
}

std::vector<std::shared_ptr<LazyBuffer>> LazyOp::buffers() const {
  std::vector<std::shared_ptr<LazyBuffer>> out;
  std::vector<const LazyOp*> stack{this};
  while (!stack.empty()) {
    const LazyOp* o = stack.back();
    stack.pop_back();
    for (auto it = o->src.rbegin(); it != o->src.rend(); ++it) {
      if (auto* b = std::get_if<std::shared_ptr<LazyBuffer>>(&*it)) {
        if (std::find(out.begin(), out.end(), *b) == out.end()) out.push_back(*b);
      } else {
        stack.push_back(std::get<std::shared_ptr<LazyOp>>(*it).get());
      }
    }
  }
  return out;
}

namespace {
void print_tree(const LazySrc& s, int depth, std::string& out) {
  std::string pad(static_cast<std::size_t>(depth) * 2, ' ');
  if (auto* b = std::get_if<std::shared_ptr<LazyBuffer>>(&s)) {
    out += detail::cat(pad, "buffer ", (*b)->dtype.name, " ", to_string((*b)->st), "\n");
    return;
  }
  const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(s);
  out += pad + to_string(op.op);
  if (auto* c = std::get_if<ConstArg>(&op.arg))
    out += detail::cat(" ", std::to_string(c->value), " ", c->dtype.name);
  if (auto* d = std::get_if<Dims>(&op.arg)) out += " " + to_string(*d);
  if (auto* p = std::get_if<Pairs>(&op.arg)) out += " " + to_string(*p);
  if (auto* t = std::get_if<DType>(&op.arg)) out += detail::cat(" ", t->name);
  out += "\n";
  for (const LazySrc& x : op.src) print_tree(x, depth + 1, out);
}
}  // namespace

std::string to_string(const LazyOp& op) {
  std::string out;
  print_tree(std::make_shared<LazyOp>(op), 0, out);
  return out;
}

}  // namespace metagrad
