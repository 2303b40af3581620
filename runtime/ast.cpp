// The kernel AST: its leaves, dtypes and shapes, its cache key, and printing.
#include "metagrad/ast.hpp"
#include "metagrad/detail/cat.hpp"

#include <algorithm>
#include <cstring>

namespace metagrad {

std::vector<MemBuffer> mem_buffers(const LazyOp& ast) {
  std::vector<MemBuffer> out;
  for_each_leaf(ast, [&](const MemBuffer& b) {
    if (std::none_of(out.begin(), out.end(), [&](const MemBuffer& m) { return m.index == b.index; }))
      out.push_back(b);
  });
  std::sort(out.begin(), out.end(), [](const MemBuffer& a, const MemBuffer& b) { return a.index < b.index; });
  return out;
}

Dims stored_buffers(const LazyOp& ast) { return is_multi_store(ast) ? std::get<Dims>(ast.arg) : Dims{0}; }

std::uint64_t same_index_reads(const LazyOp& ast) {
  std::vector<const LazyOp*> stack{&ast};
  while (!stack.empty()) {  // a reduce reads many elements for each it writes
    const LazyOp* o = stack.back();
    stack.pop_back();
    if (o->op.type == OpType::Reduce || o->op == FusedOps::MULACC) return 0;
    for (const LazySrc& s : o->src)
      if (auto* sub = std::get_if<std::shared_ptr<LazyOp>>(&s)) stack.push_back(sub->get());
  }
  std::uint64_t seen = 0, strided = 0;
  for_each_leaf(ast, [&](const MemBuffer& b) {
    if (b.index >= 64) return;
    seen |= std::uint64_t{1} << b.index;
    if (!b.st.contiguous()) strided |= std::uint64_t{1} << b.index;
  });
  std::uint64_t written = 0;
  for (std::int64_t j : stored_buffers(ast))
    if (j < 64) written |= std::uint64_t{1} << j;
  return seen & ~strided & ~written;
}

namespace {
// The key is binary (raw integers, the constant's bits): building it runs on every kernel launch.
void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const Dims& d) {
  put(out, static_cast<std::int64_t>(d.size()));
  for (std::int64_t x : d) put(out, x);
}

void put(std::string& out, const Pairs& p) {
  put(out, static_cast<std::int64_t>(p.size()));
  for (const auto& [a, b] : p) put(out, a), put(out, b);
}

void key_of(const LazyOp& op, std::string& out) {
  out += static_cast<char>(op.op.type), out += static_cast<char>(op.op.value), out += '(';
  if (auto* c = std::get_if<ConstArg>(&op.arg)) {
    std::int64_t bits;
    std::memcpy(&bits, &c->value, sizeof bits);  // exact: a constant is part of the source
    put(out, bits), put(out, c->dtype.priority), put(out, c->shape);
  }
  if (auto* d = std::get_if<Dims>(&op.arg)) put(out, *d);
  if (auto* p = std::get_if<Pairs>(&op.arg)) put(out, *p);
  if (auto* t = std::get_if<DType>(&op.arg)) put(out, t->priority);
  for (const LazySrc& x : op.src) {
    if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&x)) {
      key_of(**o, out);
      continue;
    }
    const MemBuffer& b = std::get<MemBuffer>(x);
    out += 'b';
    put(out, static_cast<std::int64_t>(b.index) - 1);
    put(out, b.dtype.priority);
    for (const View& v : b.st.views()) {
      out += 'v';
      put(out, v.shape), put(out, v.strides), put(out, v.offset), put(out, v.mask);
    }
  }
  out += ')';
}

void print_tree(const LazySrc& s, int depth, std::string& out) {
  std::string pad(static_cast<std::size_t>(depth) * 2, ' ');
  if (auto* b = std::get_if<MemBuffer>(&s)) {
    out += detail::cat(pad, "buffer ", b->dtype.name, " ", to_string(b->st), "\n");
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

std::string ast_key(const LazyOp& ast, DType out_dtype) {
  std::string out;
  out.reserve(256);
  put(out, out_dtype.priority);
  key_of(ast, out);
  return out;
}

std::string to_string(const LazyOp& op) {
  std::string out;
  print_tree(std::make_shared<LazyOp>(op), 0, out);
  return out;
}

}  // namespace metagrad
