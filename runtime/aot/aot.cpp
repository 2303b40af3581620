// aot::Generator: a function's kernels are captured while it runs once on CLANG, then emitted as C
// with its buffers given homes (parameters, scratch arenas, constants). See include/metagrad/aot.hpp.
#include "metagrad/aot.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "../lazy/replayable_fill.hpp"
#include "aot_gemm.hpp"
#include "indexed_load.hpp"
#include "metagrad/backends/gemm_program.hpp"
#include "metagrad/backends/ops_clang.hpp"
#include "metagrad/codegen/cstyle.hpp"
#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"
#include "metagrad/lazy.hpp"

namespace metagrad::aot {

namespace {

// The type of a buffer of `d` in the header: fixed-width, the same in C and C++.
const char* header_type(DType d) {
  if (d == dtypes::bool_ || d == dtypes::uint8) return "uint8_t";
  if (d == dtypes::int8) return "int8_t";
  if (d == dtypes::int16) return "int16_t";
  if (d == dtypes::uint16) return "uint16_t";
  if (d == dtypes::int32) return "int32_t";
  if (d == dtypes::uint32) return "uint32_t";
  if (d == dtypes::int64) return "int64_t";
  if (d == dtypes::uint64) return "uint64_t";
  if (d == dtypes::float16 || d == dtypes::bfloat16) return "uint16_t";
  return d == dtypes::float32 ? "float" : "double";
}

// "unsigned char" -> "unsigned_char": arena names by C type.
std::string identifier(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// One element of a constant as a C initializer that reproduces its bits.
std::string c_literal(const std::byte* p, DType d) {
  auto get = [&]<class T>(T) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  if (dtypes::is_float(d) && d.itemsize > 2) {
    double v = d == dtypes::float32 ? static_cast<double>(get(float{})) : get(double{});
    const char* sfx = d == dtypes::float32 ? "f" : "";
    if (std::isnan(v)) return detail::cat("__builtin_nan", sfx, "(\"\")");
    if (std::isinf(v)) return detail::cat(v < 0 ? "-" : "", "__builtin_inf", sfx, "()");
    char b[40];
    std::snprintf(b, sizeof b, "%a", v);  // hexadecimal: exact
    return b;
  }
  if (d.itemsize == 2) return std::to_string(get(std::uint16_t{}));  // float16, bfloat16: their bits
  if (d == dtypes::int64) return detail::cat(std::to_string(get(std::int64_t{})), "LL");
  if (d == dtypes::uint64) return detail::cat(std::to_string(get(std::uint64_t{})), "ULL");
  if (d == dtypes::uint32) return detail::cat(std::to_string(get(std::uint32_t{})), "U");
  if (d == dtypes::int32) return std::to_string(get(std::int32_t{}));
  if (d == dtypes::int8) return std::to_string(get(std::int8_t{}));
  return std::to_string(get(std::uint8_t{}));  // uint8, bool
}

// First-fit placement of scratch buffers of one C type, each live from its kernel to its last use.
struct Arena {
  std::map<std::size_t, std::size_t> live;  // offset -> elements
  std::size_t size = 0;
  std::size_t alloc(std::size_t n) {
    std::size_t at = 0;
    for (auto [off, len] : live) {
      if (off >= at + n) break;
      at = std::max(at, (off + len + 15) / 16 * 16);  // 16 elements: every row starts aligned
    }
    live.emplace(at, n);
    size = std::max(size, at + n);
    return at;
  }
};

struct Param {
  std::string name;
  DType dtype;
  Dims shape;
  bool by_value = false, writable = false;
};

struct Function {
  std::string name;
  std::vector<Param> params;
  std::string body;
};

std::string prototype(const Function& f) {
  std::string s = detail::cat("int ", f.name, "(");
  for (std::size_t i = 0; i < f.params.size(); ++i) {
    const Param& p = f.params[i];
    s += detail::cat(i ? ", " : "", p.writable || p.by_value ? "" : "const ", header_type(p.dtype),
                     p.by_value ? " " : "* ", p.name);
  }
  return s + (f.params.empty() ? "void)" : ")");
}

}  // namespace

struct Generator::Impl {
  std::string name;    // of the files (-n may change it before they are written)
  std::string prefix;  // of the internal (static) symbols
  std::string prelude;
  std::vector<std::string> kernels;       // rendered static functions
  std::map<std::string, int> kernel_ids;  // by source
  struct Constant {
    std::string name;
    DType dtype;
    std::size_t size;  // elements
    std::vector<std::byte> bytes;
  };
  std::vector<Constant> constants;  // defined when the C is written: as text, or in the blob
  std::unordered_map<const RawBuffer*, std::string> constant_names;
  std::map<std::string, std::size_t> arenas;  // C type -> elements (the most any function needs)
  std::vector<Function> fns;
  // Buffers earlier functions computed: reading one later would freeze it into a constant.
  std::vector<std::shared_ptr<RawBuffer>> computed;
  std::optional<GemmExtent> gemm;  // the largest contraction, when a function has one
  bool gathers = false;            // a function has an indexed load (PREFIX_gather)
  // Kernels whose range is split over the library's threads: PREFIX_tK, calling PREFIX_kK on an
  // array of its buffers, by kernel.
  std::map<int, std::string> splits;
  // Constants of blob_min bytes or more (main's --constants-file): NAME.bin, linked in by the
  // assembler's .incbin.
  std::size_t blob_min = SIZE_MAX;

  int kernel(const ASTRunner& r);
  std::string constant(const std::shared_ptr<RawBuffer>& b);
};

int Generator::Impl::kernel(const ASTRunner& r) {
  if (auto it = kernel_ids.find(r.prg); it != kernel_ids.end()) return it->second;
  // A CLANG kernel is the renderer's prelude, then its function: [gcc attributes] void NAME(...) {...}.
  const std::string& pre = codegen::c_prelude(ClangCodegen::lang);
  std::string head = detail::cat("void ", r.name, "(");
  std::size_t at = r.prg.find(head, pre.size());
  if (r.prg.compare(0, pre.size(), pre) != 0 || at == std::string::npos)
    throw std::runtime_error(detail::cat("aot: kernel ", r.name, " is not the C renderer's:\n", r.prg));
  prelude = pre;
  int id = static_cast<int>(kernels.size());
  kernels.push_back(detail::cat("/* ", r.name, " */\n", r.prg.substr(pre.size(), at - pre.size()),
                                "static void ", prefix, "_k", std::to_string(id), "(",
                                r.prg.substr(at + head.size())));
  kernel_ids.emplace(r.prg, id);
  return id;
}

std::string Generator::Impl::constant(const std::shared_ptr<RawBuffer>& b) {
  if (auto it = constant_names.find(b.get()); it != constant_names.end()) return it->second;
  std::string cname = detail::cat(prefix, "_c", std::to_string(constants.size()));
  std::vector<std::byte> host(b->nbytes());
  b->copyout(host.data());
  constants.push_back({cname, b->dtype, b->size, std::move(host)});
  computed.push_back(b);  // kept alive, so that its address names only it
  return constant_names.emplace(b.get(), cname).first->second;
}

Generator::Generator(std::string name) : impl_(std::make_unique<Impl>()) {
  if (!is_identifier(name))
    throw std::invalid_argument(detail::cat("aot::Generator: `", name, "` is not a C identifier"));
  impl_->prefix = impl_->name = std::move(name);
  Device::get("CLANG");  // a missing C compiler says so here
  Device::DEFAULT = "CLANG";
}

Generator::~Generator() = default;

namespace {

// One function's capture in progress: the C function, the C expression of each buffer's pointer
// (its home), the lines of the body, and what the run recorded.
struct Capture {
  Generator::Impl& g;
  const std::vector<Arg>&inputs, &outputs, &updates;
  Function f;
  std::unordered_map<const RawBuffer*, std::string> home;
  std::vector<std::string> lines;
  std::vector<LazyBufferPtr> in_lbs;
  std::vector<const Arg*> update_of;                // per input: the update that names it
  std::vector<std::shared_ptr<RawBuffer>> results;  // outputs, then updates
  std::vector<CacheEntry> rec;                      // the kernels that ran, in order

  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument(detail::cat("aot::Generator::function ", f.name, ": ", why));
  }
  void check_arguments();
  void match_updates();
  void bind_inputs();
  void record();
  void emit_kernels();
  void emit_call(const ASTRunner& r, const std::vector<std::shared_ptr<RawBuffer>>& bufs);
  void emit_gather(const IndexedLoad& l, const std::vector<std::shared_ptr<RawBuffer>>& bufs);
  void emit_gemm(const GemmProgram& gp, const std::vector<std::shared_ptr<RawBuffer>>& bufs,
                 std::map<std::string, Arena>& arenas);
  void emit_copies();
};

// Names are C identifiers, distinct, new; every tensor is on CLANG.
void Capture::check_arguments() {
  if (!is_identifier(f.name)) fail("the name is not a C identifier");
  for (const Function& other : g.fns)
    if (other.name == f.name) fail("defined twice");
  std::set<std::string> names;
  for (const auto* list : {&inputs, &outputs})
    for (const Arg& a : *list) {
      if (!is_identifier(a.name)) fail(detail::cat("argument `", a.name, "` is not a C identifier"));
      if (!names.insert(a.name).second) fail(detail::cat("two arguments are named ", a.name));
    }
  for (const auto* list : {&inputs, &outputs, &updates})
    for (const Arg& a : *list)
      if (a.tensor.device() != "CLANG")
        fail(detail::cat(a.name, " is on ", a.tensor.device(), "; generators compute on CLANG"));
}

// Each update names one input, of its shape and dtype, at most once.
void Capture::match_updates() {
  update_of.assign(inputs.size(), nullptr);
  for (const Arg& u : updates) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Arg& a) { return a.name == u.name; });
    if (it == inputs.end()) fail(detail::cat("the update of ", u.name, " names no input"));
    if (u.tensor.shape() != it->tensor.shape() || u.tensor.dtype() != it->tensor.dtype())
      fail(detail::cat("the update of ", u.name, " is ", to_string(u.tensor.shape()), " ",
                       u.tensor.dtype().name, ", the input ", to_string(it->tensor.shape()), " ",
                       it->tensor.dtype().name));
    auto& slot = update_of[static_cast<std::size_t>(it - inputs.begin())];
    if (slot) fail(detail::cat(u.name, " is updated twice"));
    slot = &u;
  }
}

// Inputs are realized buffers of their own, each a parameter and the home of its buffer.
void Capture::bind_inputs() {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Arg& a = inputs[i];
    LazyBufferPtr lb = a.tensor.lazydata;
    lb->realize();
    const auto& raw = lb->base()->realized;
    if (!lb->st.contiguous() || static_cast<std::int64_t>(raw->size) != lb->st.size())
      fail(detail::cat("input ", a.name,
                       " is not a buffer of its own: make inputs with Tensor::empty, or realize them "
                       "(t.contiguous().realize()) before building the graph on them"));
    bool by_value = lb->shape().empty() && !update_of[i];
    std::string ctype = codegen::c_storage_type(raw->dtype);
    if (!home.emplace(raw.get(), by_value ? detail::cat("(const ", ctype, "*)&", a.name)
                                          : detail::cat("(", ctype, "*)", a.name))
             .second)
      fail(detail::cat("input ", a.name, " shares its memory with another input"));
    f.params.push_back({a.name, raw->dtype, lb->shape(), by_value, update_of[i] != nullptr});
    in_lbs.push_back(lb);
  }
}

// The indexed load a recorded entry runs, if it is one (a replayable fill: indexed_load.hpp).
const IndexedLoad* indexed_load_of(const CacheEntry& e) {
  const auto* c = dynamic_cast<const CustomProgram*>(e.prg.clprg.get());
  return c ? c->fill().fill.target<IndexedLoad>() : nullptr;
}

// Runs the outputs and updates once, recording the kernels and the indexed loads (under a
// CaptureLog, the scheduler records replayable fills among the kernels). Other fills are left out:
// what they computed is a constant, as before.
void Capture::record() {
  struct Restore {
    std::optional<std::vector<CacheEntry>> saved =
        std::exchange(GlobalCounters::cache, std::vector<CacheEntry>{});
    CaptureLog log, *was = std::exchange(CaptureLog::active, &log);
    ~Restore() {
      GlobalCounters::cache = std::move(saved);
      CaptureLog::active = was;
    }
  } restore;
  for (const auto* list : {&outputs, &updates})
    for (const Arg& a : *list) {
      const LazyBufferPtr& lb = a.tensor.lazydata;
      LazyBufferPtr c = lb->contiguous();
      c->realize();
      if (c->base()->realized->size !=
          static_cast<std::size_t>(lb->st.size())) {  // a prefix of a bigger buffer
        c = LazyBuffer::loadop(LoadOps::CONTIGUOUS, lb->shape(), lb->dtype, lb->device, {}, {lb});
        c->realize();
      }
      results.push_back(c->base()->realized);
    }
  // A host op that is neither a kernel nor an indexed load (a fused attention, a bf16 product) cannot
  // become C: left out, it is a constant, which is right only where it reads no input.
  std::unordered_set<const RawBuffer*> varying;
  for (const auto& [raw, name] : home) varying.insert(raw);
  for (auto& e : *GlobalCounters::cache) {
    const bool custom = dynamic_cast<const CustomProgram*>(e.prg.clprg.get()) && !indexed_load_of(e);
    if (custom) {
      for (std::size_t j = 1; j < e.bufs.size(); ++j)
        if (varying.count(e.bufs[j].get()))
          fail(detail::cat("the host op ", e.prg.name,
                           " reads what the inputs compute, and only kernels and indexed loads become C "
                           "(a fused attention: METAGRAD_FUSED_ATTENTION=0 while generating; a bf16 or "
                           "quantised product: float32 weights)"));
      continue;
    }
    for (std::size_t j = 0; j < e.bufs.size(); ++j)
      if (j >= 64 || (e.prg.writes >> j & 1)) varying.insert(e.bufs[j].get());
    rec.push_back(std::move(e));
  }
}

// Homes: the first output a kernel computes writes straight into the caller's array; every other
// buffer a kernel writes lives in the scratch arena of its C type from its kernel to its last use.
// Buffers that no kernel of this function wrote and no parameter holds become constants.
void Capture::emit_kernels() {
  std::unordered_map<const RawBuffer*, std::size_t> last_use;
  std::set<const RawBuffer*> written;
  // (a multi-store kernel writes several of its buffers: ASTRunner::writes)
  auto writes = [&](std::size_t k, std::size_t j) { return j < 64 && (rec[k].prg.writes >> j & 1); };
  for (std::size_t k = 0; k < rec.size(); ++k) {
    for (std::size_t j = 0; j < rec[k].bufs.size(); ++j)
      if (writes(k, j)) written.insert(rec[k].bufs[j].get());
    for (const auto& b : rec[k].bufs) last_use[b.get()] = k;
  }
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const RawBuffer* b = results[o].get();
    f.params.push_back({outputs[o].name, b->dtype, outputs[o].tensor.shape(), false, true});
    if (written.count(b) && !home.count(b))
      home[b] = detail::cat("(", codegen::c_storage_type(b->dtype), "*)", outputs[o].name);
  }
  for (const auto& b : results) last_use[b.get()] = rec.size();  // copied out at the end
  std::map<std::string, Arena> arenas;
  std::unordered_map<const RawBuffer*, std::pair<std::string, std::size_t>> where;
  for (std::size_t k = 0; k < rec.size(); ++k) {
    const auto& bufs = rec[k].bufs;
    for (std::size_t j = 0; j < bufs.size(); ++j)
      if (writes(k, j) && !home.count(bufs[j].get())) {
        std::string ctype = codegen::c_storage_type(bufs[j]->dtype);
        std::size_t off = arenas[ctype].alloc(std::max<std::size_t>(bufs[j]->size, 1));
        where[bufs[j].get()] = {ctype, off};
        home[bufs[j].get()] =
            detail::cat("(", g.prefix, "_", identifier(ctype), " + ", std::to_string(off), ")");
      }
    for (const auto& b : bufs)
      if (!home.count(b.get())) {
        for (const auto& c : g.computed)
          if (c == b && !g.constant_names.count(b.get()))
            fail(
                "it reads a tensor an earlier function computed: build each function's graph from its "
                "inputs");
        home[b.get()] = g.constant(b);
      }
    if (auto* gp = dynamic_cast<const GemmProgram*>(rec[k].prg.clprg.get()))
      emit_gemm(*gp, bufs, arenas);
    else if (const IndexedLoad* l = indexed_load_of(rec[k]))
      emit_gather(*l, bufs);
    else
      emit_call(rec[k].prg, bufs);
    for (const auto& b : bufs)
      if (last_use[b.get()] == k && where.count(b.get())) {
        auto [ctype, off] = where[b.get()];
        arenas[ctype].live.erase(off);
        where.erase(b.get());
      }
  }
  for (auto& [ctype, a] : arenas) g.arenas[ctype] = std::max(g.arenas[ctype], a.size);
}

// A rendered kernel's call: its buffers' homes, then the range of its one loop.
void Capture::emit_call(const ASTRunner& r, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  const bool array = bufs.size() > kMaxHostArgs;  // such a kernel takes its buffers as one array
  // As the CLANG device's run_host: a kernel of 2^18 ops or more is split over the threads that
  // NAME_set_threads asked for (PREFIX_run_range), its range in slices, through PREFIX_tK.
  const bool split = r.op_estimate >= (1 << 18) && r.global_size[0] > 1;
  std::string args;
  for (std::size_t i = 0; i < bufs.size(); ++i)
    args += detail::cat(i ? ", " : "", array || split ? "(void*)" : "", home.at(bufs[i].get()));
  const std::string id = std::to_string(g.kernel(r)), name = detail::cat(g.prefix, "_k", id),
                    n = std::to_string(r.global_size[0]);
  if (split) {
    std::string each;  // (void* converts to the kernel's pointer types)
    for (std::size_t i = 0; i < bufs.size(); ++i) each += detail::cat("a[", std::to_string(i), "], ");
    g.splits.emplace(std::stoi(id), detail::cat("static void ", g.prefix, "_t", id,
                                                "(void* const* a, int64_t s, int64_t e) { ", name, "(",
                                                array ? "a, " : each, "s, e); }\n"));
    lines.push_back(detail::cat("{ void* const args[] = {", args, "}; ", g.prefix, "_run_range(", g.prefix,
                                "_t", id, ", args, ", n, "); }"));
  } else if (array) {
    lines.push_back(detail::cat("{ void* const args[] = {", args, "}; ", name, "(args, 0, ", n, "); }"));
  } else {
    lines.push_back(detail::cat(name, "(", args, ", 0, ", n, ");"));
  }
}

// An indexed load: its rows copied by PREFIX_gather, which checks every index first and returns 1
// for one out of range, which the function returns at once.
void Capture::emit_gather(const IndexedLoad& l, const std::vector<std::shared_ptr<RawBuffer>>& bufs) {
  g.gathers = true;
  auto num = [](std::int64_t v) { return detail::cat(std::to_string(v), "LL"); };
  lines.push_back(detail::cat("if (", g.prefix, "_gather(", home.at(bufs.at(0).get()), ", ",
                              home.at(bufs.at(1).get()), ", ", home.at(bufs.at(2).get()), ", ", num(l.outer),
                              ", ", num(l.size), ", ", num(l.n), ", ", num(l.inner * bufs[0]->dtype.itemsize),
                              ")) return 1;"));
}

// A contraction: the library's GEMM once per batch index (C loops over the batch axes), into the
// output or, when ops follow the reduce, into scratch that the epilogue kernel then reads.
void Capture::emit_gemm(const GemmProgram& gp, const std::vector<std::shared_ptr<RawBuffer>>& bufs,
                        std::map<std::string, Arena>& arenas) {
  const codegen::GemmPlan& p = gp.plan();
  const GemmExtent was = g.gemm.value_or(GemmExtent{});
  g.gemm = GemmExtent{std::max(was.m, p.m), std::max(was.n, p.n), std::max(was.k, p.k)};
  auto num = [](std::int64_t v) { return detail::cat(std::to_string(v), "LL"); };
  std::string c = home.at(bufs[0].get()), scratch;
  std::size_t c_off = 0;
  if (gp.epilogue()) {
    c_off = arenas["float"].alloc(static_cast<std::size_t>(gp.epilogue()->c_size));
    c = scratch = detail::cat("(", g.prefix, "_float + ", std::to_string(c_off), ")");
  }
  // Operands no strided view reads are gathered into scratch first, as GemmProgram does.
  std::vector<std::string> packed;
  std::vector<std::size_t> packed_off;
  for (std::size_t i = 0; i < gp.packs().size(); ++i) {
    const ASTRunner& r = gp.packs()[i];
    packed_off.push_back(arenas["float"].alloc(static_cast<std::size_t>(prod(p.packs[i].shape))));
    packed.push_back(detail::cat("(", g.prefix, "_float + ", std::to_string(packed_off.back()), ")"));
    lines.push_back(detail::cat(g.prefix, "_k", std::to_string(g.kernel(r)), "(", packed.back(), ", ",
                                home.at(bufs.at(p.packs[i].buf).get()), ", 0, ",
                                std::to_string(r.global_size[0]), ");"));
  }
  auto source = [&](std::size_t buf, int pack) {
    return pack < 0 ? home.at(bufs.at(buf).get()) : packed[static_cast<std::size_t>(pack)];
  };
  std::string a = detail::cat("(const float*)", source(p.a, p.a_pack), " + ", num(p.a_offset)),
              b = detail::cat("(const float*)", source(p.b, p.b_pack), " + ", num(p.b_offset));
  c = detail::cat("(float*)", c, " + ", num(p.c_offset));
  std::string loops, indent = "  ";
  for (std::size_t d = 0; d < p.batch.size(); ++d) {
    std::string i = "i" + std::to_string(d);
    loops += detail::cat("for (int64_t ", i, " = 0; ", i, " < ", num(p.batch[d].size), "; ++", i, ") ");
    a += detail::cat(" + ", i, " * ", num(p.batch[d].a));
    b += detail::cat(" + ", i, " * ", num(p.batch[d].b));
    c += detail::cat(" + ", i, " * ", num(p.batch[d].c));
  }
  lines.push_back(detail::cat(loops, g.prefix, "_sgemm(", num(p.m), ", ", num(p.n), ", ", num(p.k), ", ", a,
                              ", ", num(p.ars), ", ", num(p.acs), ", ", b, ", ", num(p.brs), ", ", num(p.bcs),
                              ", ", c, ", ", num(p.ldc), ");"));
  for (std::size_t off : packed_off) arenas["float"].live.erase(off);
  if (!gp.epilogue()) return;
  const GemmEpilogue& e = *gp.epilogue();
  std::string call =
      detail::cat(g.prefix, "_k", std::to_string(g.kernel(e.runner)), "(", home.at(bufs[0].get()));
  for (int i : e.inputs)
    call += ", " + (i < 0 ? scratch : home.at(bufs.at(static_cast<std::size_t>(i)).get()));
  lines.push_back(detail::cat(call, ", 0, ", std::to_string(e.runner.global_size[0]), ");"));
  arenas["float"].live.erase(c_off);
}

// Outputs a kernel did not write into, then updates, are copied at the end (updates last: an
// output may read an input's old value).
void Capture::emit_copies() {
  auto copy = [&](const std::string& dst, const std::shared_ptr<RawBuffer>& b) {
    if (!home.count(b.get())) home[b.get()] = g.constant(b);
    if (dst != home[b.get()])
      lines.push_back(detail::cat("__builtin_memcpy(", dst, ", ", home[b.get()], ", ",
                                  std::to_string(b->nbytes()), ");"));
  };
  for (std::size_t o = 0; o < outputs.size(); ++o)
    copy(detail::cat("(", codegen::c_storage_type(results[o]->dtype), "*)", outputs[o].name), results[o]);
  for (std::size_t u = 0; u < updates.size(); ++u) {
    auto it =
        std::find_if(inputs.begin(), inputs.end(), [&](const Arg& a) { return a.name == updates[u].name; });
    const auto& raw = in_lbs[static_cast<std::size_t>(it - inputs.begin())]->base()->realized;
    for (std::size_t i = 0; i < inputs.size(); ++i)  // copies in order would read an overwritten input
      if (update_of[i] && in_lbs[i]->base()->realized == results[outputs.size() + u] &&
          raw != results[outputs.size() + u])
        fail(detail::cat("the update of ", updates[u].name, " is the input ", inputs[i].name,
                         ", which is updated too: updates read the values before the call, and a copy in "
                         "order would not"));
    copy(home[raw.get()], results[outputs.size() + u]);
  }
}

}  // namespace

void Generator::function(const std::string& fn, const std::vector<Arg>& inputs,
                         const std::vector<Arg>& outputs, const std::vector<Arg>& updates) {
  Capture c{*impl_, inputs, outputs, updates, Function{fn, {}, {}}, {}, {}, {}, {}, {}, {}};
  c.check_arguments();
  c.match_updates();
  c.bind_inputs();
  c.record();
  c.emit_kernels();
  c.emit_copies();
  for (const auto& e : c.rec)
    for (std::size_t j = 0; j < e.bufs.size(); ++j)
      if (j < 64 && (e.prg.writes >> j & 1)) impl_->computed.push_back(e.bufs[j]);
  for (const auto& l : c.lines) c.f.body += "  " + l + "\n";
  c.f.body += "  return 0;\n";
  impl_->fns.push_back(std::move(c.f));
}

std::string Generator::header() const {
  const Impl& g = *impl_;
  std::string guard = detail::cat("METAGRAD_AOT_", g.name, "_H");
  std::transform(guard.begin(), guard.end(), guard.begin(), [](unsigned char c) { return std::toupper(c); });
  std::string s = detail::cat(
      "/* ", g.name, ".h: generated by metagrad::aot::Generator; do not edit.\n",
      "   Arrays are row-major. Calls share static scratch memory: one thread at a time.\n",
      "   A function returns 0, or 1 where an index it reads from its inputs (a gather's) is out\n",
      "   of range: it stops there, its outputs unspecified. */\n", "#ifndef ", guard, "\n#define ", guard,
      "\n#include <stdint.h>\n\n", "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  s += detail::cat(
      "/* The threads a call may use: default 1, so that a call starts none; with more, products and\n",
      "   kernels large enough to gain are split over them, started on first use and kept (asleep\n",
      "   between calls) until the library is unloaded. */\n", "void ", g.name,
      "_set_threads(int threads);\n\n");
  for (const Function& f : g.fns) {
    s += "/*";
    for (const Param& p : f.params)
      s += detail::cat("\n   ", p.name, ": ", p.dtype.name, to_string(p.shape),
                       p.by_value   ? " (by value)"
                       : p.writable ? " (written)"
                                    : "");
    s += " */\n" + prototype(f) + ";\n";
    for (const Param& p : f.params) {  // each array's shape, for the caller's declarations
      std::string m = detail::cat("#define ", f.name, "_", p.name), dims;
      for (std::int64_t d : p.shape) dims += detail::cat(dims.empty() ? "" : ", ", std::to_string(d));
      s += detail::cat(m, "_RANK ", std::to_string(p.shape.size()), "\n", m, "_SIZE ",
                       std::to_string(prod(p.shape)), "\n",
                       p.shape.empty() ? "" : detail::cat(m, "_SHAPE {", dims, "}\n"));
    }
    s += "\n";
  }
  return s + "#ifdef __cplusplus\n}\n#endif\n#endif\n";
}

namespace {

// The constants of blob_min bytes or more, each 64-byte aligned: the blob's bytes, and each
// constant's offset in it (npos: the constant is C text).
struct Blob {
  std::vector<std::byte> bytes;
  std::vector<std::size_t> at;
};

Blob blob_of(const Generator::Impl& g) {
  Blob b;
  for (const auto& c : g.constants) {
    b.at.push_back(std::string::npos);
    if (c.bytes.size() < g.blob_min) continue;
    b.at.back() = (b.bytes.size() + 63) / 64 * 64;
    b.bytes.resize(b.at.back());
    b.bytes.insert(b.bytes.end(), c.bytes.begin(), c.bytes.end());
  }
  return b;
}

// NAME.c, its blob (if any) read from `bin`.
std::string render_source(const Generator::Impl& g, const Blob& blob, const std::string& bin) {
  std::string s =
      detail::cat("/* ", g.name, ".c: generated by metagrad::aot::Generator; do not edit. */\n#include \"",
                  g.name, ".h\"\n\n", g.prelude, "\n");
  const bool threads = g.gemm || !g.splits.empty();
  if (threads) s += threads_c_source(g.prefix) + "\n";
  if (g.gemm) s += gemm_c_source(g.prefix, *g.gemm, cpu::host_caches()) + "\n";
  if (g.gathers)
    s += detail::cat(
        "/* An indexed load (a gather on indices computed when it runs): rows of `row` bytes of src\n",
        "   (outer, size, rows) picked by idx[0..n); every index is checked before any is read. */\n",
        "static int ", g.prefix,
        "_gather(void* restrict out, const void* restrict src, const long long* idx,\n",
        "    long long outer, long long size, long long n, long long row) {\n", "  long long a, j;\n",
        "  for (j = 0; j < n; ++j) if (idx[j] < 0 || idx[j] >= size) return 1;\n",
        "  for (a = 0; a < outer; ++a) for (j = 0; j < n; ++j)\n",
        "    __builtin_memcpy((char*)out + (a * n + j) * row, (const char*)src + (a * size + idx[j]) * "
        "row,\n",
        "                     (unsigned long)row);\n", "  return 0;\n}\n");
  s += detail::cat("void ", g.name, "_set_threads(int threads) { ",
                   threads ? g.prefix + "_use_threads(threads);" : "(void)threads;", " }\n");
  if (!blob.bytes.empty()) {
    std::uint64_t h = 14695981039346656037ull;  // FNV-1a: this file changes when the blob does
    for (std::byte c : blob.bytes) h = (h ^ static_cast<std::uint8_t>(c)) * 1099511628211ull;
    char hash[20];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h));
    std::string path;
    for (char c : bin)
      path += c == '"' || c == '\\' ? detail::cat("\\", std::string(1, c)) : std::string(1, c);
    std::string macro = g.name + "_CONSTANTS_FILE";
    s += detail::cat("\n/* The large constants: ", std::to_string(blob.bytes.size()), " bytes (FNV-1a ", hash,
                     ") of ", g.name, ".bin, linked in by the assembler;\n   define ", macro,
                     " to its path where it is not at this one. */\n#ifndef ", macro, "\n#define ", macro,
                     " \"", path, "\"\n#endif\n__asm__(\".pushsection .rodata\\n.balign 64\\n", g.prefix,
                     "_blob:\\n.incbin \\\"\" ", macro, " \"\\\"\\n.popsection\");\n",
                     "extern const unsigned char ", g.prefix,
                     "_blob[] __attribute__((visibility(\"hidden\")));\n");
  }
  for (const auto& k : g.kernels) s += k + "\n";
  for (const auto& [id, t] : g.splits) s += t;
  for (std::size_t k = 0; k < g.constants.size(); ++k) {
    const auto& c = g.constants[k];
    std::string type = codegen::c_storage_type(c.dtype);
    if (blob.at[k] != std::string::npos) {
      s += detail::cat("#define ", c.name, " ((const ", type, "*)(", g.prefix, "_blob + ",
                       std::to_string(blob.at[k]), "))\n");
      continue;
    }
    s += detail::cat("static const ", type, " ", c.name, "[",
                     std::to_string(std::max<std::size_t>(c.size, 1)), "] = {");
    for (std::size_t i = 0; i < c.size; ++i)
      s += detail::cat(i % 8 ? ", " : (i ? ",\n  " : "\n  "),
                       c_literal(c.bytes.data() + i * static_cast<std::size_t>(c.dtype.itemsize), c.dtype));
    s += c.size ? "};\n" : "0};\n";
  }
  for (const auto& [ctype, n] : g.arenas)
    s += detail::cat("static ", ctype, " ", g.prefix, "_", identifier(ctype), "[", std::to_string(n),
                     "] __attribute__((aligned(64)));\n");
  for (const Function& f : g.fns) s += detail::cat("\n", prototype(f), " {\n", f.body, "}\n");
  return s;
}

}  // namespace

std::string Generator::source() const { return render_source(*impl_, blob_of(*impl_), impl_->name + ".bin"); }

void Generator::write(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  auto file = [&](const char* ext) { return std::filesystem::path(dir) / (impl_->name + ext); };
  auto put = [](const std::filesystem::path& path, const char* data, std::size_t n) {
    std::ofstream out(path, std::ios::binary);
    out.write(data, static_cast<std::streamsize>(n));
    if (!out.flush()) throw std::runtime_error("aot: cannot write " + path.string());
  };
  Blob blob = blob_of(*impl_);
  std::string h = header(),
              c = render_source(*impl_, blob,
                                std::filesystem::absolute(file(".bin")).lexically_normal().string());
  put(file(".h"), h.data(), h.size());
  put(file(".c"), c.data(), c.size());
  if (impl_->blob_min != SIZE_MAX)  // written even when empty: a build rule can name it
    put(file(".bin"), reinterpret_cast<const char*>(blob.bytes.data()), blob.bytes.size());
}

int Generator::main(int argc, char** argv) try {
  std::string dir = ".";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "-n" && i + 1 < argc) {
      impl_->name = argv[++i];  // the files' names; the internal symbols are static
      if (!is_identifier(impl_->name))
        throw std::invalid_argument("-n " + impl_->name + ": not a C identifier");
    } else if (a.rfind("--constants-file=", 0) == 0) {
      // Constants of BYTES or more (a model's weights) go to DIR/NAME.bin beside the C, which links
      // them with the assembler's .incbin (ELF, GCC or Clang): a C file to compile in seconds rather
      // than megabytes of numbers (docs/onnx.md). By default every constant is C text.
      std::size_t used = 0;
      std::string v = a.substr(17);
      try {
        impl_->blob_min = std::stoull(v, &used);
      } catch (const std::exception&) { used = 0; }
      if (v.empty() || used != v.size()) throw std::invalid_argument(a + ": BYTES is not a size");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: %s [-o DIR] [-n NAME] [--constants-file=BYTES] [the generator's own arguments]\n",
                  argv[0]);
      return 0;
    }
  }
  write(dir);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", argc ? argv[0] : "generator", e.what());
  return 1;
}

}  // namespace metagrad::aot
