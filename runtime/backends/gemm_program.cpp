#include "metagrad/backends/gemm_program.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "metagrad/backends/host_program.hpp"  // host_pointer
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/helpers.hpp"

namespace metagrad {

namespace {

// A copy of `op` with the node `target` replaced by `c`, and every buffer leaf renumbered by `index`.
std::shared_ptr<LazyOp> replace(const LazyOp& op, const LazyOp* target, const MemBuffer& c,
                                const std::vector<std::size_t>& index) {
  auto out = std::make_shared<LazyOp>(op);
  for (LazySrc& s : out->src) {
    if (auto* b = std::get_if<MemBuffer>(&s))
      b->index = index.at(b->index);
    else if (auto& o = std::get<std::shared_ptr<LazyOp>>(s); o.get() == target)
      s = c;
    else
      s = replace(*o, target, c, index);
  }
  return out;
}

// Whether C lies in the output as the rows of [batch..., m, n], row-major: product b's row i is
// the output's elements [(b m + i) n, (b m + i + 1) n).
bool rows_in_order(const codegen::GemmPlan& p, std::int64_t c_size) {
  std::int64_t stride = p.m * p.n;
  for (std::size_t d = p.batch.size(); d-- > 0; stride *= p.batch[d].size)
    if (p.batch[d].size > 1 && p.batch[d].c != stride) return false;
  return p.c_offset == 0 && p.ldc == p.n && stride == c_size;
}

// The buffer indices the AST above `target` reads (not those only under it).
void used_above(const LazyOp& op, const LazyOp* target, std::vector<bool>& used) {
  for (const LazySrc& s : op.src) {
    if (auto* b = std::get_if<MemBuffer>(&s))
      used.at(b->index) = true;
    else if (auto& o = std::get<std::shared_ptr<LazyOp>>(s); o.get() != target)
      used_above(*o, target, used);
  }
}

}  // namespace

// A plan's b_window as tables over B's rows p and its column runs u (a run: the columns along the
// innermost column axis, x, at one position of the outer ones): B[p][u, x] = src[base + row[p] +
// col[u] + step x] where every bound q holds, row_bound[q][p] + col_bound[q][u] + slope[q] x <
// below[q] (base and below shifted per product by the batch axes' terms).
struct GemmWindow {
  std::int64_t run = 1, step = 0;  // the innermost column axis's size and index coefficient
  std::vector<std::int64_t> row, col, slope;
  std::vector<std::vector<std::int64_t>> row_bound, col_bound;
};

namespace {

// Over the axes `axes` (outermost first) of `shape`, for each position in row-major order: the sum of
// coef[d] * i_d.
std::vector<std::int64_t> linear_table(const std::vector<std::size_t>& axes, const Dims& shape,
                                       const std::vector<std::int64_t>& coef) {
  std::vector<std::int64_t> out{0};
  for (std::size_t d : axes) {
    std::vector<std::int64_t> next;
    next.reserve(out.size() * static_cast<std::size_t>(shape[d]));
    for (std::int64_t base : out)
      for (std::int64_t i = 0; i < shape[d]; ++i) next.push_back(base + i * coef[d]);
    out = std::move(next);
  }
  return out;
}

std::shared_ptr<const GemmWindow> window_tables(const codegen::GemmPlan& p) {
  if (!p.b_window || p.b_window->bounds.size() > 16) return nullptr;  // (pack_window's kMaxBounds)
  const codegen::GemmPlan::Window& w = *p.b_window;
  auto t = std::make_shared<GemmWindow>();
  std::vector<std::size_t> outer(w.cols.begin(), w.cols.end() - 1);
  const std::size_t x = w.cols.back();
  t->run = w.shape[x], t->step = w.index[x];
  t->row = linear_table(w.rows, w.shape, w.index), t->col = linear_table(outer, w.shape, w.index);
  for (const auto& b : w.bounds) {
    t->row_bound.push_back(linear_table(w.rows, w.shape, b));
    t->col_bound.push_back(linear_table(outer, w.shape, b));
    t->slope.push_back(b[x]);
  }
  return t;
}

// One product's gather of B through its window (GemmGatherB's pack), of at most kMaxBounds bounds.
constexpr std::size_t kMaxBounds = 16;
struct WindowPack {
  const GemmWindow* t;
  const float* src;
  std::int64_t base;
  std::vector<std::int64_t> below;
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a / b - (a % b != 0 && a < 0);
}

void pack_window(const void* ctx, float* dst, std::int64_t p0, std::int64_t kc, std::int64_t j0,
                 std::int64_t count, std::int64_t width) {
  const WindowPack& w = *static_cast<const WindowPack*>(ctx);
  const GemmWindow& t = *w.t;
  const std::size_t nb = t.slope.size();  // (at most kMaxBounds)
  // The columns [j0, j0 + count) as runs (or runs' parts), each with its bounds' column terms and its
  // parts in strips of `width` (where out[i .. i + n) go, less row p's p * width), once a call.
  struct Run {
    std::int64_t col, len;
    std::size_t first;  // its chunks [first, next run's first)
  };
  struct Chunk {
    std::int64_t i, n, out;
  };
  thread_local std::vector<Run> runs;
  thread_local std::vector<Chunk> chunks;
  thread_local std::vector<std::int64_t> col_terms;
  runs.clear(), chunks.clear(), col_terms.clear();
  for (std::int64_t j = j0, end = j0 + count; j < end;) {
    const std::int64_t u = j / t.run, x0 = j % t.run, len = std::min(t.run - x0, end - j);
    runs.push_back({t.col[static_cast<std::size_t>(u)] + t.step * x0, len, chunks.size()});
    for (std::size_t q = 0; q < nb; ++q)
      col_terms.push_back(t.col_bound[q][static_cast<std::size_t>(u)] + t.slope[q] * x0);
    for (std::int64_t i = 0; i < len;) {
      const std::int64_t c = j - j0 + i, lane = c % width, n = std::min(len - i, width - lane);
      chunks.push_back({i, n, (c / width) * kc * width + lane - i});
      i += n;
    }
    j += len;
  }
  runs.push_back({0, 0, chunks.size()});
  std::int64_t room0[kMaxBounds];
  for (std::int64_t p = 0; p < kc; ++p) {
    const auto row = static_cast<std::size_t>(p0 + p);
    const float* src = w.src + w.base + t.row[row];
    for (std::size_t q = 0; q < nb; ++q) room0[q] = w.below[q] - t.row_bound[q][row];
    for (std::size_t r = 0; r + 1 < runs.size(); ++r) {
      // the run's valid positions [lo, hi): x0 + i is valid where slope i < room, for every bound
      std::int64_t lo = 0, hi = runs[r].len;
      for (std::size_t q = 0; q < nb; ++q) {
        const std::int64_t room = room0[q] - col_terms[r * nb + q], g = t.slope[q];
        if (g == 1)
          hi = std::min(hi, room);
        else if (g == -1)
          lo = std::max(lo, 1 - room);
        else if (g == 0)
          hi = room <= 0 ? 0 : hi;
        else if (g > 0)
          hi = std::min(hi, floor_div(room - 1, g) + 1);
        else
          lo = std::max(lo, floor_div(-room, -g) + 1);
      }
      const float* in = src + runs[r].col;
      for (std::size_t ch = runs[r].first; ch < runs[r + 1].first; ++ch) {
        const std::int64_t i = chunks[ch].i, e = i + chunks[ch].n;
        float* out = dst + p * width + chunks[ch].out;  // out[i .. e)
        const std::int64_t a = std::clamp(lo, i, e), b = std::clamp(hi, a, e);
        for (std::int64_t x = i; x < a; ++x) out[x] = 0.0f;
        if (t.step == 1)
          std::copy(in + a, in + b, out + a);
        else
          for (std::int64_t x = a; x < b; ++x) out[x] = in[x * t.step];
        for (std::int64_t x = b; x < e; ++x) out[x] = 0.0f;
      }
    }
    if (const std::int64_t tail = count % width)  // the last strip's lanes past count
      std::fill(dst + (count / width) * kc * width + p * width + tail,
                dst + (count / width) * kc * width + (p + 1) * width, 0.0f);
  }
}

}  // namespace

// The epilogue's compiled function, called on a range of its outermost loop (`unit` elements of C
// an index) as the products finish C's rows (GemmEpilogue::unit).
struct EpilogueCall {
  void* fn;
  void* const* ptrs;
  std::size_t count;
  std::int64_t unit;
};

namespace {

struct EpilogueRows {  // one product's: its rows' elements from `first`
  const EpilogueCall* call;
  std::int64_t first, n;
};
void epilogue_rows(const void* ctx, std::int64_t i0, std::int64_t i1) {
  const auto& r = *static_cast<const EpilogueRows*>(ctx);
  call_host_range(r.call->fn, r.call->ptrs, r.call->count, (r.first + i0 * r.n) / r.call->unit,
                  (r.first + i1 * r.n) / r.call->unit);
}

}  // namespace

GemmProgram::GemmProgram(codegen::GemmPlan plan, gemm::GemmBlocking blocking,
                         std::optional<GemmEpilogue> epilogue, std::vector<ASTRunner> packs,
                         Compiled::BufferFactory scratch)
    : plan_(std::move(plan)),
      blocking_(blocking),
      epilogue_(std::move(epilogue)),
      packs_(std::move(packs)),
      scratch_(std::move(scratch)),
      window_(window_tables(plan_)) {}

void GemmProgram::products(float* c, const std::vector<RawBuffer*>& bufs,
                           const std::shared_ptr<RawBuffer>* gathered, const EpilogueCall* epi) const {
  const codegen::GemmPlan& p = plan_;
  // An operand in place, or its gathered copy.
  auto operand = [&](std::size_t buf, int pack) {
    return static_cast<const float*>(host_pointer("GEMM", pack < 0 ? bufs.at(buf) : gathered[pack].get()));
  };
  c += p.c_offset;
  const float* a = operand(p.a, p.a_pack) + p.a_offset;
  const float* b = window_ ? nullptr : operand(p.b, p.b_pack) + p.b_offset;
  // (with a window: B's own buffer, read through it)
  const float* b_src = window_ ? static_cast<const float*>(host_pointer("GEMM", bufs.at(p.b))) : nullptr;
  const std::int64_t count = p.batch_count();
  // The epilogue on each block of C's rows as the GEMM finishes it where a row is whole indices of
  // its range, else after each product where that is.
  const std::int64_t size = p.m * p.n;
  const bool by_rows = epi && p.n % epi->unit == 0, after = epi && !by_rows;
  // Batch indices [i0, i1): each product's offsets from its index, innermost batch axis last.
  auto run = [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      std::int64_t oa = 0, ob = 0, oc = 0, rest = i;
      for (std::size_t d = p.batch.size(); d-- > 0;) {
        std::int64_t at = rest % p.batch[d].size;
        rest /= p.batch[d].size;
        oa += at * p.batch[d].a, ob += at * p.batch[d].b, oc += at * p.batch[d].c;
      }
      const EpilogueRows rows{epi, i * size, p.n};
      const cpu::GemmRowsDone done{&epilogue_rows, &rows};
      const cpu::GemmRowsDone* d = by_rows ? &done : nullptr;
      if (!window_) {
        gemm::sgemm({p.m, p.n, p.k, a + oa, p.ars, p.acs, b + ob, p.brs, p.bcs, c + oc, p.ldc, nullptr, d},
                    blocking_);
        if (after) epilogue_rows(&rows, 0, p.m);
        continue;
      }
      // B gathered in the packing: the batch axes' terms shift its base and bounds
      const codegen::GemmPlan::Window& win = *p.b_window;
      WindowPack wp{window_.get(), b_src, win.offset, win.below};
      for (std::int64_t rest = i, d = static_cast<std::int64_t>(p.batch.size()); d-- > 0;) {
        const codegen::GemmPlan::Loop& l = p.batch[static_cast<std::size_t>(d)];
        const std::int64_t at = rest % l.size;
        rest /= l.size;
        wp.base += at * win.index[l.axis];
        for (std::size_t q = 0; q < wp.below.size(); ++q) wp.below[q] -= at * win.bounds[q][l.axis];
      }
      const cpu::GemmGatherB<float> gather{&pack_window, &wp};
      gemm::sgemm({p.m, p.n, p.k, a + oa, p.ars, p.acs, nullptr, 0, 0, c + oc, p.ldc, &gather, d}, blocking_);
      if (after) epilogue_rows(&rows, 0, p.m);
    }
  };
  cpu::parallel_products(count, p.m * p.n * p.k, run);
}

void GemmProgram::operator()(const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                             const std::vector<RawBuffer*>& bufs) {
  auto fresh = [&](std::int64_t n) { return scratch_(static_cast<std::size_t>(n), dtypes::float32); };
  std::shared_ptr<RawBuffer> gathered[2];            // (a plan gathers at most its two operands)
  for (std::size_t i = 0; i < packs_.size(); ++i) {  // counted as part of this kernel
    if (window_ && static_cast<int>(i) == plan_.b_pack) continue;  // (gathered in the packing)
    const codegen::GemmPlan::Pack& pk = plan_.packs[i];
    gathered[i] = fresh(prod(pk.shape));
    packs_[i].launch({gathered[i].get(), bufs.at(pk.buf)});
  }
  auto* out = static_cast<float*>(host_pointer("GEMM", bufs.at(0)));
  if (!epilogue_) return products(out, bufs, gathered, nullptr);
  const GemmEpilogue& e = *epilogue_;
  // C in the output itself (the epilogue reads each element of C where it then writes its own),
  // unless another buffer shares the output's memory (an assignment reading what it overwrites)
  auto* end = reinterpret_cast<char*>(out) + bufs[0]->nbytes();
  const bool in_place = e.in_place && std::none_of(bufs.begin() + 1, bufs.end(), [&](RawBuffer* b) {
                          auto* q = static_cast<char*>(host_pointer("GEMM", b));
                          return q < end && reinterpret_cast<char*>(out) < q + b->nbytes();
                        });
  std::shared_ptr<RawBuffer> scratch = in_place ? nullptr : fresh(e.c_size);
  RawBuffer* c = in_place ? bufs[0] : scratch.get();
  std::vector<RawBuffer*> epi{bufs[0]};
  for (int i : e.inputs) epi.push_back(i < 0 ? c : bufs.at(static_cast<std::size_t>(i)));
  auto* cp = static_cast<float*>(host_pointer("GEMM", c));
  void* fn = e.unit > 0 ? e.runner.clprg->host_function() : nullptr;
  if (!fn || (plan_.n % e.unit != 0 && plan_.m * plan_.n % e.unit != 0)) {
    products(cp, bufs, gathered, nullptr);
    return e.runner.launch(epi);  // (one pass over all of C) counted as part of this kernel
  }
  const std::vector<void*> ptrs = host_pointers("GEMM", epi);
  const EpilogueCall call{fn, ptrs.data(), ptrs.size(), e.unit};
  products(cp, bufs, gathered, &call);
}

GemmParts gemm_parts(const codegen::Kernel& k, const codegen::GemmPlan& p, const RunnerFn& lower,
                     const GemmCompile& compile) {
  GemmParts out;
  auto build = [&](const std::shared_ptr<LazyOp>& ast, DType dtype) {
    ASTRunner r = lower(ast, dtype);
    r.clprg = compile(r.name, r.prg);
    r.clprg->op_estimate = r.op_estimate;
    return r;
  };
  if (p.epilogue) {
    // The AST with the reduce replaced by a buffer holding C (contiguous, the output's shape): the
    // buffers it still reads are renumbered 1.. in order, C last.
    std::vector<bool> used(k.bufs.size() + 1, false);
    used_above(*k.ast, k.reduceop, used);
    std::vector<std::size_t> index(k.bufs.size() + 1, 0);
    GemmEpilogue& epi = out.epilogue.emplace();
    for (std::size_t i = 1; i < used.size(); ++i)
      if (used[i]) index[i] = epi.inputs.size() + 1, epi.inputs.push_back(static_cast<int>(i));
    epi.inputs.push_back(-1);
    MemBuffer c{epi.inputs.size(), dtypes::float32, ShapeTracker(k.output_shape)};
    epi.runner = build(replace(*k.ast, k.reduceop, c, index), k.out_dtype);
    epi.c_size = prod(k.output_shape);
    out.source += "// then the epilogue over C:\n" + epi.runner.prg;
  }
  for (std::size_t i = 0; i < p.packs.size(); ++i) {
    const codegen::GemmPlan::Pack& pk = p.packs[i];
    auto ast = std::make_shared<LazyOp>(UnaryOps::NOOP,
                                        std::vector<LazySrc>{MemBuffer{1, dtypes::float32, pk.st}}, OpArg{});
    const ASTRunner& g = out.packs.emplace_back(build(ast, dtypes::float32));
    out.source +=
        p.b_window && static_cast<int>(i) == p.b_pack
            ? detail::cat("// operand buffer ", std::to_string(pk.buf),
                          " gathered in the packing, through its window (the copy below is for AOT "
                          "libraries):\n",
                          g.prg)
            : detail::cat("// operand buffer ", std::to_string(pk.buf), " gathered first:\n", g.prg);
  }
  return out;
}

std::vector<const std::string*> parts_of(const std::optional<GemmEpilogue>& epilogue,
                                         const std::vector<ASTRunner>& packs) {
  std::vector<const std::string*> out;
  if (epilogue) out.push_back(&epilogue->runner.prg);
  for (const ASTRunner& p : packs) out.push_back(&p.prg);
  return out;
}
std::vector<const std::string*> GemmProgram::parts() const { return parts_of(epilogue_, packs_); }

std::string gemm_name(const codegen::GemmPlan& p) {
  auto str = [](std::int64_t v) { return std::to_string(v); };
  return detail::cat("gemm_", str(p.batch_count()), "x", str(p.m), "x", str(p.n), "x", str(p.k));
}

namespace {

// Whether a gathered B is packed through its window rather than copied whole first: env
// METAGRAD_GEMM_WINDOW=1 always, 0 never, else where the copy would pass 32 MiB. The copy, a
// vectorized kernel, and then B read in place cost less (ResNet-18's 3x3 convs at batch 1, 64 to 512
// channels: 86-92 GFLOP/s against 67-78 through the window on one Zen 4 core), but its scratch
// grows with the batch (a 56 x 56 x 64 conv's windows: 7 MiB an image).
bool use_window(const codegen::GemmPlan& p) {
  if (p.b_pack < 0) return false;
  const char* e = std::getenv("METAGRAD_GEMM_WINDOW");
  if (e && *e) return std::string_view(e) != "0";
  return prod(p.packs[static_cast<std::size_t>(p.b_pack)].shape) * 4 > (std::int64_t{32} << 20);
}

}  // namespace

ASTRunner gemm_runner(const codegen::Kernel& k, const codegen::GemmPlan& plan,
                      const codegen::Renderer& render, const GemmCompile& compile,
                      Compiled::BufferFactory scratch) {
  codegen::GemmPlan p = plan;
  if (use_window(p)) p.b_window = codegen::gemm_window(k, p);
  ASTRunner r;
  const std::int64_t batch = p.batch_count();
  auto str = [](std::int64_t v) { return std::to_string(v); };
  r.name = gemm_name(p);
  r.prg =
      detail::cat("// ", r.name, ": C[", str(p.m), "][", str(p.n), "] = A[", str(p.m), "][", str(p.k), "] B[",
                  str(p.k), "][", str(p.n), "]", batch > 1 ? " for " + str(batch) + " batch indices" : "",
                  ", by the runtime GEMM (", gemm::to_string(gemm::isa()), "): no source to compile\n",
                  "// A = buffer ", str(static_cast<std::int64_t>(p.a)), " strides (", str(p.ars), ", ",
                  str(p.acs), "), B = buffer ", str(static_cast<std::int64_t>(p.b)), " strides (", str(p.brs),
                  ", ", str(p.bcs), "), C row stride ", str(p.ldc), "\n");
  r.op_estimate = k.op_estimate;  // (the device sets mem_estimate from the buffers it runs on)
  GemmParts parts = gemm_parts(
      k, p,
      [&](const std::shared_ptr<LazyOp>& ast, DType dt) { return codegen::run_pipeline(ast, dt, render); },
      compile);
  r.prg += parts.source;
  if (parts.epilogue) {  // (see GemmEpilogue)
    GemmEpilogue& e = *parts.epilogue;
    e.in_place = k.out_dtype == dtypes::float32;
    const std::int64_t g = e.runner.global_size.empty() ? 0 : e.runner.global_size[0];
    if (g > 0 && e.c_size % g == 0 && rows_in_order(p, e.c_size)) e.unit = e.c_size / g;
  }
  r.clprg = std::make_shared<GemmProgram>(p, gemm::choose_blocking(p.m, p.n, p.k), std::move(parts.epilogue),
                                          std::move(parts.packs), std::move(scratch));
  r.clprg->op_estimate = r.op_estimate;
  return r;
}

}  // namespace metagrad
