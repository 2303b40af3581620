#include "metagrad/codegen/cstyle.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "prelude.hpp"

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

std::string format(const std::string& pattern, const std::vector<std::string>& args) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '{' && i + 2 < pattern.size() && pattern[i + 2] == '}' && pattern[i + 1] >= '0' &&
        pattern[i + 1] <= '9') {
      out += args.at(static_cast<std::size_t>(pattern[i + 1] - '0'));
      i += 2;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// ---- the dialect description's helpers ----

std::string CStyleLanguage::type(DType d) const {
  for (std::size_t i = 0; i < std::size(dtypes::all); ++i)
    if (dtypes::all[i] == d) return types[i];
  throw std::logic_error(detail::cat(name, ": no type for dtype ", d.name));
}

std::string CStyleLanguage::compute(DType d) const {
  if (d == dtypes::float16 || d == dtypes::bfloat16) return type(dtypes::float32);
  return d == dtypes::bool_ && !bool_compute.empty() ? bool_compute : type(d);
}

std::string CStyleLanguage::literal(double v, DType d) const {
  if (!dtypes::is_float(d)) {
    if (d == dtypes::bool_) return v != 0 ? "1" : "0";
    if (d == dtypes::uint64) {  // as the CPU device converts a constant: negative wraps, 2^64 saturates
      unsigned long long u = std::isnan(v) ? 0
                             : v >= 0x1p64 ? ULLONG_MAX
                             : v >= 0      ? static_cast<unsigned long long>(v)
                             : v <= -9223372036854775808.0
                                 ? 1ULL << 63
                                 : static_cast<unsigned long long>(static_cast<long long>(v));
      return detail::cat(std::to_string(u), "U", int64_suffix);
    }
    if (v <= -9223372036854775808.0) return detail::cat("(-9223372036854775807", int64_suffix, "-1)");
    char b[32];
    std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v));
    return d == dtypes::int64 ? detail::cat("(", b, int64_suffix, ")") : std::string(b);
  }
  bool f32 = d != dtypes::float64;
  if (d == dtypes::bfloat16) v = bf16(static_cast<float>(v));  // the value a bfloat16 holds
  if (std::isnan(v)) return f32 ? nan32 : nan64;
  if (std::isinf(v)) return detail::cat(v < 0 ? "(-" : "(", f32 ? inf32 : inf64, ")");
  char b[40];
  std::snprintf(b, sizeof b, f32 ? "%.9g" : "%.17g", v);
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return f32 ? "(" + s + "f)" : "(" + s + ")";
}

std::string CStyleLanguage::math(const char* fn, DType d) const {
  return detail::cat(math_prefix, fn, d == dtypes::float64 ? "" : math_f32_suffix);
}

// ---- the op table ----

namespace {

std::string infix(const AluArgs& a, const char* op) { return detail::cat("(", a.v[0], op, a.v[1], ")"); }
std::string call(const std::string& fn, const AluArgs& a) {
  std::string out = fn + "(";
  for (std::size_t i = 0; i < a.v.size(); ++i) out += (i ? "," : "") + a.v[i];
  return out + ")";
}
// Float math; on integers EXP2, LOG2 and SIN are the identity, as on the CPU device.
std::string unary_math(const AluArgs& a, const char* fn) {
  return dtypes::is_float(a.in) ? call(a.lang.math(fn, a.in), a) : a.v[0];
}

// The limits of an integer dtype as literals of it.
std::string int_limit(const CStyleLanguage& lang, DType d, bool max) {
  if (!max) return lang.literal(dtypes::min_value(d), d);
  if (d == dtypes::int64) return detail::cat("9223372036854775807", lang.int64_suffix);
  if (d == dtypes::uint64) return detail::cat("18446744073709551615U", lang.int64_suffix);
  return std::to_string(static_cast<long long>(dtypes::limit(d)) - 1);
}

// Float to an integer saturates and NaN gives 0, as on every device (a plain C cast is undefined
// there). The bounds are the dtype's minimum and its maximum + 1, powers of two every float holds.
std::string cast(const AluArgs& a) {
  if (a.out == dtypes::bool_) return detail::cat("(", a.v[0], "!=0)");
  std::string to = detail::cat("(", a.lang.compute(a.out), ")(", a.v[0], ")");
  // float16 and bfloat16 compute in float but hold only their own precision after a cast.
  if (a.out == dtypes::float16) return format(a.lang.half_round, {to});
  if (a.out == dtypes::bfloat16) return detail::cat("mg_bf2f(mg_f2bf(", to, "))");
  if (!dtypes::is_float(a.in) || dtypes::is_float(a.out)) return to;
  const std::string& x = a.v[0];
  double lo = dtypes::min_value(a.out), hi = dtypes::limit(a.out);
  return detail::cat("(", x, "!=", x, "?0:", x, "<=", a.lang.literal(lo, a.in), "?",
                     int_limit(a.lang, a.out, false), ":", x, ">=", a.lang.literal(hi, a.in), "?",
                     int_limit(a.lang, a.out, true), ":", to, ")");
}

// Rows every C-like dialect shares; a CStyleLanguage's code_for_op replaces any of them.
const OpTable& common_code_for_op() {
  static const OpTable t = {
      {UnaryOps::NOOP, [](const AluArgs& a) { return a.v[0]; }},
      {UnaryOps::EXP2, [](const AluArgs& a) { return unary_math(a, "exp2"); }},
      {UnaryOps::LOG2, [](const AluArgs& a) { return unary_math(a, "log2"); }},
      {UnaryOps::SIN, [](const AluArgs& a) { return unary_math(a, "sin"); }},
      {UnaryOps::CAST, cast},
      // bool + bool is their or, bool * bool their and: on bools gcc folds x + x into x * 2 and `*`
      // draws its -Wint-in-bool-context.
      {BinaryOps::ADD, [](const AluArgs& a) { return infix(a, a.in == dtypes::bool_ ? "||" : "+"); }},
      {BinaryOps::SUB, [](const AluArgs& a) { return infix(a, "-"); }},
      // uint16 * uint16 is an int product in C (integer promotion), past INT_MAX (undefined) for
      // large factors: in unsigned int it wraps, and the store keeps its low 16 bits.
      {BinaryOps::MUL,
       [](const AluArgs& a) {
         if (a.in == dtypes::uint16)
           return detail::cat("((unsigned int)", a.v[0], "*(unsigned int)", a.v[1], ")");
         return infix(a, a.in == dtypes::bool_ ? "&&" : "*");
       }},
      // uint64 divides and raises to powers unsigned (its values past 2^63 are negative in long long).
      {BinaryOps::DIV,
       [](const AluArgs& a) {
         return dtypes::is_float(a.in) ? infix(a, "/")
                                       : call(a.in == dtypes::uint64 ? "mg_udiv" : "mg_idiv", a);
       }},
      {BinaryOps::POW,
       [](const AluArgs& a) {
         return call(dtypes::is_float(a.in)   ? a.lang.math("pow", a.in)
                     : a.in == dtypes::uint64 ? "mg_upow"
                                              : "mg_ipow",
                     a);
       }},
      {BinaryOps::CMPEQ, [](const AluArgs& a) { return infix(a, "=="); }},
      {BinaryOps::MAX, [](const AluArgs& a) { return call("mg_max", a); }},
      {TernaryOps::WHERE,
       [](const AluArgs& a) { return detail::cat("(", a.v[0], "?", a.v[1], ":", a.v[2], ")"); }},
  };
  return t;
}

}  // namespace

AluRender CStyleLanguage::row(Op op) const {
  for (const OpTable* t : {&code_for_op, &common_code_for_op()})
    for (const auto& [o, f] : *t)
      if (o == op) return f;
  throw std::runtime_error(detail::cat(name, ": no rendering for ", to_string(op)));
}

std::string c_storage_type(DType d, const CStyleLanguage& lang) { return lang.type(d); }

// ---- the dialects ----

namespace {

// After kMaxMacro and the integer helpers (prelude.hpp).
// A sum's `#pragma omp simd` is read under -fopenmp-simd (the CLANG device, AOT libraries); a build
// without it runs the loop in order, and says nothing (-Wall -Werror included).
const char* kPreludeC = R"(#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#if defined(__FMA__) || defined(__FP_FAST_FMAF)
#define mg_fma(a,b,c) __builtin_fmaf(a,b,c)
#else
#define mg_fma(a,b,c) ((a)*(b)+(c))
#endif
static inline float mg_exp2f(float x) {
  /* 2^x in straight-line code the compiler vectorizes (exp2f is a library call): x = n + r with
     |r| <= 1/2, 2^r by its Taylor polynomial to r^7 (error < 1e-8), 2^n in two exponent steps so
     results between 2^-151 and 2^129 round to subnormals, 0 or inf as exp2f's do. NaN passes.
     Every step is one vector instruction: selects that clamp (NaN to -151), rint, FMAs, shifts.
     Below -150 the result is 0: those lanes work on 0, since a product rounding to a subnormal or
     0 costs a microcode assist per vector instruction (a causal mask's -inf). */
  float c = x > -151.0f ? x : -151.0f, n, r, p, s1, s2; int i, h, live; unsigned int b1, b2;
  c = c < 129.0f ? c : 129.0f; /* one select a statement: gcc if-converts (vectorizes) these */
  live = c > -150.0f;
  c = live ? c : 0.0f;
  n = __builtin_rintf(c); r = c - n; p = 1.5252733804059841e-05f;
  p = mg_fma(p, r, 1.5403530393381610e-04f); p = mg_fma(p, r, 1.3333558146428443e-03f);
  p = mg_fma(p, r, 9.6181291076284772e-03f); p = mg_fma(p, r, 5.5504108664821580e-02f);
  p = mg_fma(p, r, 2.4022650695910071e-01f); p = mg_fma(p, r, 6.9314718055994531e-01f); p = mg_fma(p, r, 1.0f);
  i = (int)n; h = i >> 1; b1 = (unsigned int)(h + 127) << 23; b2 = (unsigned int)(i - h + 127) << 23;
  __builtin_memcpy(&s1, &b1, 4); __builtin_memcpy(&s2, &b2, 4); p = p * s1 * s2;
  p = live ? p : 0.0f;
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
static inline float mg_bf2f(unsigned short h) { unsigned int u = (unsigned int)h << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned short mg_f2bf(float f) { unsigned int x; __builtin_memcpy(&x, &f, 4);
  return (unsigned short)((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }
)";

// After kMaxMacro and the integer helpers (prelude.hpp); OpenCL's index math is 32-bit.
// Half loads, stores and roundings keep a NaN's sign and payload (quieted) as the host does: a GPU
// driver's vload_half / vstore_half may make every NaN one canonical NaN (NVIDIA's does).
const char* kPreludeCL =
    R"(inline float mg_rh(float f) { uint x = as_uint(f); if ((x & 0x7fffffffu) > 0x7f800000u) return as_float((x | 0x400000u) & 0xffffe000u); ushort h; vstore_half(f, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
inline float mg_lh(size_t i, const __global half* p) { ushort h = ((const __global ushort*)p)[i]; if ((h & 0x7fffu) > 0x7c00u) return as_float(((uint)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint)(h & 0x3ffu) << 13)); return vload_half(i, p); }
inline void mg_sh(float f, size_t i, __global half* p) { uint x = as_uint(f); if ((x & 0x7fffffffu) > 0x7f800000u) ((__global ushort*)p)[i] = (ushort)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu)); else vstore_half(f, i, p); }
inline float mg_bf2f(ushort h) { return as_float((uint)h << 16); }
inline ushort mg_f2bf(float f) { uint x = as_uint(f); return (ushort)((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }
)";

}  // namespace

const CStyleLanguage& c_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage l;
    l.name = "C";
    l.buffer_suffix = " restrict";
    // gcc's loop vectorizer widens a reduce loop into in-order (lane by lane) sums, slower than the
    // scalar loop; the register tiles the optimiser upcast are vectorized across (SLP) instead.
    l.reduce_attribute = "__attribute__((optimize(\"no-tree-loop-vectorize\"))) ";
    // A sum along memory is one loop that gcc vectorizes with partial sums in vector lanes, which
    // needs its additions reassociable. gcc's associative-math (and the no-signed-zeros it wants)
    // would be the whole function's: it folded (a + b) - a to b and, vectorized, x * 0 to 0, where
    // an inf or a NaN gives NaN. OpenMP's simd reduction (-fopenmp-simd) relaxes the sum alone,
    // as LLVM's `reassoc` on its additions does; the elementwise work keeps IEEE semantics.
    l.reassociate_attribute = "__attribute__((optimize(\"tree-loop-vectorize\"))) ";
    l.sum_pragma = "#pragma omp simd reduction(+:{0})";
    l.prelude = kMaxMacro +
                integer_helpers("static inline ", "long long", "long long", "unsigned long long", "0ULL") +
                kPreludeC;
    // Bools are stored as bytes and compute as _Bool: gcc vectorizes no loop that loads a _Bool
    // (a causal mask's softmax ran scalar).
    l.types = {
        "unsigned char",     "signed char", "unsigned char", "int",   "long long",      "unsigned short",
        "unsigned short",    "float",       "double",        "short", "unsigned short", "unsigned int",
        "unsigned long long"};
    l.bool_compute = "_Bool";
    l.int64_suffix = "LL";
    l.inf32 = "__builtin_inff()", l.inf64 = "__builtin_inf()";
    l.nan32 = "__builtin_nanf(\"\")", l.nan64 = "__builtin_nan(\"\")";
    l.math_prefix = "__builtin_", l.math_f32_suffix = "f";
    l.half_load = "mg_h2f({0}[{1}])", l.half_store = "{0}[{1}] = mg_f2h({2});";
    l.half_round = "mg_h2f(mg_f2h({0}))";
    // 2^x in float as straight-line code gcc vectorizes, where exp2f is a library call.
    l.code_for_op = {{UnaryOps::EXP2, [](const AluArgs& a) {
                        if (!dtypes::is_float(a.in) || a.in == dtypes::float64) return unary_math(a, "exp2");
                        return call("mg_exp2f", a);
                      }}};
    return l;
  }();
  return lang;
}

const CStyleLanguage& opencl_language() {
  static const CStyleLanguage lang = [] {
    CStyleLanguage l;
    l.name = "OpenCL C";
    l.kernel_prefix = "__kernel ";
    l.buffer_prefix = "__global ";
    l.prelude = kMaxMacro + integer_helpers("inline ", "int", "long", "ulong", "0UL") + kPreludeCL +
                "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    l.range_arguments = false;
    l.global_id = "get_global_id(0)", l.group_id = "get_group_id(0)", l.local_id = "get_local_id(0)";
    l.local_prefix = "__local ", l.barrier = "barrier(CLK_LOCAL_MEM_FENCE);";
    l.wide_counters = false;  // C's are 64-bit: a reduction over 2^31 elements must not wrap
    // Bools are stored as uchar but compute as bool (true + true must stay true).
    l.types = {"uchar", "char",   "uchar", "int",    "long", "half", "ushort",
               "float", "double", "short", "ushort", "uint", "ulong"};
    l.bool_compute = "bool";
    l.int64_suffix = "L";
    l.inf32 = l.inf64 = "INFINITY", l.nan32 = l.nan64 = "NAN";
    l.half_load = "mg_lh({1},{0})", l.half_store = "mg_sh({2},{1},{0});";
    l.half_round = "mg_rh({0})";
    // PoCL folded exp2 of a NaN it could see (x + NAN) to poison and dropped the store that read it
    // (the output kept whatever the buffer held): NaN passes by a select instead.
    l.code_for_op = {{UnaryOps::EXP2, [](const AluArgs& a) {
                        if (!dtypes::is_float(a.in)) return unary_math(a, "exp2");
                        return detail::cat("(", a.v[0], "!=", a.v[0], "?", a.v[0], ":", unary_math(a, "exp2"),
                                           ")");
                      }}};
    return l;
  }();
  return lang;
}

// ---- the renderer ----

namespace {

// The loops a flat_global dialect folds into its thread index: the threaded loop and the global
// loops the linearizer opens right after it (gidx1...), before any other work.
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

struct Renderer {
  const LinearizedKernel& k;
  const CStyleLanguage& lang;
  std::string src;
  int depth = 1;
  std::vector<std::string> names;  // per uop: the C expression of its value
  std::vector<bool> braces;        // per open loop: whether its head opened a brace
  std::vector<std::size_t> flat;   // flat_global: the loops the thread index covers

  void line(const std::string& s) { src += std::string(static_cast<std::size_t>(depth) * 2, ' ') + s + "\n"; }
  const UOp& uop(int i) const { return k.uops[static_cast<std::size_t>(i)]; }
  std::vector<std::string> operands(const UOp& u) const {
    std::vector<std::string> v;
    for (int x : u.vin) v.push_back(names[static_cast<std::size_t>(x)]);
    return v;
  }

  // op over v, reading dtype `in` and producing `out`.
  std::string alu(Op op, DType in, DType out, const std::vector<std::string>& v) const {
    return lang.row(op)(AluArgs{v, in, out, lang});
  }
  std::string alu(const UOp& u, const std::vector<std::string>& v) const {
    return alu(u.alu, alu_input_dtype(u, k.uops), u.dtype, v);
  }

  std::string load(const UOp& u) const {
    std::string idx = render_c_index(u.idx), buf = "data" + std::to_string(u.buf);
    std::string val = u.dtype == dtypes::float16    ? format(lang.half_load, {buf, idx})
                      : u.dtype == dtypes::bfloat16 ? detail::cat("mg_bf2f(", buf, "[", idx, "])")
                                                    : detail::cat(buf, "[", idx, "]");
    if (u.valid.is_num()) return val;
    return detail::cat("(", render_c_index(u.valid), "?", val, ":", lang.literal(0, u.dtype), ")");
  }

  std::string store(const UOp& u, const std::string& v) const {
    std::string idx = render_c_index(u.idx), buf = "data" + std::to_string(u.buf);
    if (u.dtype == dtypes::float16) return format(lang.half_store, {buf, idx, v});
    if (u.dtype == dtypes::bfloat16) return detail::cat(buf, "[", idx, "] = mg_f2bf(", v, ");");
    return detail::cat(buf, "[", idx, "] = ", v, ";");
  }

  // `void NAME(buffers..., long long start, long long end) {` and the groups' local memory.
  void signature() {
    bool reduces = std::any_of(k.uops.begin(), k.uops.end(), [](const UOp& u) { return u.uop == UOps::ACC; });
    // (a row kernel's loops are its elementwise work's too: left to the loop vectorizer)
    if (reduces && !k.rows)
      src += k.reassociate && !lang.reassociate_attribute.empty() ? lang.reassociate_attribute
                                                                  : lang.reduce_attribute;
    src += detail::cat(lang.kernel_prefix, "void ", k.name, "(");
    auto buffer = [&](std::size_t i) {
      return detail::cat(lang.buffer_prefix, written(k, i) ? "" : "const ", lang.type(k.buf_dtypes[i]), "*");
    };
    bool array = lang.range_arguments && k.buf_dtypes.size() > kMaxBufferArguments;
    if (array) src += "void* const* restrict args";
    for (std::size_t i = 0; i < k.buf_dtypes.size() && !array; ++i)
      src += detail::cat(i ? ", " : "", buffer(i), lang.buffer_suffix, " data", std::to_string(i));
    if (lang.range_arguments) src += ", long long start, long long end";
    src += ") {\n";
    for (std::size_t i = 0; i < k.buf_dtypes.size() && array; ++i)
      line(detail::cat(buffer(i), lang.buffer_suffix, " data", std::to_string(i), " = (", buffer(i), ")args[",
                       std::to_string(i), "];"));
    // A group's partial values meet in local memory, declared at the kernel's scope (OpenCL 1.2).
    for (std::size_t i = 0; i < k.uops.size(); ++i)
      if (k.uops[i].uop == UOps::GROUP)
        line(detail::cat(lang.local_prefix, lang.compute(k.uops[i].dtype), " lds", std::to_string(i), "[",
                         std::to_string(k.uops[i].extent), "];"));
  }

  // The head of a loop: the threaded one takes the work-item's (or group's) index, or the
  // start..end range the host thread was given.
  std::string loop_head(const UOp& u) const {
    if (u.threaded && !lang.range_arguments)
      return detail::cat("{ int ", u.name, " = ", k.local_size ? lang.group_id : lang.global_id, ";");
    std::string counter = lang.wide_counters || u.extent > INT_MAX ? lang.type(dtypes::int64) : "int";
    if (u.threaded)
      return detail::cat("for (", counter, " ", u.name, " = start; ", u.name, " < end; ", u.name, "++) {");
    return detail::cat("for (", counter, " ", u.name, " = 0; ", u.name, " < ", std::to_string(u.extent), "; ",
                       u.name, "++) {");
  }

  // flat_global's head: one thread index split into the covered loops' variables, outermost first.
  std::string flat_head() const {
    std::vector<std::int64_t> inner(flat.size(), 1);  // the product of the extents inside each loop
    for (std::size_t j = flat.size(); j-- > 1;) inner[j - 1] = inner[j] * k.uops[flat[j]].extent;
    std::int64_t total = inner[0] * k.uops[flat[0]].extent;
    std::string out = detail::cat("{ long long gid = ", k.local_size ? lang.group_id : lang.global_id, ";");
    if (!k.local_size) out += detail::cat(" if (gid >= ", std::to_string(total), ") return;");
    for (std::size_t j = 0; j < flat.size(); ++j) {
      const UOp& l = k.uops[flat[j]];
      std::string v = inner[j] > 1 ? detail::cat("gid/", std::to_string(inner[j])) : "gid";
      if (j > 0) v = detail::cat("(", v, ")%", std::to_string(l.extent));
      out += detail::cat(" ", l.extent > INT_MAX ? lang.type(dtypes::int64) : "int", " ", l.name, " = ",
                         total == 0 ? "0" : v, ";");
    }
    return out;
  }

  // A GROUP (uop i) combining its operand across the work-group through local memory; barriers:
  // the previous use of lds is read by all, then all are written.
  void group(const UOp& u, std::size_t i, const std::string& v0) {
    std::string lds = "lds" + std::to_string(i), self = "v" + std::to_string(i);
    line(detail::cat(lang.barrier, " ", lds, "[lidx0] = ", v0, "; ", lang.barrier));
    line(detail::cat(lang.compute(u.dtype), " ", self, " = ", lds, "[0];"));
    line(detail::cat("for (int g = 1; g < ", std::to_string(u.extent), "; g++) ", self, " = ",
                     alu(u.alu, u.dtype, u.dtype, {self, lds + "[g]"}), ";"));
    names[i] = self;
  }

  // A reassociable kernel's innermost loop at uop i: the float accumulators it sums into that are
  // declared before it, comma-separated ("" for another loop, or where the dialect has no pragma).
  std::string simd_sums(std::size_t i) const {
    if (!k.reassociate || lang.sum_pragma.empty() || k.uops[i].threaded) return "";
    std::vector<int> accs;
    for (std::size_t j = i + 1; j < k.uops.size() && k.uops[j].uop != UOps::ENDLOOP; ++j) {
      const UOp& u = k.uops[j];
      if (u.uop == UOps::LOOP || u.uop == UOps::LOCAL) return "";
      if (u.uop != UOps::ACC) continue;
      if (u.alu != BinaryOps::ADD || !dtypes::is_float(uop(u.vin[0]).dtype) || u.vin[0] > static_cast<int>(i))
        return "";
      if (std::find(accs.begin(), accs.end(), u.vin[0]) == accs.end()) accs.push_back(u.vin[0]);
    }
    std::string out;
    for (int a : accs) out += detail::cat(out.empty() ? "" : ",", "acc", std::to_string(a));
    return out;
  }

  // One uop's lines; names[i] becomes its value's expression.
  void emit(std::size_t i) {
    const UOp& u = k.uops[i];
    std::vector<std::string> v = operands(u);
    std::string self = "v" + std::to_string(i);
    switch (u.uop) {
      case UOps::LOOP: {
        bool covered = std::find(flat.begin(), flat.end(), i) != flat.end();
        braces.push_back(!covered || u.threaded);
        if (covered && u.threaded) line(flat_head()), ++depth;
        if (!covered) {
          if (std::string sums = simd_sums(i); !sums.empty()) line(format(lang.sum_pragma, {sums}));
          line(loop_head(u)), ++depth;
        }
        break;
      }
      case UOps::ENDLOOP:
        if (braces.back()) --depth, line("}");
        braces.pop_back();
        break;
      case UOps::CONST:
        names[i] = lang.literal(u.value, u.dtype);
        break;
      case UOps::DEFINE_ACC:
        names[i] = "acc" + std::to_string(i);
        line(detail::cat(lang.compute(u.dtype), " ", names[i], " = ",
                         v.empty() ? lang.literal(u.value, u.dtype) : v[0], ";"));
        break;
      case UOps::LOAD:
        names[i] = self, line(detail::cat(lang.compute(u.dtype), " ", self, " = ", load(u), ";"));
        break;
      case UOps::ALU:
        names[i] = self, line(detail::cat(lang.compute(u.dtype), " ", self, " = ", alu(u, v), ";"));
        break;
      case UOps::ACC:  // vin[0] = alu(vin[0], vin[1])
        line(detail::cat(v[0], " = ", alu(u.alu, uop(u.vin[0]).dtype, u.dtype, v), ";"));
        break;
      case UOps::STORE:
        if (u.valid.is_num() && u.valid.b() == 0) break;
        line(u.valid.is_num() ? store(u, v[0])
                              : detail::cat("if (", render_c_index(u.valid), ") ", store(u, v[0])));
        break;
      case UOps::LOCAL:
        if (lang.local_id.empty())
          throw std::runtime_error(detail::cat(lang.name, ": no work-groups, in kernel ", k.name));
        line(detail::cat("{ int ", u.name, " = ", lang.local_id, ";")), ++depth, braces.push_back(true);
        break;
      case UOps::GROUP:
        group(u, i, v[0]);
        break;
    }
  }

  std::string function() {
    signature();
    names.assign(k.uops.size(), {});
    if (lang.flat_global) flat = flat_loops(k);
    for (std::size_t i = 0; i < k.uops.size(); ++i) emit(i);
    return src + "}\n";
  }
};

}  // namespace

const std::string& c_prelude(const CStyleLanguage& lang) { return lang.prelude; }

std::string render_cstyle_function(const LinearizedKernel& k, const CStyleLanguage& lang) {
  return Renderer{k, lang, {}, 1, {}, {}, {}}.function();
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
