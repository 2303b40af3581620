#include "metagrad/codegen/linearizer.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace metagrad::codegen {

using symbolic::Node;

namespace {

struct Linearizer {
  const Kernel& k;
  LinearizedKernel out;
  // Common subexpressions: identical loads (across upcast positions), constants and ALU ops are
  // emitted once. Keys name the op and its operands' uop numbers, so equal trees meet bottom-up.
  std::map<std::string, int> seen;
  std::vector<Node> loop_vars;  // per axis: the loop variable (looped axes) or 0

  int push(UOp u) {
    out.uops.push_back(std::move(u));
    return static_cast<int>(out.uops.size()) - 1;
  }
  int cse(const std::string& key, UOp u) {
    if (auto it = seen.find(key); it != seen.end()) return it->second;
    return seen[key] = push(std::move(u));
  }
  int constant(double v, DType dt) {
    char bits[40];
    std::snprintf(bits, sizeof bits, "%a", v);
    return cse(detail::cat("C|", dt.name, "|", bits), UOp{UOps::CONST, dt, {}, UnaryOps::NOOP, -1, 0, 1, v});
  }

  std::vector<Node> idxs_at(const Dims& upcast_pos) const {
    std::vector<Node> idxs = loop_vars;
    std::size_t first_up = k.shape_len() - k.upcasted;
    for (std::size_t j = 0; j < upcast_pos.size(); ++j) idxs[first_up + j] = upcast_pos[j];
    return idxs;
  }

  int load(std::size_t buf, const Dims& pos) {
    auto [idx, valid] = k.sts[buf].expr_idxs(idxs_at(pos));
    DType dt = buf == 0 ? k.out_dtype : k.bufs[buf - 1].dtype;
    if (valid.is_num() && valid.b() == 0) return constant(0, dt);
    return cse(detail::cat("L|", std::to_string(buf), "|", idx.render(), "|", valid.render()),
               UOp{UOps::LOAD, dt, {}, UnaryOps::NOOP, static_cast<int>(buf), idx, valid});
  }

  // The AST at one upcast position; `reduced` is the reduce's value there (post-reduce part).
  int ast(const LazySrc& s, const Dims& pos, int reduced) {
    if (auto* b = std::get_if<MemBuffer>(&s)) return load(b->index, pos);
    const LazyOp& op = *std::get<std::shared_ptr<LazyOp>>(s);
    if (&op == k.reduceop) return reduced;
    if (storing && kept.count(&op)) return load(0, pos);  // (a row kernel's value kept in the output)
    if (k.rows && (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC)) return row_reduce(op);
    if (k.rows && op.op == MovementOps::EXPAND) return ast(op.src.at(0), pos, reduced);
    if (op.op == LoadOps::CONST) {
      const ConstArg& c = std::get<ConstArg>(op.arg);
      return constant(c.value, c.dtype);
    }
    std::vector<int> vin;
    for (const LazySrc& x : op.src) vin.push_back(ast(x, pos, reduced));
    if (op.op == UnaryOps::NOOP) return vin[0];
    DType dt = op.op == UnaryOps::CAST ? std::get<DType>(op.arg) : ast_dtype(s);
    std::string key = detail::cat("A|", to_string(op.op), "|", dt.name);
    for (int v : vin) key += "|" + std::to_string(v);
    return cse(key, UOp{UOps::ALU, dt, vin, op.op});
  }

  // Every combination of positions along the upcast axes, row-major.
  std::vector<Dims> upcast_positions(bool reduce_axes_too) const {
    std::vector<Dims> out{Dims{}};
    std::size_t first_up = k.shape_len() - k.upcasted;
    for (std::size_t d = first_up; d < k.shape_len(); ++d) {
      bool varies = reduce_axes_too || !k.is_reduce_axis(d);
      std::vector<Dims> next;
      for (const Dims& p : out)
        for (std::int64_t i = 0; i < (varies ? k.full_shape()[d] : 1); ++i) {
          Dims q = p;
          q.push_back(i);
          next.push_back(q);
        }
      out = std::move(next);
    }
    return out;
  }

  // Positions along the reduce upcast axes only, merged into an output position.
  std::vector<Dims> reduce_positions(const Dims& out_pos) const {
    std::vector<Dims> all = upcast_positions(true), mine;
    std::size_t first_up = k.shape_len() - k.upcasted;
    for (const Dims& p : all) {
      bool same = true;
      for (std::size_t j = 0; j < p.size(); ++j)
        if (!k.is_reduce_axis(first_up + j) && p[j] != out_pos[j]) same = false;
      if (same) mine.push_back(p);
    }
    return mine;
  }

  std::vector<int> open;  // the loops opened and not yet closed

  void open_loop(const std::string& name, std::int64_t extent, bool threaded) {
    open.push_back(
        push(UOp{UOps::LOOP, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, name, extent, threaded}));
  }
  void open_axis(std::size_t d, const std::string& name, bool threaded) {
    std::int64_t n = k.full_shape()[d];
    loop_vars[d] = symbolic::Variable(name, 0, std::max<std::int64_t>(n - 1, 0));  // 0 trips when empty
    open_loop(name, n, threaded);
  }
  void close_loops(std::size_t keep) {
    while (open.size() > keep) open.pop_back(), push(UOp{UOps::ENDLOOP});
  }
  // OpenCL groups: the last looped axis is the work-item's index in the group (the threaded loop).
  std::size_t reduce_end() const { return k.shape_len() - k.upcasted - (k.local_size ? 1 : 0); }

  // The global loops. The outermost is the threaded one (a kernel without global axes gets one of
  // 1); just inside it, a blocked reduce's block loop and OpenCL's group-local index.
  void open_global_loops() {
    auto after_threaded = [&] {
      if (k.blocked) open_axis(k.first_reduce, "ridx0", false);  // the reduce's block loop
      if (!k.local_size) return;
      loop_vars[reduce_end()] = symbolic::Variable("lidx0", 0, k.local_size - 1);
      open.push_back(
          push(UOp{UOps::LOCAL, dtypes::int32, {}, UnaryOps::NOOP, -1, 0, 1, 0, "lidx0", k.local_size}));
      out.local_size = k.local_size;
    };
    if (k.first_reduce == 0) open_loop("gidx0", 1, true), out.global_size = 1, after_threaded();
    for (std::size_t d = 0; d < k.first_reduce; ++d) {
      open_axis(d, "gidx" + std::to_string(d), d == 0);
      if (d == 0) out.global_size = k.full_shape()[d], after_threaded();
    }
  }

  // One accumulator per reduce-upcast position of an output position. Blocked: the sum so far is
  // in the output, except in the first block (a load that is invalid there reads 0, the sum's
  // identity).
  std::vector<int> define_accumulators(const Dims& out_pos, std::size_t count, DType acc_dt, double init) {
    std::vector<int> from;
    if (k.blocked) {
      auto [idx, valid] = k.sts[0].expr_idxs(idxs_at(out_pos));
      from.push_back(push(UOp{UOps::LOAD,
                              acc_dt,
                              {},
                              UnaryOps::NOOP,
                              0,
                              idx,
                              Node::ands({valid, loop_vars[k.first_reduce] >= Node(1)})}));
    }
    std::vector<int> accs;
    for (std::size_t i = 0; i < count; ++i)
      accs.push_back(
          push(UOp{UOps::DEFINE_ACC, acc_dt, i ? std::vector<int>{} : from, UnaryOps::NOOP, -1, 0, 1, init}));
    return accs;
  }

  // Partial accumulators combine pairwise: a balanced tree, the same order everywhere.
  int combine(std::vector<int> level, DType acc_dt, Op update) {
    while (level.size() > 1) {
      std::vector<int> next;
      for (std::size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(push(UOp{UOps::ALU, acc_dt, {level[i], level[i + 1]}, update}));
      if (level.size() % 2) next.push_back(level.back());
      level = std::move(next);
    }
    if (k.local_size)  // every work-item gets the group's total; the first one stores it
      return push(UOp{UOps::GROUP, acc_dt, {level[0]}, update, -1, 0, 1, 0, {}, k.local_size});
    return level[0];
  }

  // A long sum in one float32 accumulator stops growing (past 2^24 ones) and drifts well before:
  // adding the same value 4096 times is off by 5e-5. Past kChainLimit trips, a sum's loops are cut
  // into levels of at most kLevel trips, each level summing into an accumulator of its own that is
  // added to the level above when it ends (blocked accumulation, close to pairwise: about one
  // rounding a level, log16(n) levels). Maximum needs none of it.
  // A sum the compiler may reassociate with no upcast of its own (the host devices') is vectorized
  // with a dozen or more partial sums, each taking an eighth or less of the innermost trips: that
  // level may be kVectorLevel long for the same rounding, and it is long enough to vectorize.
  static constexpr std::int64_t kLevel = 16, kVectorLevel = 256, kChainLimit = 4096;
  std::int64_t leaf_level() const { return k.reassociate && k.upcasted == 0 ? kVectorLevel : kLevel; }
  std::vector<std::vector<std::vector<int>>> levels;  // per level, per output position, accumulators
  int loop_count = 0;

  void new_level(DType acc_dt) {
    std::vector<std::vector<int>> accs;
    for (const std::vector<int>& o : levels.back()) {
      accs.emplace_back();
      for (std::size_t i = 0; i < o.size(); ++i)
        accs.back().push_back(push(UOp{UOps::DEFINE_ACC, acc_dt, {}, UnaryOps::NOOP, -1, 0, 1, 0}));
    }
    levels.push_back(std::move(accs));
  }
  void end_level(DType acc_dt) {
    std::vector<std::vector<int>> inner = std::move(levels.back());
    levels.pop_back();
    for (std::size_t o = 0; o < inner.size(); ++o)
      for (std::size_t i = 0; i < inner[o].size(); ++i)
        push(UOp{UOps::ACC, acc_dt, {levels.back()[o][i], inner[o][i]}, BinaryOps::ADD});
  }
  // A loop of n trips over axis d, its variable added to `base` with weight `step`; then `inner`.
  template <class F>
  void level_loop(std::size_t d, std::int64_t n, const Node& base, std::int64_t step, F&& inner) {
    std::size_t keep = open.size();
    std::string name =
        detail::cat("ridx", std::to_string(d - k.first_reduce), "_", std::to_string(loop_count++));
    Node var = symbolic::Variable(name, 0, n - 1);
    open_loop(name, n, false);
    inner(base + var * step);
    close_loops(keep);
  }
  // Axis d from `base` for exactly S = leaf_level() kLevel^j elements: j + 1 nested loops, a level
  // each but the last.
  template <class F>
  void perfect(std::size_t d, std::int64_t S, const Node& base, DType acc_dt, F& leaf) {
    if (S == leaf_level())
      return level_loop(d, S, base, 1, [&](const Node& at) { loop_vars[d] = at, leaf(); });
    level_loop(d, kLevel, base, S / kLevel, [&](const Node& at) {
      new_level(acc_dt), perfect(d, S / kLevel, at, acc_dt, leaf), end_level(acc_dt);
    });
  }
  // Axis d over [base, base + n): q < kLevel blocks of S = kLevel^j elements (a level each, and the
  // q of them a level), then the rest the same way (a level): any n, no accumulator taking more than
  // kLevel additions, one copy of the body per base-kLevel digit.
  template <class F>
  void nest(std::size_t d, std::int64_t n, const Node& base, DType acc_dt, F& leaf) {
    if (n <= leaf_level())
      return level_loop(d, n, base, 1, [&](const Node& at) { loop_vars[d] = at, leaf(); });
    std::int64_t S = leaf_level();
    while (S <= n / kLevel) S *= kLevel;
    std::int64_t q = n / S, t = n % S;
    new_level(acc_dt);
    if (q == 1)
      perfect(d, S, base, acc_dt, leaf);
    else
      level_loop(d, q, base, S, [&](const Node& at) {
        new_level(acc_dt), perfect(d, S, at, acc_dt, leaf), end_level(acc_dt);
      });
    end_level(acc_dt);
    if (t) new_level(acc_dt), nest(d, t, base + Node(q * S), acc_dt, leaf), end_level(acc_dt);
  }
  // The looped reduce axes [d, reduce_end) in levels; each axis after the first is a level too.
  template <class F>
  void levelled_axes(std::size_t d, DType acc_dt, F& leaf) {
    auto next = [&] {
      if (d + 1 == reduce_end()) return leaf();
      new_level(acc_dt), levelled_axes(d + 1, acc_dt, leaf), end_level(acc_dt);
    };
    nest(d, k.full_shape()[d], Node(0), acc_dt, next);
  }

  // The reduce loops: per output position, the reduce's value (-1 without a reduce).
  std::vector<int> reduce(const std::vector<Dims>& out_positions) {
    std::vector<int> reduced(out_positions.size(), -1);
    if (!k.reduceop) return reduced;
    const LazyOp& r = *k.reduceop;
    bool is_max = r.op == ReduceOps::MAX;
    DType acc_dt = ast_dtype(r.src.at(0));
    double init = is_max ? dtypes::min_value(acc_dt) : 0;
    std::vector<std::vector<int>> accs;
    std::vector<std::vector<Dims>> positions;  // per output position, its reduce-upcast positions
    for (const Dims& o : out_positions) {
      positions.push_back(reduce_positions(o));
      accs.push_back(define_accumulators(o, positions.back().size(), acc_dt, init));
    }
    std::size_t outer = open.size();
    std::size_t first_looped = k.first_reduce + (k.blocked ? 1 : 0);
    Op update = is_max ? Op(BinaryOps::MAX) : Op(BinaryOps::ADD);
    std::int64_t trips = 1;
    for (std::size_t d = first_looped; d < reduce_end(); ++d) trips *= k.full_shape()[d];
    levels = {accs};
    auto body = [&] {
      const std::vector<std::vector<int>>& into = levels.back();
      for (std::size_t o = 0; o < out_positions.size(); ++o) {
        const std::vector<Dims>& rp = positions[o];
        for (std::size_t i = 0; i < rp.size(); ++i) {
          int v;
          if (r.op == FusedOps::MULACC) {
            int a = ast(r.src[0], rp[i], -1), b = ast(r.src[1], rp[i], -1);
            v = push(UOp{UOps::ALU, acc_dt, {a, b}, BinaryOps::MUL});
          } else {
            v = ast(r.src[0], rp[i], -1);
          }
          push(UOp{UOps::ACC, acc_dt, {into[o][i], v}, update});
        }
      }
    };
    if (is_max || trips <= kChainLimit) {
      for (std::size_t d = first_looped; d < reduce_end(); ++d)
        open_axis(d, "ridx" + std::to_string(d - k.first_reduce), false);
      body();
    } else {
      auto leaf = [&] { seen.clear(), body(); };  // no value outlives the loop it is made in
      levelled_axes(first_looped, acc_dt, leaf);
    }
    close_loops(outer);
    for (std::size_t d = first_looped; d < reduce_end(); ++d) loop_vars[d] = 0;
    seen.clear();  // values computed inside the reduce loop are out of scope after it
    for (std::size_t o = 0; o < out_positions.size(); ++o) reduced[o] = combine(accs[o], acc_dt, update);
    return reduced;
  }

  // ---- row kernels (Kernel::rows) ----
  std::map<std::string, int> row_values;  // a reduce's value at the current global position, by key
  // A sum's operand that the full-shaped output computes again outside any reduce, a transcendental
  // in it (softmax's exp(x - max)): the sum's loop stores it in the output, whose loop reads it
  // back (`kept`: its nodes there) and overwrites it, rather than taking the exp twice.
  std::string kept_sum;  // that sum's key
  std::set<const LazyOp*> kept;
  bool storing = false;  // the output's loop is being built

  static bool transcendental(const LazyOp& op) {
    if (op.op == UnaryOps::EXP2 || op.op == UnaryOps::LOG2 || op.op == UnaryOps::SIN) return true;
    for (const LazySrc& x : op.src)
      if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&x); o && transcendental(**o)) return true;
    return false;
  }
  // The output's nodes outside reduces whose key is `key`.
  void outside_reduces(const LazySrc& s, const std::string& key, std::set<const LazyOp*>& out) const {
    auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s);
    if (!o || (*o)->op.type == OpType::Reduce || (*o)->op == FusedOps::MULACC) return;
    if (ast_key(**o, ast_dtype(s)) == key) out.insert(o->get());
    for (const LazySrc& x : (*o)->src) outside_reduces(x, key, out);
  }
  // The first float sum (depth first) whose operand, of the output's dtype with a transcendental in
  // it, the output also computes.
  void find_kept(const LazyOp& op) {
    if (!kept.empty()) return;
    if (op.op == ReduceOps::SUM)
      if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&op.src.at(0));
          o && ast_dtype(op.src[0]) == k.out_dtype && transcendental(**o)) {
        outside_reduces(k.ast, ast_key(**o, k.out_dtype), kept);
        if (!kept.empty()) return void(kept_sum = ast_key(op, k.out_dtype));
      }
    for (const LazySrc& x : op.src)
      if (auto* o = std::get_if<std::shared_ptr<LazyOp>>(&x)) find_kept(**o);
  }

  // The reduces under s, each computed (before any loop that reads it opens).
  void row_reduces_in(const LazySrc& s) {
    auto* o = std::get_if<std::shared_ptr<LazyOp>>(&s);
    if (!o) return;
    const LazyOp& op = **o;
    if (op.op.type == OpType::Reduce || op.op == FusedOps::MULACC) {
      row_reduce(op);
      return;
    }
    for (const LazySrc& x : op.src) row_reduces_in(x);
  }

  // A reduce of a row kernel, once per global position (equal reduces, by their AST, once): a loop
  // nest over the reduce axes into one accumulator. A sum's additions may be reassociated (the code
  // generator's loop vectorizer keeps partial sums in vector lanes) or kept as
  // Kernel::row_sum_lanes partial sums; a max, which may not be reordered, takes
  // Kernel::row_max_lanes neighbours of the last axis a trip into as many partial maxima. Partial
  // values combine pairwise.
  int row_reduce(const LazyOp& r) {
    DType acc_dt = ast_dtype(r.src.at(0));
    std::string key = ast_key(r, acc_dt);
    if (auto it = row_values.find(key); it != row_values.end()) return it->second;
    for (const LazySrc& x : r.src) row_reduces_in(x);
    bool is_max = r.op == ReduceOps::MAX;
    Op update = is_max ? Op(BinaryOps::MAX) : Op(BinaryOps::ADD);
    std::size_t last = k.shape_len() - 1;
    std::int64_t n = k.full_shape()[last], lanes = is_max ? k.row_max_lanes : k.row_sum_lanes;
    if (n % lanes != 0 || n < 2 * lanes) lanes = 1;
    std::vector<int> accs;
    for (std::int64_t i = 0; i < lanes; ++i)
      accs.push_back(push(UOp{
          UOps::DEFINE_ACC, acc_dt, {}, UnaryOps::NOOP, -1, 0, 1, is_max ? dtypes::min_value(acc_dt) : 0.0}));
    std::size_t outer = open.size();
    std::string tag = "_" + std::to_string(loop_count++);
    for (std::size_t d = k.first_reduce; d < last; ++d)
      open_axis(d, "ridx" + std::to_string(d - k.first_reduce) + tag, false);
    std::string name = "ridx" + std::to_string(last - k.first_reduce) + tag;
    Node var = symbolic::Variable(name, 0, n / lanes - 1);
    open_loop(name, n / lanes, false);
    for (std::int64_t i = 0; i < lanes; ++i) {
      loop_vars[last] = var * lanes + Node(i);
      int v;
      if (r.op == FusedOps::MULACC)
        v = push(UOp{UOps::ALU, acc_dt, {ast(r.src[0], {}, -1), ast(r.src[1], {}, -1)}, BinaryOps::MUL});
      else
        v = ast(r.src[0], {}, -1);
      if (key == kept_sum) {  // (the output's loop reads it back)
        auto [idx, valid] = k.sts[0].expr_idxs(idxs_at({}));
        push(UOp{UOps::STORE, k.out_dtype, {v}, UnaryOps::NOOP, 0, idx, valid});
      }
      push(UOp{UOps::ACC, acc_dt, {accs[static_cast<std::size_t>(i)], v}, update});
    }
    close_loops(outer);
    for (std::size_t d = k.first_reduce; d < k.shape_len(); ++d) loop_vars[d] = 0;
    seen.clear();  // values made inside the loop are out of scope after it
    return row_values[key] = combine(accs, acc_dt, update);
  }

  void run_rows() {
    open_global_loops();
    // A full-shaped output: one more loop nest over the reduce axes; a reduced one: one store.
    bool full = prod(k.output_shape) == prod(k.full_shape());
    if (full && dtypes::is_float(k.out_dtype)) find_kept(*k.ast);
    row_reduces_in(k.ast);
    std::size_t outer = open.size();
    storing = true;
    if (full)
      for (std::size_t d = k.first_reduce; d < k.shape_len(); ++d)
        open_axis(d, "sidx" + std::to_string(d - k.first_reduce), false);
    int v = ast(k.ast, {}, -1);
    auto [idx, valid] = k.sts[0].expr_idxs(idxs_at({}));
    push(UOp{UOps::STORE, k.out_dtype, {v}, UnaryOps::NOOP, 0, idx, valid});
    close_loops(outer);
    close_loops(0);
  }

  void run() {
    out.name = k.name();
    out.buf_dtypes.push_back(k.out_dtype);
    for (const MemBuffer& b : k.bufs) out.buf_dtypes.push_back(b.dtype);
    // A multi-store (ast.hpp): each source into its buffer, at the output's index (every output
    // of one is contiguous in the output's shape).
    std::vector<std::pair<LazySrc, std::size_t>> stores{{k.ast, 0}};
    if (is_multi_store(*k.ast)) {
      const Dims& to = std::get<Dims>(k.ast->arg);
      stores.clear();
      for (std::size_t i = 0; i < k.ast->src.size(); ++i) {
        auto j = static_cast<std::size_t>(to[i]);
        stores.emplace_back(k.ast->src[i], j);
        if (j == 0) continue;
        if (out.buf_dtypes.size() <= j) out.buf_dtypes.resize(j + 1, k.out_dtype);
        out.buf_dtypes[j] = ast_dtype(k.ast->src[i]);
      }
    }
    out.op_estimate = k.op_estimate;
    out.reassociate = k.reassociate;
    out.rows = k.rows;
    loop_vars.assign(k.shape_len(), Node(0));
    if (k.rows) return run_rows();
    open_global_loops();
    std::vector<Dims> out_positions = upcast_positions(false);
    std::vector<int> reduced = reduce(out_positions);
    for (std::size_t o = 0; o < out_positions.size(); ++o) {
      auto [idx, valid] = k.sts[0].expr_idxs(idxs_at(out_positions[o]));
      if (k.local_size) valid = Node::ands({valid, loop_vars[reduce_end()] < Node(1)});
      for (const auto& [src, j] : stores) {
        int v = ast(src, out_positions[o], reduced[o]);
        push(UOp{UOps::STORE, out.buf_dtypes[j], {v}, UnaryOps::NOOP, static_cast<int>(j), idx, valid});
      }
    }
    close_loops(0);
  }
};

}  // namespace

LinearizedKernel linearize(const Kernel& k) {
  Linearizer l{k, {}, {}, {}, {}, {}, 0, {}, {}, {}, false};
  l.run();
  return std::move(l.out);
}

bool written(const LinearizedKernel& k, std::size_t i) {
  if (i == 0) return true;
  for (const UOp& u : k.uops)
    if (u.uop == UOps::STORE && u.buf == static_cast<int>(i)) return true;
  return false;
}

std::string to_string(const UOp& u) {
  static const char* names[] = {"LOOP", "ENDLOOP", "DEFINE_ACC", "LOAD",  "CONST",
                                "ALU",  "ACC",     "STORE",      "LOCAL", "GROUP"};
  std::string out = detail::cat(names[static_cast<int>(u.uop)], " ", u.dtype.name);
  for (int v : u.vin) out += " %" + std::to_string(v);
  if (u.uop == UOps::ALU || u.uop == UOps::ACC || u.uop == UOps::GROUP) out += " " + to_string(u.alu);
  if (u.uop == UOps::LOAD || u.uop == UOps::STORE)
    out += detail::cat(" data", std::to_string(u.buf), "[", u.idx.render(), "] if ", u.valid.render());
  if (u.uop == UOps::CONST || u.uop == UOps::DEFINE_ACC) out += " " + std::to_string(u.value);
  if (u.uop == UOps::LOOP || u.uop == UOps::LOCAL || u.uop == UOps::GROUP)
    out += detail::cat(" ", u.name, " < ", std::to_string(u.extent), u.threaded ? " threaded" : "");
  return out;
}

}  // namespace metagrad::codegen
