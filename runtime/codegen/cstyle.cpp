#include "metagrad/codegen/cstyle.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

namespace metagrad::codegen {

using symbolic::Node;
using symbolic::NodeKind;

std::string render_c_index(const Node& n) {
  auto bin = [&](const char* op) {
    return detail::cat("(", render_c_index(n.a()), op, std::to_string(n.b()), ")");
  };
  switch (n.kind()) {
    case NodeKind::Num:
      return std::to_string(n.b());
    case NodeKind::Variable:
      return n.name();
    case NodeKind::Mul:
      return bin("*");
    case NodeKind::Div:
      return n.a().min() >= 0
                 ? bin("/")
                 : detail::cat("mg_fdiv(", render_c_index(n.a()), ",", std::to_string(n.b()), ")");
    case NodeKind::Mod:
      return n.a().min() >= 0
                 ? bin("%")
                 : detail::cat("mg_fmod(", render_c_index(n.a()), ",", std::to_string(n.b()), ")");
    case NodeKind::Lt:
      return bin("<");
    case NodeKind::Sum:
    case NodeKind::And: {
      std::string out = "(";
      for (std::size_t i = 0; i < n.nodes().size(); ++i) {
        if (i) out += n.kind() == NodeKind::Sum ? "+" : "&&";
        out += render_c_index(n.nodes()[i]);
      }
      return out + ")";
    }
  }
  return "0";
}

std::string c_storage_type(DType d, bool opencl) {
  switch (d.priority) {
    case dtypes::bool_.priority:
      return opencl ? "uchar" : "_Bool";
    case dtypes::int8.priority:
      return opencl ? "char" : "signed char";
    case dtypes::uint8.priority:
      return opencl ? "uchar" : "unsigned char";
    case dtypes::int32.priority:
      return "int";
    case dtypes::int64.priority:
      return opencl ? "long" : "long long";
    case dtypes::float16.priority:
      return opencl ? "half" : "unsigned short";
    case dtypes::float32.priority:
      return "float";
    default:
      return "double";
  }
}

namespace {

const char* kPreludeC = R"(#define mg_max(a,b) ((a)>(b)||(a)!=(a)?(a):(b))
static inline long long mg_fdiv(long long a, long long b) { long long q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
static inline long long mg_fmod(long long a, long long b) { long long r = a % b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }
static inline long long mg_idiv(long long a, long long b) { return b == 0 ? 0 : b == -1 ? (long long)(0ULL - (unsigned long long)a) : a / b; }
static inline long long mg_ipow(long long b, long long e) { unsigned long long r = 1, x = (unsigned long long)b; if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0; for (; e; e >>= 1, x *= x) if (e & 1) r *= x; return (long long)r; }
#if defined(__FMA__) || defined(__FP_FAST_FMAF)
#define mg_fma(a,b,c) __builtin_fmaf(a,b,c)
#else
#define mg_fma(a,b,c) ((a)*(b)+(c))
#endif
static inline float mg_exp2f(float x) {
  /* 2^x in straight-line code the compiler vectorizes (exp2f is a library call): x = n + r with
     |r| <= 1/2, 2^r by its Taylor polynomial to r^7 (error < 1e-8), 2^n in two exponent steps so
     results between 2^-151 and 2^129 round to subnormals, 0 or inf as exp2f's do. NaN passes.
     Every step is one vector instruction: selects that clamp (NaN to -151), rint, FMAs, shifts. */
  float c = x > -151.0f ? x : -151.0f, n, r, p, s1, s2; int i, h; unsigned int b1, b2;
  c = c < 129.0f ? c : 129.0f; /* one select a statement: gcc if-converts (vectorizes) these */
  n = __builtin_rintf(c); r = c - n; p = 1.5252733804059841e-05f;
  p = mg_fma(p, r, 1.5403530393381610e-04f); p = mg_fma(p, r, 1.3333558146428443e-03f);
  p = mg_fma(p, r, 9.6181291076284772e-03f); p = mg_fma(p, r, 5.5504108664821580e-02f);
  p = mg_fma(p, r, 2.4022650695910071e-01f); p = mg_fma(p, r, 6.9314718055994531e-01f); p = mg_fma(p, r, 1.0f);
  i = (int)n; h = i >> 1; b1 = (unsigned int)(h + 127) << 23; b2 = (unsigned int)(i - h + 127) << 23;
  __builtin_memcpy(&s1, &b1, 4); __builtin_memcpy(&s2, &b2, 4); p = p * s1 * s2;
  return x == x ? p : x; }
static inline float mg_h2f(unsigned short h) { unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u; float f;
  if (e == 0x1f) u = s | 0x7f800000u | (m << 13); else if (e == 0) { f = (float)m * (1.0f / 16777216.0f); return s ? -f : f; } else u = s | ((e + 112) << 23) | (m << 13);
  __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned short mg_f2h(float f) { unsigned int x, s, e, m, r, rem; int ex; __builtin_memcpy(&x, &f, 4); s = (x >> 16) & 0x8000u; e = (x >> 23) & 0xffu; m = x & 0x7fffffu;
  if (e == 0xff) return (unsigned short)(s | 0x7c00u | (m ? 0x200u : 0u));
  ex = (int)e - 112;
  if (ex >= 31) return (unsigned short)(s | 0x7c00u);
  if (ex <= 0) { unsigned int sh, half; if (ex < -10) return (unsigned short)s; m |= 0x800000u; sh = (unsigned)(14 - ex); r = m >> sh; rem = m & ((1u << sh) - 1); half = 1u << (sh - 1); if (rem > half || (rem == half && (r & 1u))) ++r; return (unsigned short)(s | r); }
  r = ((unsigned)ex << 10) | (m >> 13); rem = m & 0x1fffu; if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r; return (unsigned short)(s | r); }
)";

const char* kPreludeCL = R"(#define mg_max(a,b) ((a)>(b)||(a)!=(a)?(a):(b))
inline int mg_fdiv(int a, int b) { int q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
inline int mg_fmod(int a, int b) { int r = a % b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }
inline long mg_idiv(long a, long b) { return b == 0 ? 0 : b == -1 ? (long)(0UL - (ulong)a) : a / b; }
inline long mg_ipow(long b, long e) { ulong r = 1, x = (ulong)b; if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0; for (; e; e >>= 1, x *= x) if (e & 1) r *= x; return (long)r; }
)";

// The loops the CUDA dialect folds into its thread index: the threaded loop and the global loops
// the linearizer opens right after it (gidx1...), before any other work.
std::vector<std::size_t> flat_loops(const LinearizedKernel& k) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < k.uops.size(); ++i) {
    const UOp& u = k.uops[i];
    if (u.uop == UOps::LOCAL) continue;
    if (u.uop != UOps::LOOP) break;
    if (u.threaded || u.name.starts_with("gidx")) out.push_back(i);
  }
  return out;
}

const char* kCudaTypes[] = {"bool",      "signed char", "unsigned char", "int",
                            "long long", "half",        "float",         "double"};

struct Renderer {
  const LinearizedKernel& k;
  const CStyleLanguage& lang;
  bool opencl() const { return !lang.global_id.empty() && !lang.cuda; }
  bool cuda() const { return lang.cuda; }

  std::string storage(DType d) const {
    if (cuda())
      for (std::size_t i = 0; i < std::size(dtypes::all); ++i)
        if (dtypes::all[i] == d) return kCudaTypes[i];
    return c_storage_type(d, opencl());
  }
  // Type values are computed in: half computes in float; OpenCL bools compute as bool, not their
  // uchar storage (true + true must stay true).
  std::string compute(DType d) const {
    if (d == dtypes::float16) return "float";
    return d == dtypes::bool_ && opencl() ? "bool" : storage(d);
  }

  std::string literal(double v, DType d) const {
    if (!dtypes::is_float(d)) {
      if (d == dtypes::bool_) return v != 0 ? "1" : "0";
      if (v <= -9223372036854775808.0)
        return opencl() ? "(-9223372036854775807L-1)" : "(-9223372036854775807LL-1)";
      char b[32];
      std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
      return d == dtypes::int64 ? detail::cat("(", b, opencl() ? "L)" : "LL)") : std::string(b);
    }
    bool f32 = d != dtypes::float64;
    if (cuda() && (std::isnan(v) || std::isinf(v))) {
      std::string bits = std::isnan(v) ? (f32 ? "0x7fc00000" : "0x7ff8000000000000LL")
                                       : (f32 ? "0x7f800000" : "0x7ff0000000000000LL");
      return detail::cat(v < 0 ? "(-" : "(", f32 ? "__int_as_float(" : "__longlong_as_double(", bits, "))");
    }
    if (std::isnan(v)) return opencl() ? "NAN" : (f32 ? "__builtin_nanf(\"\")" : "__builtin_nan(\"\")");
    if (std::isinf(v))
      return detail::cat(v < 0 ? "(-" : "(",
                         opencl() ? "INFINITY" : (f32 ? "__builtin_inff()" : "__builtin_inf()"), ")");
    char b[40];
    std::snprintf(b, sizeof b, f32 ? "%.9g" : "%.17g", v);
    std::string s = b;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return f32 ? "(" + s + "f)" : "(" + s + ")";
  }

  std::string math(const char* fn, DType d) const {
    if (opencl()) return fn;
    if (cuda()) return detail::cat(fn, d == dtypes::float64 ? "" : "f");
    return detail::cat("__builtin_", fn, d == dtypes::float64 ? "" : "f");
  }

  std::string alu(const UOp& u, const std::vector<std::string>& v, const std::vector<UOp>& uops) const {
    DType in = u.vin.empty() ? u.dtype : uops[static_cast<std::size_t>(u.vin[0])].dtype;
    bool fl = dtypes::is_float(in);
    Op op = u.alu;
    if (op == UnaryOps::NOOP) return v[0];
    if (op == UnaryOps::EXP2 && !opencl() && !cuda() && fl && in != dtypes::float64)
      return detail::cat("mg_exp2f(", v[0], ")");
    if (op == UnaryOps::EXP2) return detail::cat(math("exp2", in), "(", v[0], ")");
    if (op == UnaryOps::LOG2) return detail::cat(math("log2", in), "(", v[0], ")");
    if (op == UnaryOps::SIN) return detail::cat(math("sin", in), "(", v[0], ")");
    if (op == UnaryOps::CAST) {
      if (u.dtype == dtypes::bool_) return detail::cat("(", v[0], "!=0)");
      return detail::cat("(", compute(u.dtype), ")(", v[0], ")");
    }
    if (op == BinaryOps::ADD) return detail::cat("(", v[0], "+", v[1], ")");
    if (op == BinaryOps::SUB) return detail::cat("(", v[0], "-", v[1], ")");
    // bool * bool is their and: `*` on them draws gcc's -Wint-in-bool-context.
    if (op == BinaryOps::MUL) return detail::cat("(", v[0], in == dtypes::bool_ ? "&&" : "*", v[1], ")");
    if (op == BinaryOps::DIV)
      return fl ? detail::cat("(", v[0], "/", v[1], ")") : detail::cat("mg_idiv(", v[0], ",", v[1], ")");
    if (op == BinaryOps::POW)
      return fl ? detail::cat(opencl() ? "pow" : math("pow", in), "(", v[0], ",", v[1], ")")
                : detail::cat("mg_ipow(", v[0], ",", v[1], ")");
    if (op == BinaryOps::CMPEQ) return detail::cat("(", v[0], "==", v[1], ")");
    if (op == BinaryOps::MAX) return detail::cat("mg_max(", v[0], ",", v[1], ")");
    throw std::runtime_error("cstyle: no rendering for " + to_string(op));
  }

  std::string load(const UOp& u) const {
    std::string idx = render_c_index(u.idx), buf = "data" + std::to_string(u.buf);
    std::string val = u.dtype == dtypes::float16 ? (opencl() ? detail::cat("vload_half(", idx, ",", buf, ")")
                                                             : detail::cat("mg_h2f(", buf, "[", idx, "])"))
                                                 : detail::cat(buf, "[", idx, "]");
    if (u.valid.is_num()) return val;
    return detail::cat("(", render_c_index(u.valid), "?", val, ":", literal(0, u.dtype), ")");
  }

  std::string store(const UOp& u, const std::string& v) const {
    std::string idx = render_c_index(u.idx), buf = "data" + std::to_string(u.buf);
    if (u.dtype == dtypes::float16)
      return opencl() ? detail::cat("vstore_half(", v, ",", idx, ",", buf, ");")
                      : detail::cat(buf, "[", idx, "] = mg_f2h(", v, ");");
    return detail::cat(buf, "[", idx, "] = ", v, ";");
  }

  // `void NAME(buffers..., long long start, long long end) {` and the group's local memory.
  std::string signature() const {
    std::string src;
    // gcc's loop vectorizer widens a reduce loop into in-order (lane by lane) sums, slower than the
    // scalar loop; the register tiles the optimiser upcast are vectorized across (SLP) instead.
    bool reduces = std::any_of(k.uops.begin(), k.uops.end(), [](const UOp& u) { return u.uop == UOps::ACC; });
    if (!opencl() && !cuda() && reduces) src += "__attribute__((optimize(\"no-tree-loop-vectorize\"))) ";
    src += detail::cat(lang.kernel_prefix, lang.kernel_prefix.empty() ? "" : " ", "void ", k.name, "(");
    for (std::size_t i = 0; i < k.buf_dtypes.size(); ++i) {
      src += detail::cat(i ? ", " : "", lang.buffer_prefix, i ? "const " : "", storage(k.buf_dtypes[i]), "*",
                         lang.buffer_suffix, " data", std::to_string(i));
    }
    if (lang.range_arguments) src += ", long long start, long long end";
    src += ") {\n";
    // A group's partial values meet in local memory, declared at the kernel's scope (OpenCL 1.2).
    for (std::size_t i = 0; i < k.uops.size(); ++i)
      if (k.uops[i].uop == UOps::GROUP)
        src += detail::cat(cuda() ? "  __shared__ " : "  __local ", compute(k.uops[i].dtype), " lds",
                           std::to_string(i), "[", std::to_string(k.uops[i].extent), "];\n");
    return src;
  }

  // The head of a loop: the threaded one takes the work-item's id (OpenCL) or the start..end range.
  std::string loop_head(const UOp& u) const {
    if (u.threaded && !lang.range_arguments)
      return detail::cat("{ int ", u.name, " = ", k.local_size ? "get_group_id(0)" : lang.global_id, ";");
    // C counts in 64 bits (a reduction over more than 2^31 elements must not wrap); OpenCL only
    // where the extent needs it.
    std::string counter = !opencl() && !cuda()  ? "long long"
                          : u.extent <= INT_MAX ? "int"
                                                : storage(dtypes::int64);
    if (u.threaded)
      return detail::cat("for (", counter, " ", u.name, " = start; ", u.name, " < end; ", u.name, "++) {");
    return detail::cat("for (", counter, " ", u.name, " = 0; ", u.name, " < ", std::to_string(u.extent), "; ",
                       u.name, "++) {");
  }

  // A GROUP (uop i) combining v0 across the work-group: barriers: the previous use of lds is read
  // by all; then all are written.
  std::vector<std::string> group_lines(const UOp& u, std::size_t i, const std::string& v0) const {
    std::string lds = "lds" + std::to_string(i), lid = "lidx0", self = "v" + std::to_string(i);
    UOp as_alu = u;
    as_alu.vin = {u.vin[0], u.vin[0]};
    std::string barrier = cuda() ? "__syncthreads();" : "barrier(CLK_LOCAL_MEM_FENCE);";
    return {detail::cat(barrier, " ", lds, "[", lid, "] = ", v0, "; ", barrier),
            detail::cat(compute(u.dtype), " ", self, " = ", lds, "[0];"),
            detail::cat("for (int g = 1; g < ", std::to_string(u.extent), "; g++) ", self, " = ",
                        alu(as_alu, {self, lds + "[g]"}, k.uops), ";")};
  }

  // CUDA's head of the threaded loop: one thread (or block) index split into the variables of the
  // loops it covers, outermost first.
  std::string flat_head(const std::vector<std::size_t>& flat) const {
    std::vector<std::int64_t> inner(flat.size(), 1);  // the product of the extents inside each loop
    for (std::size_t j = flat.size(); j-- > 1;) inner[j - 1] = inner[j] * k.uops[flat[j]].extent;
    std::int64_t total = inner[0] * k.uops[flat[0]].extent;
    std::string out = detail::cat("{ long long gid = ", k.local_size ? "blockIdx.x" : lang.global_id, ";");
    if (!k.local_size) out += detail::cat(" if (gid >= ", std::to_string(total), ") return;");
    for (std::size_t j = 0; j < flat.size(); ++j) {
      const UOp& l = k.uops[flat[j]];
      std::string v = inner[j] > 1 ? detail::cat("gid/", std::to_string(inner[j])) : "gid";
      if (j > 0) v = detail::cat("(", v, ")%", std::to_string(l.extent));
      out += detail::cat(" ", l.extent > INT_MAX ? "long long" : "int", " ", l.name, " = ",
                         total == 0 ? "0" : v, ";");
    }
    return out;
  }

  std::string function() const {
    std::string src = signature();
    std::vector<std::string> names(k.uops.size());
    std::vector<std::size_t> flat = cuda() ? flat_loops(k) : std::vector<std::size_t>{};
    std::vector<bool> braces;  // per open loop: whether its head opened a brace
    int depth = 1;
    auto line = [&](const std::string& s) {
      src += std::string(static_cast<std::size_t>(depth) * 2, ' ') + s + "\n";
    };
    for (std::size_t i = 0; i < k.uops.size(); ++i) {
      const UOp& u = k.uops[i];
      std::vector<std::string> v;
      for (int x : u.vin) v.push_back(names[static_cast<std::size_t>(x)]);
      std::string self = "v" + std::to_string(i);
      switch (u.uop) {
        case UOps::LOOP: {
          bool covered = std::find(flat.begin(), flat.end(), i) != flat.end();
          braces.push_back(!covered || u.threaded);
          if (covered && u.threaded) line(flat_head(flat)), ++depth;
          if (!covered) line(loop_head(u)), ++depth;
          break;
        }
        case UOps::ENDLOOP:
          if (braces.back()) --depth, line("}");
          braces.pop_back();
          break;
        case UOps::CONST:
          names[i] = literal(u.value, u.dtype);
          break;
        case UOps::DEFINE_ACC:
          names[i] = "acc" + std::to_string(i);
          line(detail::cat(compute(u.dtype), " ", names[i], " = ",
                           v.empty() ? literal(u.value, u.dtype) : v[0], ";"));
          break;
        case UOps::LOAD:
          names[i] = self;
          line(detail::cat(compute(u.dtype), " ", self, " = ", load(u), ";"));
          break;
        case UOps::ALU:
          names[i] = self;
          line(detail::cat(compute(u.dtype), " ", self, " = ", alu(u, v, k.uops), ";"));
          break;
        case UOps::ACC: {
          UOp as_alu = u;
          as_alu.vin = {u.vin[0], u.vin[1]};
          line(detail::cat(v[0], " = ", alu(as_alu, v, k.uops), ";"));
          break;
        }
        case UOps::STORE:
          if (u.valid.is_num() && u.valid.b() == 0) break;
          line(u.valid.is_num() ? store(u, v[0])
                                : detail::cat("if (", render_c_index(u.valid), ") ", store(u, v[0])));
          break;
        case UOps::LOCAL:
          if (!opencl() && !cuda())
            throw std::runtime_error("cstyle: work-groups are OpenCL's and CUDA's, in kernel " + k.name);
          line(detail::cat("{ int ", u.name, " = ", cuda() ? "threadIdx.x" : "get_local_id(0)", ";"));
          ++depth, braces.push_back(true);
          break;
        case UOps::GROUP:
          names[i] = self;
          for (const std::string& l : group_lines(u, i, v[0])) line(l);
          break;
      }
    }
    return src + "}\n";
  }
};

}  // namespace

const std::string& c_prelude(const CStyleLanguage& lang) {
  static const std::string c = kPreludeC,
                           cl = std::string(kPreludeCL) + "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
  if (lang.cuda) return cuda_prelude();
  return lang.global_id.empty() ? c : cl;
}

std::string render_cstyle_function(const LinearizedKernel& k, const CStyleLanguage& lang) {
  return Renderer{k, lang}.function();
}

std::int64_t flat_global_size(const LinearizedKernel& k) {
  std::int64_t n = 1;
  for (std::size_t i : flat_loops(k)) n *= k.uops[i].extent;
  return n;
}

std::string render_cstyle(const LinearizedKernel& k, const CStyleLanguage& lang) {
  return c_prelude(lang) + render_cstyle_function(k, lang);
}

}  // namespace metagrad::codegen
