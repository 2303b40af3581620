#include "metagrad/backends/gemm_program.hpp"

#include "metagrad/cpu/parallel.hpp"
#include "metagrad/helpers.hpp"
#include "metagrad/device/gemm.hpp"
#include "metagrad/backends/host_program.hpp"  // host_pointer

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

void GemmProgram::products(float* c, const std::vector<RawBuffer*>& bufs,
                           const std::shared_ptr<RawBuffer>* gathered) const {
  const codegen::GemmPlan& p = plan_;
  // An operand in place, or its gathered copy.
  auto operand = [&](std::size_t buf, int pack) {
    return static_cast<const float*>(host_pointer("GEMM", pack < 0 ? bufs.at(buf) : gathered[pack].get()));
  };
  c += p.c_offset;
  const float* a = operand(p.a, p.a_pack) + p.a_offset;
  const float* b = operand(p.b, p.b_pack) + p.b_offset;
  const std::int64_t count = p.batch_count();
  // Batch indices [i0, i1): each product's offsets from its index, innermost batch axis last.
  auto run = [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      std::int64_t oa = 0, ob = 0, oc = 0, rest = i;
      for (std::size_t d = p.batch.size(); d-- > 0;) {
        std::int64_t at = rest % p.batch[d].size;
        rest /= p.batch[d].size;
        oa += at * p.batch[d].a, ob += at * p.batch[d].b, oc += at * p.batch[d].c;
      }
      gemm::sgemm({p.m, p.n, p.k, a + oa, p.ars, p.acs, b + ob, p.brs, p.bcs, c + oc, p.ldc}, blocking_);
    }
  };
  cpu::parallel_products(count, p.m * p.n * p.k, run);
}

void GemmProgram::operator()(const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                             const std::vector<RawBuffer*>& bufs) {
  auto fresh = [&](std::int64_t n) { return scratch_(static_cast<std::size_t>(n), dtypes::float32); };
  std::shared_ptr<RawBuffer> gathered[2];            // (a plan gathers at most its two operands)
  for (std::size_t i = 0; i < packs_.size(); ++i) {  // counted as part of this kernel
    const codegen::GemmPlan::Pack& pk = plan_.packs[i];
    gathered[i] = fresh(prod(pk.shape));
    packs_[i].launch({gathered[i].get(), bufs.at(pk.buf)});
  }
  if (!epilogue_) return products(static_cast<float*>(host_pointer("GEMM", bufs.at(0))), bufs, gathered);
  std::shared_ptr<RawBuffer> c = fresh(epilogue_->c_size);
  products(static_cast<float*>(host_pointer("GEMM", c.get())), bufs, gathered);
  std::vector<RawBuffer*> epi{bufs.at(0)};
  for (int i : epilogue_->inputs) epi.push_back(i < 0 ? c.get() : bufs.at(static_cast<std::size_t>(i)));
  epilogue_->runner.launch(epi);  // counted as part of this kernel
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
  for (const codegen::GemmPlan::Pack& pk : p.packs) {
    auto ast = std::make_shared<LazyOp>(UnaryOps::NOOP,
                                        std::vector<LazySrc>{MemBuffer{1, dtypes::float32, pk.st}}, OpArg{});
    const ASTRunner& g = out.packs.emplace_back(build(ast, dtypes::float32));
    out.source += detail::cat("// operand buffer ", std::to_string(pk.buf), " gathered first:\n", g.prg);
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

ASTRunner gemm_runner(const codegen::Kernel& k, const codegen::GemmPlan& p, const codegen::Renderer& render,
                      const GemmCompile& compile, Compiled::BufferFactory scratch) {
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
  r.clprg = std::make_shared<GemmProgram>(p, gemm::choose_blocking(p.m, p.n, p.k), std::move(parts.epilogue),
                                          std::move(parts.packs), std::move(scratch));
  r.clprg->op_estimate = r.op_estimate;
  return r;
}

}  // namespace metagrad
