// GRAPH=1: the buffers each realize computes, as one Graphviz graph rewritten after every realize.
// A kernel is a cluster of the ops its AST fused, coloured by op family and labelled with DEBUG=2's
// number and name for it, reading its input buffers and writing one; direct loads are single nodes;
// buffers realized before (inputs) are dashed. At exit, Graphviz's `dot` (when installed) lays the
// graph out as SVG next to the DOT.
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"
#include "schedule_plan.hpp"

extern char** environ;

namespace metagrad::scheduler {

namespace {

// Op families and their fill colours (the legend lists them in this order).
constexpr std::pair<OpType, const char*> kFamilies[] = {
    {OpType::Load, "#fff1a8"},    {OpType::Unary, "#b3e5fc"},  {OpType::Binary, "#c5cae9"},
    {OpType::Ternary, "#d1c4e9"}, {OpType::Reduce, "#ffab91"}, {OpType::Fused, "#f48fb1"},
    {OpType::Movement, "#c8e6c9"}};
constexpr const char* kBufferRead = "#e0e0e0";  // a kernel's read of one of its buffers
// Indexed by OpType, in its order.
constexpr const char* kFamilyNames[] = {"UnaryOps",    "BinaryOps", "TernaryOps", "ReduceOps",
                                        "MovementOps", "FusedOps",  "LoadOps"};
static_assert(std::size(kFamilyNames) == static_cast<std::size_t>(OpType::Load) + 1,
              "graph: one family name per OpType");
static_assert(std::size(kFamilies) == std::size(kFamilyNames), "graph: one colour per OpType");
constexpr std::size_t kMaxSvgNodes = 4000;  // beyond this, dot takes too long: DOT only

const char* colour(OpType t) {
  for (auto [type, c] : kFamilies)
    if (type == t) return c;
  return "white";
}

std::string legend() {
  std::string s = "<<table border=\"0\" cellspacing=\"4\"><tr>";
  for (auto [type, c] : kFamilies)
    s += detail::cat("<td bgcolor=\"", c, "\">", kFamilyNames[static_cast<int>(type)], "</td>");
  return s + detail::cat("<td bgcolor=\"", kBufferRead, "\">buffer read</td></tr></table>>");
}

std::string describe(const Dims& shape, DType dtype) {
  return detail::cat(to_string(shape), " ", dtype.name);
}

// An op's label: its name, and its argument where it says something (a reduce's output shape, a
// cast's dtype, a constant's value).
std::string label(const LazyOp& op) {
  std::string s = to_string(op.op);
  if (const auto* d = std::get_if<Dims>(&op.arg)) s += "\\n" + to_string(*d);
  if (const auto* t = std::get_if<DType>(&op.arg)) s += detail::cat("\\n", t->name);
  if (const auto* c = std::get_if<ConstArg>(&op.arg)) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", c->value);
    s += detail::cat("\\n", b);
  }
  return s;
}

// A kernel's number and name as DEBUG=2's line for it says them ("kernel 12 r_4_6 (CLANG)"), so
// the two can be matched; "not run" for one a failed realize did not reach.
std::string kernel_label(const Plan& p) {
  if (p.launch == 0) return detail::cat("kernel not run (", p.buf->device, ")");
  auto* dev = dynamic_cast<Compiled*>(&Device::get(p.buf->device));
  std::string name = dev ? dev->kernel_name(*p.ast, p.buf->dtype) : "interpret " + to_string(p.ast->op);
  return detail::cat("kernel ", std::to_string(p.launch), " ", name, " (", p.buf->device, ")");
}

// Where a kernel's label goes in a draft, filled in once the kernel ran (index: its plan's in the realize).
std::string label_token(std::size_t index) { return detail::cat("@@", std::to_string(index), "@@"); }

// The graph so far, and where it was last written.
struct GraphFile {
  std::mutex mu;
  std::string body, path;
  std::unordered_set<std::uint64_t> seen;  // buffers drawn
  std::size_t kernels = 0, nodes = 0;

  void node(const std::string& id, const std::string& lbl, const std::string& style) {
    body += detail::cat("  ", id, " [label=\"", lbl, "\", ", style, "];\n");
    ++nodes;
  }
  void edge(const std::string& from, const std::string& to) {
    body += detail::cat("  ", from, " -> ", to, ";\n");
  }
  std::string buffer(const LazyBuffer& b, const std::string& lbl, const std::string& style) {
    std::string id = detail::cat("n", std::to_string(b.id));
    if (seen.insert(b.id).second)
      node(id, detail::cat(lbl, lbl.empty() ? "" : "\\n", describe(b.shape(), b.dtype)), style);
    return id;
  }
  std::string input(const LazyBufferPtr& b) { return buffer(*b->base(), "", "shape=ellipse, style=dashed"); }

  void kernel(const Plan& p, std::size_t index);
  void load(const Plan& p);
  void write(const std::string& to);
  void lay_out() const;
};

// A kernel: a cluster of its AST's nodes (each op once, each buffer read once), edges from the
// buffers it reads, and an edge from its root to the buffer it writes.
void GraphFile::kernel(const Plan& p, std::size_t index) {
  std::string k = detail::cat("k", std::to_string(++kernels)), inside, edges;
  std::unordered_map<const void*, std::string> ids;
  std::unordered_map<std::size_t, std::string> reads;  // buffer index -> node
  std::size_t n = 0;
  auto fresh = [&](const std::string& lbl, const char* fill, const char* shape) {
    std::string id = detail::cat(k, "_", std::to_string(n++));
    inside +=
        detail::cat("    ", id, " [label=\"", lbl, "\", shape=", shape, ", fillcolor=\"", fill, "\"];\n");
    ++nodes;
    return id;
  };
  std::vector<std::pair<const LazyOp*, std::string>> stack{{p.ast.get(), ""}};
  while (!stack.empty()) {
    auto [op, consumer] = stack.back();
    stack.pop_back();
    auto [it, added] = ids.emplace(op, "");
    if (added) it->second = fresh(label(*op), colour(op->op.type), "box");
    if (!consumer.empty()) edges += detail::cat("  ", it->second, " -> ", consumer, ";\n");
    if (!added) continue;
    for (const LazySrc& s : op->src) {
      if (const auto* m = std::get_if<MemBuffer>(&s)) {
        auto [r, new_read] = reads.emplace(m->index, "");
        if (new_read) {
          r->second = fresh(
              detail::cat("buffer ", std::to_string(m->index), "\\n", describe(m->st.shape(), m->dtype)),
              kBufferRead, "cds");
          edges += detail::cat("  ", input(p.leaves.at(m->index - 1)), " -> ", r->second, ";\n");
        }
        edges += detail::cat("  ", r->second, " -> ", it->second, ";\n");
      } else {
        stack.emplace_back(std::get<std::shared_ptr<LazyOp>>(s).get(), it->second);
      }
    }
  }
  body += detail::cat("  subgraph cluster_", k, " {\n    label=\"", label_token(index),
                      "\";\n    style=rounded;\n", inside, "  }\n", edges);
  edge(ids.at(p.ast.get()), buffer(*p.buf, "", "shape=box"));
}

// A load, or a kernel that launches nothing (a CONTIGUOUS sharing its source, an empty result).
void GraphFile::load(const Plan& p) {
  const LazyBuffer& b = *p.buf;
  Op op = b.op ? b.op->op : Op(LoadOps::CONTIGUOUS);
  std::string id = buffer(b, to_string(op), detail::cat("shape=box, fillcolor=\"", colour(op.type), "\""));
  if (p.from) edge(input(p.from), id);
  if (p.ast)
    for (const auto& leaf : p.leaves) edge(input(leaf), id);
  if (b.op && b.op->op == LoadOps::CUSTOM)
    for (const GraphSrc& s : b.op->src) edge(input(std::get<LazyBufferPtr>(s)), id);
}

void GraphFile::write(const std::string& to) {
  std::ofstream(to) << "digraph metagrad {\n  node [fontname=monospace, style=filled, fillcolor=white];\n"
                    << "  labelloc=t;\n  label=" << legend() << ";\n"
                    << body << "}\n";
  path = to;
}

// `dot -Tsvg` on the DOT last written, run without a shell.
void GraphFile::lay_out() const {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return;  // nothing drawn, or removed since
  std::filesystem::path svg = path;
  svg = svg.extension() == ".dot" ? svg.replace_extension(".svg") : std::filesystem::path(path + ".svg");
  if (nodes > kMaxSvgNodes) {
    std::fprintf(stderr, "GRAPH=1: %zu nodes, too many to lay out; the DOT is %s\n", nodes, path.c_str());
    return;
  }
  std::string prog = "dot", fmt = "-Tsvg", o = "-o", out = svg.string(), in = path;
  char* argv[] = {prog.data(), fmt.data(), o.data(), out.data(), in.data(), nullptr};
  pid_t pid = 0;
  int status = 0;
  if (int err = ::posix_spawnp(&pid, "dot", nullptr, nullptr, argv, environ); err != 0) {
    std::fprintf(stderr, "GRAPH=1: no SVG (Graphviz's dot: %s); the DOT is %s\n", std::strerror(err),
                 path.c_str());
    return;
  }
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    std::fprintf(stderr, "GRAPH=1: wrote the SVG to %s\n", out.c_str());
  else
    std::fprintf(stderr, "GRAPH=1: dot failed on %s; no SVG\n", path.c_str());
}

GraphFile& graph_file() {
  static GraphFile f;
  static const bool registered = std::atexit([] {  // after f's construction: runs before its destructor
                                   std::lock_guard lock(graph_file().mu);
                                   graph_file().lay_out();
                                 }) == 0;
  (void)registered;
  return f;
}

}  // namespace

GraphDraft graph(std::span<const Plan> order) {
  GraphFile& g = graph_file();
  std::lock_guard lock(g.mu);
  GraphDraft draft;
  std::swap(g.body, draft.body);  // drawn into an empty body, kept apart until the labels are known
  for (std::size_t i = 0; i < order.size(); ++i)
    if (runs_kernel(order[i]))
      g.kernel(order[i], i);
    else
      g.load(order[i]);
  std::swap(g.body, draft.body);
  return draft;
}

void graph(GraphDraft draft, std::span<const Plan> order) {
  for (std::size_t i = 0; i < order.size(); ++i) {
    std::string token = label_token(i);
    if (std::size_t at = draft.body.find(token); at != std::string::npos)
      draft.body.replace(at, token.size(), kernel_label(order[i]));
  }
  GraphFile& g = graph_file();
  std::lock_guard lock(g.mu);
  g.body += draft.body;
  std::string path = getenv("GRAPH_PATH", "/tmp/metagrad_graph.dot");
  bool first = g.path.empty();
  g.write(path);
  if (first) std::fprintf(stderr, "GRAPH=1: writing the graph to %s (the SVG at exit)\n", path.c_str());
}

}  // namespace metagrad::scheduler
