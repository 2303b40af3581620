// ScheduleCache: an eager step's graph is the last step's with other buffers; its schedule (the
// walk, the fusion decisions, the multi-output merges, the ASTs) is looked up, not made again.
#include "schedule_cache.hpp"

#include <bit>
#include <string>
#include <variant>

#include "metagrad/device/raw_buffer.hpp"

namespace metagrad::scheduler {

namespace {

enum Tag : std::uint64_t { kRef = 0xA1, kNode, kOp };

// The cache's budget (bytes of tokens) and the largest graph it keeps, a quarter of it.
constexpr std::size_t kBudget = std::size_t{8} << 20, kMaxBytes = kBudget / 4;

std::uint64_t device_number(const std::string& device) {
  static std::unordered_map<std::string, std::uint64_t> numbers;  // (under the realize lock)
  return numbers.emplace(device, numbers.size()).first->second;
}

struct Writer {
  GraphKey& key;
  std::vector<std::variant<LazyBuffer*, const GraphOp*>> stack;

  // Tokens as LEB128 varints: most are small (sizes, strides, numbers of buffers), a key a few bytes
  // a token. (A negative stride or offset takes ten bytes: rare, and still one meaning per string.)
  void put(std::uint64_t t) {
    for (; t >= 0x80; t >>= 7) key.tokens.push_back(static_cast<char>(t | 0x80));
    key.tokens.push_back(static_cast<char>(t));
  }
  void put(std::int64_t t) { put(static_cast<std::uint64_t>(t)); }
  void put(double v) { put(std::bit_cast<std::uint64_t>(v)); }
  void dims(const Dims& d) {
    put(static_cast<std::uint64_t>(d.size()));
    for (std::int64_t x : d) put(x);
  }

  void buffer(LazyBuffer* b) {
    if (auto [it, fresh] = key.number.emplace(b, static_cast<std::uint32_t>(key.nodes.size())); !fresh) {
      put(std::uint64_t{kRef}), put(std::uint64_t{it->second});
      return;
    }
    key.nodes.push_back(b);
    const bool realized = b->realized != nullptr;
    put(std::uint64_t{kNode});
    put(static_cast<std::uint64_t>(b->dtype.priority) | device_number(b->device) << 8 |
        std::uint64_t{b->is_view()} << 40 | std::uint64_t{realized} << 41 |
        std::uint64_t{b->op != nullptr} << 42);
    put(static_cast<std::uint64_t>(b->st.views().size()));
    for (const View& v : b->st.views()) {
      dims(v.shape), dims(v.strides), put(v.offset);
      put(static_cast<std::uint64_t>(v.mask.size()));
      for (const auto& [lo, hi] : v.mask) put(lo), put(hi);
    }
    if (realized) {  // what a fusion decision reads of a realized buffer: its size, a host scalar's value
      const RawBuffer& r = *b->realized;
      put(static_cast<std::uint64_t>(r.size)), put(static_cast<std::uint64_t>(r.dtype.priority));
      if (r.size == 1 && b->device == "CPU") put(read_as_double(r)[0]);
      return;
    }
    put(static_cast<std::uint64_t>(b->live_children()));
    if (b->op) op(b->op.get());
  }

  void op(const GraphOp* o) {
    put(std::uint64_t{kOp});
    put(static_cast<std::uint64_t>(o->op.type) << 8 | o->op.value);
    put(static_cast<std::uint64_t>(o->src.size()));
    put(static_cast<std::uint64_t>(o->arg.index()));
    if (const auto* d = std::get_if<Dims>(&o->arg)) {
      dims(*d);
    } else if (const auto* p = std::get_if<Pairs>(&o->arg)) {
      put(static_cast<std::uint64_t>(p->size()));
      for (const auto& [lo, hi] : *p) put(lo), put(hi);
    } else if (const auto* c = std::get_if<ConstArg>(&o->arg)) {
      // (a RAND's seed is read when it runs: its numbers are made anew on every step)
      put(o->op == LoadOps::RAND ? 0.0 : c->value), put(static_cast<std::uint64_t>(c->dtype.priority));
      dims(c->shape);
    } else if (const auto* t = std::get_if<DType>(&o->arg)) {
      put(static_cast<std::uint64_t>(t->priority));
    }  // (a CUSTOM's fill is called from its buffer's own op when it runs)
    for (auto it = o->src.rbegin(); it != o->src.rend(); ++it) {
      if (const auto* s = std::get_if<LazyBufferPtr>(&*it))
        stack.emplace_back(s->get());
      else
        stack.emplace_back(std::get<std::shared_ptr<GraphOp>>(*it).get());
    }
  }
};

}  // namespace

GraphKey graph_key(const std::vector<LazyBufferPtr>& targets, const RealizeFlags& flags) {
  GraphKey key;
  Writer w{key, {}};
  w.put(static_cast<std::uint64_t>(targets.size())), w.put(flags.multi_output);
  for (auto it = targets.rbegin(); it != targets.rend(); ++it) w.stack.emplace_back(it->get());
  while (!w.stack.empty()) {                       // preorder, iteratively (deep graphs)
    if (key.tokens.size() > kMaxBytes) return {};  // (no loop's step: not kept, not written out)
    auto item = w.stack.back();
    w.stack.pop_back();
    if (auto* b = std::get_if<LazyBuffer*>(&item))
      w.buffer(*b);
    else
      w.op(std::get<const GraphOp*>(item));
  }
  key.hash = std::hash<std::string>{}(key.tokens);
  return key;
}

ScheduleCache& ScheduleCache::get() {
  static ScheduleCache cache;
  return cache;
}

std::optional<std::vector<Plan>> ScheduleCache::find(const GraphKey& key) {
  ++clock_;
  auto [lo, hi] = entries_.equal_range(key.hash);
  for (auto it = lo; it != hi; ++it) {
    Entry& e = it->second;
    if (e.tokens != key.tokens) continue;
    e.used = clock_;
    auto at = [&](std::uint32_t i) { return key.nodes[i]->shared_from_this(); };
    std::vector<Plan> order;
    order.reserve(e.steps.size());
    for (const Entry::Step& s : e.steps) {
      Plan& p = order.emplace_back();
      p.buf = at(s.buf), p.ast = s.ast;
      p.leaves.reserve(s.leaves.size());
      for (std::uint32_t l : s.leaves) p.leaves.push_back(at(l));
      for (std::uint32_t l : s.stores) p.stores.push_back(at(l));
      if (s.from >= 0) p.from = at(static_cast<std::uint32_t>(s.from));
      p.runner = s.runner;
    }
    return order;
  }
  return std::nullopt;
}

void ScheduleCache::add(GraphKey key, const std::vector<Plan>& order) {
  // Kept from its second sighting: a loop's graph comes again, a one-off (an optimizer's first
  // step, with its new states; a step TinyJit captures and then replays) would only hold its
  // ASTs (about a megabyte for the GPT bench's step). Sightings by hash: a collision keeps one early.
  if (seen_.insert(key.hash).second) {
    if (seen_.size() > 4096) seen_ = {key.hash};
    return;
  }
  // A training loop has a few graphs a step (an evaluation, a logged value besides); the least
  // recently used go first past 32 graphs or the budget.
  constexpr std::size_t kEntries = 32;
  Entry e{std::move(key.tokens), {}, clock_};
  e.steps.reserve(order.size());
  auto id = [&](const LazyBufferPtr& b) -> std::optional<std::uint32_t> {
    auto it = key.number.find(b.get());
    return it == key.number.end() ? std::nullopt : std::optional(it->second);
  };
  auto ids = [&](const std::vector<LazyBufferPtr>& bs, std::vector<std::uint32_t>& out) {
    for (const LazyBufferPtr& b : bs) {
      auto i = id(b);
      if (!i) return false;
      out.push_back(*i);
    }
    return true;
  };
  for (const Plan& p : order) {
    Entry::Step s{0, p.ast, {}, {}, -1, p.ast ? std::make_shared<Plan::Runner>() : nullptr};
    auto buf = id(p.buf);
    if (!buf || !ids(p.leaves, s.leaves) || !ids(p.stores, s.stores)) return;
    s.buf = *buf;
    if (p.from) {
      auto i = id(p.from);
      if (!i) return;
      s.from = *i;
    }
    e.steps.push_back(std::move(s));
  }
  bytes_ += e.tokens.size();
  entries_.emplace(key.hash, std::move(e));
  while (entries_.size() > kEntries || bytes_ > kBudget) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    bytes_ -= oldest->second.tokens.size();
    entries_.erase(oldest);
  }
}

EagerCache& EagerCache::get() {
  static EagerCache cache;
  return cache;
}

Plan EagerCache::plan(const LazyBufferPtr& target, Plan (*make)(const LazyBufferPtr&)) {
  // Eligible: an elementwise op (no fused tree, no constant argument) whose sources are realized
  // buffers, none a view. AstBuilder makes such an op's kernel its op over MemBuffers of the
  // sources' own views, each buffer once: nothing else of the graph or the buffers is read.
  const GraphOp* op = target->op.get();
  if (!op || target->realized ||
      (op->op.type != OpType::Unary && op->op.type != OpType::Binary && op->op.type != OpType::Ternary) ||
      op->src.size() > kMaxSrc || op->src.empty() ||
      !(std::holds_alternative<std::monostate>(op->arg) || std::holds_alternative<DType>(op->arg)))
    return make(target);
  std::array<LazyBuffer*, kMaxSrc> src{};
  std::size_t hash = static_cast<std::size_t>(op->op.type) * 31 + op->op.value;
  for (std::size_t i = 0; i < op->src.size(); ++i) {
    const auto* b = std::get_if<LazyBufferPtr>(&op->src[i]);
    if (!b || !(*b)->realized || (*b)->is_view()) return make(target);
    src[i] = b->get();
    hash = hash * 131 + static_cast<std::size_t>(src[i]->dtype.priority);
    for (std::int64_t d : src[i]->st.shape()) hash = hash * 131 + static_cast<std::size_t>(d);
  }
  const std::size_t n = op->src.size();
  std::array<std::uint8_t, kMaxSrc> same{};
  for (std::size_t i = 0; i < n; ++i) {
    same[i] = static_cast<std::uint8_t>(i);
    for (std::size_t j = 0; j < i; ++j)
      if (src[j] == src[i]) {
        same[i] = static_cast<std::uint8_t>(j);
        break;
      }
  }
  const auto* cast = std::get_if<DType>(&op->arg);
  std::optional<Entry>& slot = slots_[hash % kSlots];
  auto matches = [&](const Entry& e) {
    if (e.op != op->op || e.n != n || !(e.dtype == target->dtype) ||
        e.cast.has_value() != (cast != nullptr) || (cast && !(*e.cast == *cast)) || e.same != same ||
        e.device != target->device)
      return false;
    for (std::size_t i = 0; i < n; ++i)
      if (!(e.dtypes[i] == src[i]->dtype) || !(e.views[i] == src[i]->st)) return false;
    return true;
  };
  if (slot && matches(*slot)) {
    Plan p;
    p.buf = target, p.ast = slot->ast, p.runner = slot->runner;
    p.leaves.reserve(slot->leaves);
    for (std::size_t k = 0; k < slot->leaves; ++k) p.leaves.push_back(src[slot->leaf[k]]->shared_from_this());
    return p;
  }
  Plan p = make(target);
  // (kept only as the plan it checks it is: one kernel reading the sources, nothing to realize first)
  if (!p.ast || !p.deps.empty() || !p.stores.empty() || p.from || p.leaves.size() > kMaxSrc) return p;
  Entry e{op->op,
          target->dtype,
          cast ? std::optional(*cast) : std::nullopt,
          target->device,
          n,
          same,
          {},
          {},
          {},
          p.leaves.size(),
          p.ast,
          std::make_shared<Plan::Runner>()};
  for (std::size_t i = 0; i < n; ++i) e.dtypes[i] = src[i]->dtype, e.views.push_back(src[i]->st);
  for (std::size_t k = 0; k < p.leaves.size(); ++k) {
    std::size_t i = 0;
    while (i < n && src[i] != p.leaves[k].get()) ++i;
    if (i == n) return p;  // (a leaf that is no source: not an op this cache knows)
    e.leaf[k] = static_cast<std::uint8_t>(i);
  }
  p.runner = e.runner;
  slot = std::move(e);
  return p;
}

}  // namespace metagrad::scheduler
