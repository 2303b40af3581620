// The scheduler: realize() turns the lazy graph behind a buffer into kernels (LazyOp ASTs over
// buffer descriptors) and loads, and runs them on the buffers' devices. It is the only code that
// reads the lazy graph; devices and codegen get an AST and a list of RawBuffers, output first.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ast_builder.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/lazy.hpp"
#include "replayable_fill.hpp"
#include "schedule_cache.hpp"
#include "schedule_plan.hpp"

namespace metagrad {

// The scheduler. Each unrealized base buffer is either a direct load (EMPTY, CONST, FROM, RAND,
// CUSTOM, a CONTIGUOUS that can share its source) or a kernel: its op's AST with fusable sources
// inlined. A source is inlined when it is an unrealized elementwise base read whole (not through a
// view) with no other live consumer; constants are folded into the AST; anything else is a leaf
// whose base is realized first.

using scheduler::AstBuilder;
using scheduler::Plan;

namespace {

std::shared_ptr<GraphOp> make_op(Op op, std::vector<GraphSrc> src = {}, OpArg arg = {}) {
  return std::make_shared<GraphOp>(op, std::move(src), std::move(arg));
}

// Renumbers the leaves of a kernel built with provisional indices (into `inputs`) in
// for_each_leaf's order, which numbers the kernel's buffers (generated sources and cache keys
// depend on it), and returns the buffers in that order.
std::vector<LazyBufferPtr> number_leaves(LazyOp& ast, const std::vector<LazyBufferPtr>& inputs) {
  thread_local std::vector<std::size_t> final_index;  // (scratch: an eager op's allocations)
  thread_local std::vector<LazyOp*> stack;
  final_index.assign(inputs.size() + 1, 0);
  std::vector<LazyBufferPtr> leaves;
  leaves.reserve(inputs.size());
  for_each_leaf(ast, [&](const MemBuffer& m) {
    if (!final_index[m.index])
      final_index[m.index] = leaves.size() + 1, leaves.push_back(inputs[m.index - 1]);
  });
  stack.assign(1, &ast);
  while (!stack.empty()) {
    LazyOp* o = stack.back();
    stack.pop_back();
    for (LazySrc& x : o->src) {
      if (auto* m = std::get_if<MemBuffer>(&x))
        m->index = final_index[m->index];
      else
        stack.push_back(std::get<std::shared_ptr<LazyOp>>(x).get());
    }
  }
  return leaves;
}

// Fills p.ast (and p.leaves, p.deps) with the kernel that computes `op` into p.buf.
// A row kernel's reduces (codegen/kernel.hpp) all reduce one shape to one shape, each read back
// over that shape, and what the kernel stores has one of the two shapes.
constexpr std::size_t kMaxRowInputs = 12;

bool row_kernel_ok(const LazyOp& ast, const Dims& out) {
  std::optional<Dims> in, red;
  bool ok = true;
  std::vector<const LazyOp*> stack{&ast};
  while (!stack.empty() && ok) {
    const LazyOp* o = stack.back();
    stack.pop_back();
    if (o->op.type == OpType::Reduce || o->op == FusedOps::MULACC) {
      Dims i = ast_shape(o->src.at(0)), r = std::get<Dims>(o->arg);
      if (!in) in = i, red = r;
      ok = *in == i && *red == r;
    }
    if (o->op == MovementOps::EXPAND) ok = ok && (!in || std::get<Dims>(o->arg) == *in);
    for (const LazySrc& x : o->src)
      if (auto* sub = std::get_if<std::shared_ptr<LazyOp>>(&x)) stack.push_back(sub->get());
  }
  return ok && in && (out == *in || out == *red);
}

void plan_kernel(Plan& p, const std::shared_ptr<GraphOp>& op,
                 const std::unordered_set<const LazyBuffer*>* targets) {
  // Row kernels on compiled devices only (the interpreter evaluates one reduce a kernel).
  static thread_local std::unordered_map<std::string, bool> compiled;
  auto [it, fresh] = compiled.emplace(p.buf->device, false);
  if (fresh) it->second = dynamic_cast<Compiled*>(&Device::get(p.buf->device)) != nullptr;
  for (bool rows : {it->second, false}) {
    std::vector<LazyBufferPtr> deps = p.deps;
    AstBuilder builder{*p.buf, deps, targets, rows, it->second, false, 0, 0, {}, {}};
    auto ast = std::get<std::shared_ptr<LazyOp>>(builder.build(op, {}));
    // A row kernel reads its inputs in every pass over a row: past a few, the work its reduces
    // share with what follows them is cheaper written once (LayerNorm's backward behind a residual
    // stream's gradient sum).
    if (builder.row_reduces &&
        (!row_kernel_ok(*ast, p.buf->shape()) || builder.inputs.size() > kMaxRowInputs))
      continue;
    p.ast = std::move(ast), p.deps = std::move(deps);
    p.leaves = number_leaves(*p.ast, builder.inputs);
    return;
  }
}

Plan make_plan(const LazyBufferPtr& b, const std::unordered_set<const LazyBuffer*>* targets = nullptr) {
  Plan p;
  p.buf = b;
  const GraphOp& op = *b->op;
  if (op.op.type != OpType::Load) {
    plan_kernel(p, b->op, targets);
  } else if (op.op == LoadOps::CONTIGUOUS) {
    plan_kernel(p, make_op(UnaryOps::NOOP, op.src), targets);
  } else if (op.op == LoadOps::FROM) {
    p.from = std::get<LazyBufferPtr>(op.src[0])->contiguous();
    if (!p.from->base()->realized) p.deps.push_back(p.from->base());
  } else if (op.op == LoadOps::CUSTOM) {
    for (const GraphSrc& s : op.src) {
      LazyBufferPtr base = std::get<LazyBufferPtr>(s)->base();
      if (!base->realized) p.deps.push_back(base);
    }
  }
  return p;
}

// Runs a kernel on its inputs' realized buffers into a new buffer for b: through `runner` when one
// is given (a cached schedule's kernel), found on its first run.
std::shared_ptr<RawBuffer> run_kernel(Backend& dev, const LazyOp& ast,
                                      const std::vector<LazyBufferPtr>& leaves, const LazyBuffer& b,
                                      const std::vector<LazyBufferPtr>& stores = {},
                                      Plan::Runner* runner = nullptr) {
  auto out = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
  if (b.st.size() == 0) return out;  // nothing to compute for an empty result
  // The thread's list, borrowed (a custom fill that realizes finds it taken and makes its own),
  // emptied before it is given back: it must not hold the buffers.
  thread_local std::vector<std::shared_ptr<RawBuffer>> spare;
  std::vector<std::shared_ptr<RawBuffer>> bufs = std::move(spare);
  bufs.clear();
  bufs.push_back(out);
  for (const auto& leaf : leaves) bufs.push_back(leaf->base()->realized);
  for (const auto& s : stores) bufs.push_back(dev.alloc(static_cast<std::size_t>(s->st.size()), s->dtype));
  auto* compiled = runner ? dynamic_cast<Compiled*>(&dev) : nullptr;
  if (compiled) {
    if (runner->dev != compiled) runner->runner = &compiled->runner(ast, bufs), runner->dev = compiled;
    compiled->exec(*runner->runner, bufs);
  } else {
    dev.exec_ast(ast, bufs);
  }
  for (std::size_t i = 0; i < stores.size(); ++i) stores[i]->set_realized(bufs[leaves.size() + 1 + i]);
  bufs.clear(), spare = std::move(bufs);
  return out;
}

// Copies a whole buffer between devices through host memory.
std::shared_ptr<RawBuffer> copy_to(Backend& dev, const RawBuffer& src) {
  auto out = dev.alloc(src.size, src.dtype);
  std::vector<std::byte> host(src.nbytes());
  src.copyout(host.data());
  out->copyin(host.data());
  return out;
}

// A custom load whose fill a TinyJit replay may run again (replayable_fill.hpp).
const ReplayableFill* replayable(const GraphOp& op) {
  return std::get<std::shared_ptr<const CustomArg>>(op.arg)->fill.target<ReplayableFill>();
}

// Under a capture, work that replaying the captured kernels would not redo.
void note_not_replayable(const LazyBuffer& b, Backend& dev, const Plan& p) {
  if (!CaptureLog::active) return;
  const GraphOp& op = *b.op;
  // A copy from host memory (CPU) is data the step made, constant for its replays (arange's values).
  bool from_host = p.from && !Device::get(p.from->device).compiled();
  std::string what = p.ast                      ? (dev.compiled() ? "" : "a kernel on an interpreted device")
                     : op.op == LoadOps::FROM   ? (from_host ? "" : "a copy from " + p.from->device)
                     : op.op == LoadOps::RAND   ? "random numbers"
                     : op.op == LoadOps::CUSTOM ? (replayable(op) ? "" : "a custom load")
                                                : "";
  if (!what.empty())
    CaptureLog::active->not_replayable.push_back(
        detail::cat(what, " (", to_string(b.shape()), " ", b.dtype.name, " on ", b.device, ")"));
}

// Out of memory, saying for what: still a std::bad_alloc, whose own what() names nothing.
struct OutOfMemory : std::bad_alloc {
  std::string message;
  explicit OutOfMemory(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

void execute_plan(Plan& p);
void execute(Plan& p) {
  try {
    execute_plan(p);
  } catch (const OutOfMemory&) { throw; } catch (const std::bad_alloc&) {
    const LazyBuffer& b = *p.buf;
    const char* op = p.ast                        ? "a kernel's output"
                     : b.op->op == LoadOps::RAND  ? "rand (and randn, uniform, ...)"
                     : b.op->op == LoadOps::CONST ? "a constant (zeros, ones, full)"
                     : b.op->op == LoadOps::EMPTY ? "empty"
                     : b.op->op == LoadOps::FROM  ? "a copy between devices"
                                                  : "a custom load";
    double bytes = static_cast<double>(b.st.size()) * b.dtype.itemsize;
    char n[32];
    std::snprintf(n, sizeof n, "%.0f", bytes);
    throw OutOfMemory(detail::cat("realize: out of memory for ", op, " of shape ", to_string(b.shape()), " ",
                                  b.dtype.name, " on ", b.device, ": ", n, " bytes asked for"));
  }
}

void execute_plan(Plan& p) {
  LazyBuffer& b = *p.buf;
  if (b.realized) return;
  Backend& dev = Device::get(b.device);
  const GraphOp& op = *b.op;
  note_not_replayable(b, dev, p);
  std::shared_ptr<RawBuffer> out;
  if (p.ast) {  // (a CONTIGUOUS's one leaf is its buffer 1)
    if (scheduler::shares_source(p)) {
      out = p.leaves[0]->base()->realized;
    } else {
      out = run_kernel(dev, *p.ast, p.leaves, b, p.stores, p.runner.get());
      p.launch = GlobalCounters::kernel_count;
    }
  } else if (op.op == LoadOps::FROM) {
    out = copy_to(dev, *p.from->base()->realized);
  } else if (op.op == LoadOps::CONST) {  // a materialised constant: computed by a one-op kernel
    ConstArg c{std::get<ConstArg>(op.arg).value, b.dtype, b.shape()};
    out = run_kernel(
        dev, LazyOp(UnaryOps::NOOP, {std::make_shared<LazyOp>(LoadOps::CONST, std::vector<LazySrc>{}, c)}),
        {}, b);
  } else if (op.op ==
             LoadOps::RAND) {  // uniform [0, 1) from the seed, made on the host: same on every device
    std::mt19937_64 gen(static_cast<std::uint64_t>(std::get<ConstArg>(op.arg).value));
    std::vector<double> v(static_cast<std::size_t>(b.st.size()));
    for (double& x : v) x = static_cast<double>(gen() >> 40) * 0x1.0p-24;  // 24 bits: exact in float32
    out = dev.alloc(v.size(), b.dtype);
    write_from_double(*out, v);
  } else if (op.op == LoadOps::EMPTY) {
    out = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
  } else if (op.op == LoadOps::CUSTOM) {
    out = dev.alloc(static_cast<std::size_t>(b.st.size()), b.dtype);
    std::vector<RawBuffer*> inputs;
    for (const GraphSrc& s : op.src) inputs.push_back(std::get<LazyBufferPtr>(s)->base()->realized.get());
    std::get<std::shared_ptr<const CustomArg>>(op.arg)->fill(*out, inputs);
    // A TinyJit capture replays it in its turn among the kernels (an AOT capture has no CaptureLog).
    if (const ReplayableFill* f = replayable(op); f && CaptureLog::active && GlobalCounters::cache) {
      CacheEntry e{ASTRunner{}, {out}};
      e.prg.name = "custom", e.prg.clprg = std::make_shared<CustomProgram>(*f);
      for (const GraphSrc& s : op.src) e.bufs.push_back(std::get<LazyBufferPtr>(s)->base()->realized);
      GlobalCounters::cache->push_back(std::move(e));
    }
  } else {
    throw std::runtime_error("realize: " + to_string(op.op) + " cannot be realized directly");
  }
  b.set_realized(std::move(out));  // and the graph behind it can be freed
}

// Realizes take turns: they read and change the graph's shared state (which buffers are realized,
// how many consumers each has) that fusion decisions depend on, and a buffer must be computed
// once. Graph building on other threads goes on meanwhile (LazyBuffer::mu_ guards what it shares).
// Recursive: a CUSTOM load's fill may realize tensors itself.
std::recursive_mutex& realize_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

}  // namespace

bool scheduler::shares_source(const Plan& p) {
  const LazyBuffer& b = *p.buf;
  if (!p.ast || !b.op || b.op->op != LoadOps::CONTIGUOUS || p.ast->op != UnaryOps::NOOP ||
      p.ast->src.size() != 1)
    return false;
  const auto* leaf = std::get_if<MemBuffer>(&p.ast->src[0]);
  if (!leaf || !leaf->st.contiguous() || leaf->dtype != b.dtype) return false;
  LazyBufferPtr src = p.leaves.at(leaf->index - 1)->base();
  return (src->realized ? static_cast<std::int64_t>(src->realized->size) : src->st.size()) == b.st.size();
}

namespace {

// A cold step's kernels, compiled together before any runs (Compiled::prebuild), device by device.
void prebuild(const std::vector<Plan>& order) {
  std::unordered_map<std::string, std::vector<std::pair<const LazyOp*, DType>>> by_device;
  for (const Plan& p : order)
    if (scheduler::runs_kernel(p)) by_device[p.buf->device].emplace_back(p.ast.get(), p.buf->dtype);
  // A warm step (its first and last kernels built already) is left to runner(): looking up every
  // kernel here as well would cost each eager step a second key per kernel. (The last as well: a
  // step's backward starts with kernels its forward built, and ends with the optimizer's new ones.)
  for (const auto& [device, kernels] : by_device)
    if (auto* dev = dynamic_cast<Compiled*>(&Device::get(device));
        dev && kernels.size() >= 2 &&
        (!dev->cached(*kernels.front().first, kernels.front().second) ||
         !dev->cached(*kernels.back().first, kernels.back().second)))
      dev->prebuild(kernels);
}

}  // namespace

namespace {

// ---- multi-output kernels ----

bool has_reduce(const LazyOp& ast) {
  std::vector<const LazyOp*> stack{&ast};
  while (!stack.empty()) {
    const LazyOp* o = stack.back();
    stack.pop_back();
    if (o->op.type == OpType::Reduce || o->op == FusedOps::MULACC) return true;
    for (const LazySrc& x : o->src)
      if (auto* sub = std::get_if<std::shared_ptr<LazyOp>>(&x)) stack.push_back(sub->get());
  }
  return false;
}

// A kernel tree's depth and node count (ASTs are at most AstBuilder::kMaxFusedDepth deep).
struct TreeSize {
  std::size_t depth = 0, nodes = 0;
};
TreeSize size_of(const LazySrc& s) {
  auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s);
  if (!o) return {0, 1};
  TreeSize t;
  for (const LazySrc& x : (*o)->src) {
    TreeSize c = size_of(x);
    t.depth = std::max(t.depth, c.depth), t.nodes += c.nodes;
  }
  return {t.depth + 1, t.nodes + 1};
}

// A copy of the tree under `s` whose leaves are renumbered by `index` (old index -> new):
// number_leaves renumbers in place, so no node may be reached twice.
LazySrc copy_tree(const LazySrc& s, const std::vector<std::size_t>& index) {
  if (auto* m = std::get_if<MemBuffer>(&s)) {
    MemBuffer c = *m;
    c.index = index.at(m->index);
    return c;
  }
  const LazyOp& o = *std::get<std::shared_ptr<LazyOp>>(s);
  std::vector<LazySrc> src;
  src.reserve(o.src.size());
  for (const LazySrc& x : o.src) src.push_back(copy_tree(x, index));
  return std::make_shared<LazyOp>(o.op, std::move(src), o.arg);
}

// The leaves of `s` whose index is in `by` replaced, in place, by a copy of that tree renumbered by
// `by_index`. In place: a plan's nodes are its own (make_plan builds them), and copying the taker's
// tree at every merge made an optimizer's kernel, which takes several, quadratic in them.
using Replacements = std::unordered_map<std::size_t, LazySrc>;
void replace_leaves(LazySrc& s, const Replacements& by, const std::vector<std::size_t>& by_index) {
  if (auto* m = std::get_if<MemBuffer>(&s)) {
    if (auto it = by.find(m->index); it != by.end()) s = copy_tree(it->second, by_index);
    return;
  }
  for (LazySrc& x : std::get<std::shared_ptr<LazyOp>>(s)->src) replace_leaves(x, by, by_index);
}

// What q stores: its buffer and a multi-store's others, each with the tree it stores.
std::vector<std::pair<LazyBufferPtr, LazySrc>> stores_of(const Plan& q) {
  std::vector<std::pair<LazyBufferPtr, LazySrc>> out;
  if (!is_multi_store(*q.ast)) return {{q.buf, q.ast}};
  for (std::size_t i = 0; i < q.ast->src.size(); ++i)
    out.emplace_back(i ? q.stores[i - 1] : q.buf, q.ast->src[i]);
  return out;
}

// p computes what q stores too, stored after p's inputs: q's trees in place of p's reads of them.
void absorb(Plan& p, Plan& q) {
  auto q_out = stores_of(q);
  // Provisional numbering: p's leaves keep theirs; q's read a buffer p reads under p's index.
  std::vector<LazyBufferPtr> inputs = p.leaves;
  std::vector<std::size_t> q_index(q.leaves.size() + 1);
  // (a kernel buffer has one ShapeTracker in codegen: one index per buffer and views)
  auto views_of = [](const LazyOp& ast, std::size_t n) {
    std::vector<std::optional<ShapeTracker>> st(n + 1);
    std::vector<bool> mixed(n + 1, false);
    for_each_leaf(ast, [&](const MemBuffer& m) {
      if (st[m.index] && !(*st[m.index] == m.st)) mixed[m.index] = true;
      st[m.index] = m.st;
    });
    for (std::size_t i = 0; i <= n; ++i)
      if (mixed[i]) st[i].reset();
    return st;
  };
  auto p_st = views_of(*p.ast, p.leaves.size()), q_st = views_of(*q.ast, q.leaves.size());
  for (std::size_t i = 0; i < q.leaves.size(); ++i) {
    LazyBufferPtr base = q.leaves[i]->base();
    std::size_t k = 0;
    for (; k < p.leaves.size(); ++k)
      if (p.leaves[k]->base() == base && p_st[k + 1] && q_st[i + 1] && *p_st[k + 1] == *q_st[i + 1]) break;
    if (k == p.leaves.size()) k = inputs.size(), inputs.push_back(q.leaves[i]);
    q_index[i + 1] = k + 1;
  }
  Replacements by;
  for (std::size_t l = 0; l < p.leaves.size(); ++l)
    for (const auto& [buf, tree] : q_out)
      if (p.leaves[l]->base() == buf) by.emplace(l + 1, tree);
  std::vector<LazySrc> stores;
  if (is_multi_store(*p.ast))
    stores = std::move(p.ast->src);
  else
    stores.push_back(std::move(p.ast));
  for (LazySrc& x : stores) replace_leaves(x, by, q_index);
  for (const auto& [buf, tree] : q_out) stores.push_back(copy_tree(tree, q_index)), p.stores.push_back(buf);
  auto root = std::make_shared<LazyOp>(UnaryOps::NOOP, std::move(stores), Dims{});
  p.leaves = number_leaves(*root, inputs);
  Dims to{0};
  for (std::size_t k = 0; k < p.stores.size(); ++k)
    to.push_back(static_cast<std::int64_t>(p.leaves.size() + 1 + k));
  root->arg = to;
  p.ast = std::move(root);
  std::erase_if(p.deps, [&](const LazyBufferPtr& d) {
    return std::any_of(q_out.begin(), q_out.end(), [&](const auto& o) { return o.first == d; });
  });
  for (const LazyBufferPtr& d : q.deps)
    if (std::find(p.deps.begin(), p.deps.end(), d) == p.deps.end()) p.deps.push_back(d);
}

// Multi-output kernels: an elementwise kernel that reads, whole and in order, a buffer of its own
// shape that an earlier elementwise kernel of the schedule computes, when nothing between the two
// reads that buffer, computes it as well and stores it (a multi-store, ast.hpp): one kernel and one
// pass over the buffer fewer. An optimizer's parameter, m and v are one kernel; a buffer several
// kernels read is computed by the first of them that can. Compiled devices only (the interpreter
// runs one output).
void merge_stores(std::vector<Plan>& order) {
  constexpr std::size_t kMaxBuffers = 32;  // kernel buffers, outputs included (host kernels' arguments)
  constexpr std::size_t kMaxNodes = 4096;  // a merged kernel's tree
  // (eager steps schedule this every call: each plan's mergeability and the bases its leaves
  // read are found once, not at every candidate pair)
  std::unordered_map<std::string, bool> compiled;
  std::vector<signed char> can_merge(order.size(), -1);
  auto mergeable = [&](std::size_t i) {
    if (can_merge[i] >= 0) return can_merge[i] == 1;
    const Plan& p = order[i];
    bool ok = scheduler::runs_kernel(p) && !has_reduce(*p.ast);
    if (ok) {
      auto [it, fresh] = compiled.emplace(p.buf->device, false);
      if (fresh) it->second = dynamic_cast<Compiled*>(&Device::get(p.buf->device)) != nullptr;
      ok = it->second;
    }
    can_merge[i] = ok;
    return ok;
  };
  auto base_of = [](const LazyBuffer* b) {  // LazyBuffer::base without a shared_ptr's count
    while (b->is_view()) b = std::get<LazyBufferPtr>(b->op->src[0]).get();
    return b;
  };
  std::vector<std::vector<const LazyBuffer*>> leaf_bases(order.size());
  auto note_bases = [&](std::size_t i) {
    leaf_bases[i].clear();
    for (const LazyBufferPtr& l : order[i].leaves) leaf_bases[i].push_back(base_of(l.get()));
  };
  std::unordered_map<const LazyBuffer*, std::size_t> at;  // a kernel's output -> its plan
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i].ast) at[order[i].buf.get()] = i;
    note_bases(i);
  }
  std::vector<bool> gone(order.size(), false);
  auto reads = [&](std::size_t k, const LazyBuffer* y) {
    const Plan& r = order[k];
    if (std::find(leaf_bases[k].begin(), leaf_bases[k].end(), y) != leaf_bases[k].end()) return true;
    for (const LazyBufferPtr& d : r.deps)
      if (d.get() == y) return true;
    return r.from && base_of(r.from.get()) == y;
  };
  // Per input buffer, the mergeable kernels that read it (siblings: kernels of one shape that share
  // an input, an optimizer's updates of parameters of one shape, are one kernel too).
  std::unordered_map<const LazyBuffer*, std::vector<std::size_t>> readers;
  auto note_reads = [&](std::size_t i) {
    for (const LazyBuffer* b : leaf_bases[i]) {
      auto& r = readers[b];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  };
  bool any = false;
  for (std::size_t i = 0; i < order.size(); ++i) {
    Plan& p = order[i];
    if (!mergeable(i)) continue;
    // p takes q's work when nothing between them reads what q stores and p reads it whole, if at all.
    auto try_absorb = [&](std::size_t j) {
      Plan& q = order[j];
      if (j >= i || gone[j] || !mergeable(j) || q.buf->device != p.buf->device ||
          q.buf->shape() != p.buf->shape() ||
          (!is_multi_store(*q.ast) && ast_dtype(LazySrc(q.ast)) != q.buf->dtype) ||
          p.leaves.size() + q.leaves.size() + p.stores.size() + q.stores.size() + 2 > kMaxBuffers ||
          p.stores.size() + q.stores.size() + 2 > kMaxDims)  // (a multi-store's arg is a Dims)
        return false;
      TreeSize ps = size_of(LazySrc(p.ast)), qs = size_of(LazySrc(q.ast));
      if (ps.depth + qs.depth > AstBuilder::kMaxFusedDepth) return false;
      auto q_out = stores_of(q);
      auto stored_by_q = [&](const LazyBuffer* b) {
        return std::any_of(q_out.begin(), q_out.end(), [&](const auto& o) { return o.first.get() == b; });
      };
      bool whole = true;       // every read of what q stores in order, at the element written
      std::size_t copies = 1;  // of q's trees in the merged kernel: one per read, and its own store
      for_each_leaf(*p.ast, [&](const MemBuffer& m) {
        if (stored_by_q(leaf_bases[i][m.index - 1]))
          whole = whole && m.st.contiguous() && m.st.shape() == p.buf->shape(), ++copies;
      });
      // Each read takes a copy of q's tree: a chain of kernels that each read the last twice would
      // double the tree at every merge (2^n nodes to build and compile).
      if (!whole || ps.nodes + copies * qs.nodes > kMaxNodes) return false;
      for (std::size_t k = j + 1; k < i; ++k)
        for (const auto& o : q_out)
          if (!gone[k] && reads(k, o.first.get())) return false;
      absorb(p, q);
      note_bases(i);
      gone[j] = any = true;
      for (const LazyBufferPtr& b : p.stores) at[b.get()] = i;
      return true;
    };
    for (bool merged = true; merged;) {
      merged = false;
      for (std::size_t l = 0; l < p.leaves.size() && !merged; ++l)  // what p reads
        if (auto it = at.find(leaf_bases[i][l]); it != at.end()) merged = try_absorb(it->second);
      for (std::size_t l = 0; l < p.leaves.size() && !merged; ++l)  // what reads what p reads
        if (auto it = readers.find(leaf_bases[i][l]); it != readers.end())
          for (std::size_t j : it->second)
            if (j < i && (merged = try_absorb(j))) break;
    }
    note_reads(i);
  }
  if (!any) return;
  std::size_t w = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (!gone[i] && w++ != i) order[w - 1] = std::move(order[i]);  // (never onto itself)
  order.resize(w);
}

// Reductions that shrink what they read (a weight gradient: a 4 MiB activation and its gradient in,
// 256 KiB out) run as soon as their inputs are computed, as an autograd engine runs a node's
// gradients together. The walk below reaches them only through whichever target needs them (a
// gradient norm, an optimizer's update), after the whole backward: every activation they read was
// held to the end. Moved up, they are often those inputs' last readers, so the inputs are freed
// (eager) or their buffers shared (TinyJit's plan) while the backward goes on, and they read the
// gradient while it is still in cache. The order stays topological: a plan moves to just after
// the last plan it depends on, and never past another's dependency on it. (After the multi-output
// merges: a reduce moved between two elementwise kernels would keep them apart.)
void hoist_shrinking(std::vector<Plan>& order) {
  auto bytes = [](const LazyBuffer& b) { return prod(b.shape()) * b.dtype.itemsize; };
  // Sort keys: (the index of the plan it follows, the order it was placed in); 0 for a plan in place.
  std::vector<std::pair<std::size_t, std::size_t>> key(order.size());
  std::unordered_map<const LazyBuffer*, std::size_t> at;
  std::size_t placed = 0;  // plans moved so far
  for (std::size_t i = 0; i < order.size(); ++i) {
    Plan& p = order[i];
    key[i] = {i, 0};
    std::int64_t widest = 0;
    std::optional<std::size_t> last;  // the plan of a dependency with the greatest key
    for (const LazyBufferPtr& d : p.deps)
      if (auto it = at.find(d.get()); it != at.end()) {
        widest = std::max(widest, bytes(*d));
        if (!last || key[it->second] > key[*last]) last = it->second;
      }
    if (p.ast && has_reduce(*p.ast) && last && 4 * bytes(*p.buf) <= widest && key[*last].first + 1 < i) {
      key[i] = {key[*last].first, ++placed};
    }
    at[p.buf.get()] = i;
    for (const LazyBufferPtr& b : p.stores) at[b.get()] = i;
  }
  if (!placed) return;
  std::vector<std::size_t> idx(order.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return key[a] < key[b]; });
  std::vector<Plan> sorted;
  sorted.reserve(order.size());
  for (std::size_t i : idx) sorted.push_back(std::move(order[i]));
  order = std::move(sorted);
}

void run_plans(std::vector<Plan>& order, long debug, bool graphing, bool cached);

// One schedule for several unrealized bases (the first's plan made already): their kernels, those
// they need, each once, in an order that runs each after what it reads.
void realize_bases(const std::vector<LazyBufferPtr>& targets, Plan first) {
  scheduler::RealizeFlags flags = scheduler::realize_flags();
  bool graphing = flags.graph >= 1;
  long debug = flags.debug;
  // (GRAPH=1 draws a plan's dependencies, which a cached plan does not keep)
  std::optional<scheduler::GraphKey> key;
  if (flags.schedule_cache && !graphing) key = scheduler::graph_key(targets, flags);
  if (key && key->nodes.size() < 8) key.reset();  // (as quickly scheduled as looked up)
  std::optional<std::vector<Plan>> cached;
  if (key) cached = scheduler::ScheduleCache::get().find(*key);
  if (cached) {
    key.reset();  // (its buffers may be freed as the plans run)
    run_plans(*cached, debug, false, true);
    return;
  }
  // Iterative post-order walk (deep graphs must not overflow the stack). A buffer may be pushed
  // by several consumers; the first time it is popped it runs after its own dependencies, and
  // later pops find it done. Targets are pushed last first, so they run in the order given.
  std::vector<Plan> order;
  std::unordered_set<LazyBuffer*> done;
  std::vector<std::pair<LazyBufferPtr, bool>> stack;
  for (auto it = targets.rbegin(); it != targets.rend(); ++it) stack.emplace_back(*it, false);
  std::unordered_map<LazyBuffer*, Plan> plans;
  plans.emplace(targets.front().get(), std::move(first));
  std::unordered_set<const LazyBuffer*> wanted;
  if (targets.size() > 1)
    for (const LazyBufferPtr& t : targets) wanted.insert(t.get());
  while (!stack.empty()) {
    auto [buf, expanded] = stack.back();
    stack.pop_back();
    if (done.count(buf.get())) continue;
    if (expanded) {
      done.insert(buf.get());
      order.push_back(std::move(plans.at(buf.get())));
      continue;
    }
    auto it = plans.find(buf.get());
    if (it == plans.end()) it = plans.emplace(buf.get(), make_plan(buf, &wanted)).first;
    const Plan& plan = it->second;
    stack.emplace_back(buf, true);
    for (const auto& d : plan.deps)
      if (!d->realized && !done.count(d.get())) stack.emplace_back(d, false);
  }
  if (flags.multi_output) merge_stores(order);
  hoist_shrinking(order);
  plans.clear();
  if (key) {
    scheduler::ScheduleCache::get().add(std::move(*key), order);
    key.reset();
  }
  run_plans(order, debug, graphing, false);
}

// Runs a schedule's plans in order, compiling its new kernels first.
void run_plans(std::vector<Plan>& order, long debug, bool graphing, bool cached) {
  std::optional<scheduler::RealizeReport> report;
  if (debug >= 1) {
    report.emplace(debug, cached);
    report->build(order);
  } else if (!cached) {  // (a cached schedule's kernels were built when it was made)
    prebuild(order);
  }
  std::optional<scheduler::GraphDraft> draft;
  if (graphing) draft = scheduler::graph(order);
  try {
    // A plan lets go of its inputs once it has run: an intermediate buffer is freed (back to the
    // pool) after its last consumer in the schedule, not when the realize ends. (GRAPH=1 draws
    // the plans afterwards: they keep theirs.)
    for (Plan& p : order) {
      execute(p);
      if (!draft) p.leaves.clear(), p.deps.clear(), p.from.reset(), p.buf.reset();
    }
  } catch (...) {
    if (draft) scheduler::graph(std::move(*draft), order);  // what ran, and what was to run
    throw;
  }
  if (draft) scheduler::graph(std::move(*draft), order);
  if (report) {  // totals once the plans' hold on intermediate buffers is gone
    order.clear();
    report->finish();
  }
}

}  // namespace

LazyBuffer& LazyBuffer::realize() {
  std::lock_guard lock(realize_mutex());
  LazyBufferPtr target = base();
  if (target->realized) return *this;
  scheduler::RealizeFlags flags = scheduler::realize_flags();
  Plan first = flags.schedule_cache ? scheduler::EagerCache::get().plan(
                                          target, [](const LazyBufferPtr& b) { return make_plan(b); })
                                    : make_plan(target);
  if (first.deps.empty()) {  // the eager case, one kernel on realized inputs: no walk
    if (flags.debug >= 1) scheduler::RealizeReport(flags.debug).build({&first, 1});
    std::optional<scheduler::GraphDraft> draft;
    if (flags.graph >= 1) draft = scheduler::graph({&first, 1});
    execute(first);  // (a failed eager kernel is not drawn)
    if (draft) scheduler::graph(std::move(*draft), {&first, 1});
    return *this;
  }
  realize_bases({target}, std::move(first));
  return *this;
}

void LazyBuffer::realize_all(const std::vector<LazyBufferPtr>& buffers) {
  std::lock_guard lock(realize_mutex());
  std::vector<LazyBufferPtr> targets;
  for (const LazyBufferPtr& b : buffers)
    if (LazyBufferPtr t = b->base(); !t->realized) targets.push_back(std::move(t));
  if (targets.empty()) return;
  std::unordered_set<const LazyBuffer*> wanted;
  for (const LazyBufferPtr& t : targets) wanted.insert(t.get());
  realize_bases(targets, make_plan(targets.front(), targets.size() > 1 ? &wanted : nullptr));
}

}  // namespace metagrad
