// Fuzzer for IEEE semantics across devices: random short programs (elementwise ops with constants
// and with each other, reductions, movement, selects) over small float32 tensors, run on CPU (the
// reference) and on each compiled device, compared element by element. A quarter of the programs
// read inputs sprinkled with NaN, +-inf, +-0, subnormals and values near float32's limits, so a fold
// that is valid only for integers or finite values (x * 0 -> 0, x - x -> 0, (a + b) - a -> b, a
// reassociated product that no longer overflows) shows as a difference. Programs whose sums add
// finite values past 1e4 are left out: their float32 sums overflow or cancel by the order of the
// additions, which each device chooses (the CPU device sums in double).
//
// Each device is a test case of its own ([fuzz_programs_clang], _llvm, _opencl, _cuda; a missing
// device is skipped with a message). The CI counts keep each case under a minute (PoCL's kernel
// builds are the slowest); METAGRAD_FUZZ_PROGRAMS=n runs n programs on each device instead,
// METAGRAD_FUZZ_SEED another seed (fuzz_common.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "metagrad/tensor.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The values that trip folds: non-finite, signed zeros, subnormals, the largest and tiny normals.
const std::vector<float> kSpecial = {kNaN,   kInf,    -kInf,   0.f,      -0.f,     1e-45f, -1e-45f,
                                     1e-40f, -3e-39f, 3.4e38f, -3.4e38f, 1.2e-38f, 1e30f,  -1e-30f};
// Constants a program applies (with each op): the identities and absorbing values first.
const std::vector<float> kConstants = {0.f, -0.f,  1.f,    -1.f, 0.5f,  2.f,
                                       3.f, 1e30f, 1e-30f, kInf, -kInf, kNaN};

enum Kind {
  UNARY,
  CONST_OP,
  SELF_OP,
  OTHER_OP,
  REDUCE,
  PERMUTE,
  FLIP,
  PAD,
  SHRINK,
  EXPAND,
  WHERE,
  REALIZE,
  KINDS
};

// One step of a program: its kind and the choices it made (ranges depend on the shape when it ran,
// so a recipe replays only from the same inputs' shapes, which it always does).
struct Step {
  Kind kind;
  int op;                 // which unary / binary / reduce op
  float c;                // the constant
  std::vector<i64> axes;  // reduce axes, permutation, pad or shrink amounts, expanded sizes
  bool flag;              // keepdim; the constant on the left
};

const char* const kUnary[] = {"neg",        "exp2", "log2", "sin",     "sqrt",
                              "reciprocal", "relu", "abs",  "sigmoid", "square"};
const char* const kBinary[] = {"+", "-", "*", "/", "maximum", "minimum", "pow"};
const char* const kReduce[] = {"sum", "max", "min", "mean"};

Tensor unary(int op, const Tensor& x) {
  switch (op) {
    case 0:
      return -x;
    case 1:
      return x.exp2();
    case 2:
      return x.log2();
    case 3:
      return x.sin();
    case 4:
      return x.sqrt();
    case 5:
      return x.reciprocal();
    case 6:
      return x.relu();
    case 7:
      return x.abs();
    case 8:
      return x.sigmoid();
    default:
      return x * x;
  }
}

Tensor binary(int op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case 0:
      return a + b;
    case 1:
      return a - b;
    case 2:
      return a * b;
    case 3:
      return a / b;
    case 4:
      return a.maximum(b);
    case 5:
      return a.minimum(b);
    default:
      return a.pow(b);
  }
}

// Whether the sign of a zero result is defined for the program (IEEE leaves max(+0, -0) either
// zero; pow, sqrt and the transcendental functions' zeros follow C99 Annex F, where the CPU device
// and the compiled ones agree).
bool keeps_zero_sign(const Step& s) {
  if (s.kind == UNARY) return s.op != 6;  // relu is a max
  if (s.kind == CONST_OP || s.kind == SELF_OP || s.kind == OTHER_OP) return s.op != 4 && s.op != 5;
  if (s.kind == REDUCE) return s.op == 0 || s.op == 3;
  return true;
}

struct Program {
  std::vector<Step> steps;
  std::string text;  // the program as code, for a failure's message
  bool zero_sign = true;
  bool order_sensitive = false;
};

// A sum's float32 partial sums overflow or cancel differently in another order (the CPU device sums
// in double, a device in its own order): a program that sums finite values past 1e4 is left out.
bool has_big(const Tensor& t) {
  for (float v : t.to_vector<float>())
    if (std::isfinite(v) && std::abs(v) > 1e4f) return true;
  return false;
}

std::string list(const std::vector<i64>& v) {
  std::string r = "{";
  for (std::size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "}";
}

Tensor reduce(const Step& s, const Tensor& x) {
  Axes a(s.axes);
  switch (s.op) {
    case 0:
      return x.sum(a, s.flag);
    case 1:
      return x.max(a, s.flag);
    case 2:
      return x.min(a, s.flag);
    default:
      return x.mean(a, s.flag);
  }
}

// Applies s to x (b: the second input, of the inputs' shape, read as its sum); `text` (where given)
// gets the step as code.
Tensor apply(const Step& s, const Tensor& x, const Tensor& b, std::string* text) {
  std::ostringstream t;
  auto pairs = [&] {
    std::vector<std::pair<i64, i64>> p;
    for (std::size_t i = 0; i + 1 < s.axes.size(); i += 2) p.emplace_back(s.axes[i], s.axes[i + 1]);
    return p;
  };
  const char* side = s.flag ? "(c, y)" : "(y, c)";
  switch (s.kind) {
    case UNARY:
      t << "y = " << kUnary[s.op] << "(y)";
      break;
    case CONST_OP:
      t << "y = " << kBinary[s.op] << side << ", c = " << s.c;
      break;
    case SELF_OP:
      t << "y = " << kBinary[s.op] << "(y, y)";
      break;
    case OTHER_OP:
      t << "y = " << kBinary[s.op] << (s.flag ? "(b.sum(), y)" : "(y, b.sum())");
      break;
    case REDUCE:
      t << "y = y." << kReduce[s.op] << "(" << list(s.axes) << ", " << s.flag << ")";
      break;
    case PERMUTE:
      t << "y = y.permute(" << list(s.axes) << ")";
      break;
    case FLIP:
      t << "y = y.flip(" << list(s.axes) << ")";
      break;
    case PAD:
      t << "y = y.pad(pairs of " << list(s.axes) << ")";
      break;
    case SHRINK:
      t << "y = y.shrink(pairs of " << list(s.axes) << ")";
      break;
    case EXPAND:
      t << "y = y.expand(" << list(s.axes) << ")";
      break;
    case WHERE:
      t << "y = (y > c).where(y, b.sum() * c), c = " << s.c;
      break;
    default:
      t << "y.realize()";
      break;
  }
  if (text) *text += t.str() + ";\n";
  switch (s.kind) {
    case UNARY:
      return unary(s.op, x);
    case CONST_OP:
      return s.flag ? binary(s.op, x.scalar_like(s.c), x) : binary(s.op, x, x.scalar_like(s.c));
    case SELF_OP:
      return binary(s.op, x, x);
    case OTHER_OP:
      return s.flag ? binary(s.op, b.sum(), x) : binary(s.op, x, b.sum());
    case REDUCE:
      return reduce(s, x);
    case PERMUTE:
      return x.permute(s.axes);
    case FLIP:
      return x.flip(Axes(s.axes));
    case PAD:
      return x.pad(pairs());
    case SHRINK:
      return x.shrink(pairs());
    case EXPAND:
      return x.expand(s.axes);
    case WHERE:
      return x.gt(x.scalar_like(s.c)).where(x, b.sum() * s.c);
    default:
      return Tensor(x).realize();
  }
}

// A random step valid for x's shape.
Step random_step(fuzz::Rng& r, const Tensor& x) {
  std::vector<i64> shape(x.shape().begin(), x.shape().end());
  auto rank = static_cast<i64>(shape.size());
  Step s{static_cast<Kind>(r.in(0, KINDS - 1)), 0, r.pick(kConstants), {}, r.chance(50)};
  switch (s.kind) {
    case UNARY:
      s.op = static_cast<int>(r.in(0, 9));
      break;
    case CONST_OP:
    case SELF_OP:
    case OTHER_OP:
      s.op = static_cast<int>(r.in(0, 6));
      break;
    case REDUCE:
      s.op = static_cast<int>(r.in(0, 3));
      for (i64 d = 0; d < rank; ++d)
        if (r.chance(50)) s.axes.push_back(d);
      if (s.axes.empty() && rank) s.axes.push_back(r.in(0, rank - 1));
      if (!s.flag && static_cast<i64>(s.axes.size()) == rank) s.flag = true;  // keep a rank to work on
      break;
    case PERMUTE:
      for (i64 d = 0; d < rank; ++d) s.axes.push_back(d);
      for (i64 d = rank - 1; d > 0; --d)
        std::swap(s.axes[static_cast<std::size_t>(d)], s.axes[static_cast<std::size_t>(r.in(0, d))]);
      break;
    case FLIP:
      for (i64 d = 0; d < rank; ++d)
        if (r.chance(50)) s.axes.push_back(d);
      break;
    case PAD:
      for (i64 d = 0; d < rank; ++d) s.axes.push_back(r.in(0, 1)), s.axes.push_back(r.in(0, 1));
      break;
    case SHRINK:
      for (i64 n : shape) {
        i64 lo = r.in(0, std::max<i64>(0, n / 2 - 1));
        s.axes.push_back(lo), s.axes.push_back(r.in(lo + 1, n));
      }
      break;
    case EXPAND:
      for (i64 n : shape) s.axes.push_back(n == 1 && r.chance(50) ? r.in(2, 3) : n);
      break;
    default:
      break;
  }
  return s;
}

// Float32 values: ordinary ones in [-4, 4], and, in a quarter of the programs, specials in about a
// third of the elements.
std::vector<float> random_input(fuzz::Rng& r, i64 n, bool special) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v)
    x = special && r.chance(35) ? r.pick(kSpecial) : static_cast<float>(r.in(-4000, 4000)) / 1000.f;
  return v;
}

// CPU and the device agree: NaN with NaN, infinities and zeros exactly (their sign where the program
// defines it), other values to float32 rounding through a few ops.
bool agree(float got, float want, bool zero_sign) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  if (want == 0 && got == 0) return !zero_sign || std::signbit(got) == std::signbit(want);
  return std::abs(got - want) <= 1e-5f + 2e-4f * std::abs(want);
}

void fuzz_device(const std::string& dev, long ci_programs, std::uint64_t salt) {
  try {
    Device::get(dev);
  } catch (const std::exception& e) {
    WARN(dev << " is not available, skipped: " << e.what());
    return;
  }
  std::uint64_t seed = fuzz::seed(0x1eee754);
  fuzz::Rng rng(seed + salt);  // each device its own programs
  long programs = fuzz::env_long("METAGRAD_FUZZ_PROGRAMS", ci_programs);
  for (long p = 0; p < programs; ++p) {
    std::vector<i64> shape;
    for (i64 d = 0, rank = rng.in(1, 4); d < rank; ++d)
      shape.push_back(rng.pick(std::vector<i64>{1, 2, 3, 4, 16}));
    i64 n = 1;
    for (i64 s : shape) n *= s;
    bool special = rng.chance(25);
    std::vector<float> va = random_input(rng, n, special), vb = random_input(rng, n, special);
    Dims dims(shape);
    Program prog;
    prog.text = "y = Tensor(a, " + to_string(dims) + "), b likewise;\n";
    Tensor y = Tensor(va, dims), b = Tensor(vb, dims);
    bool b_big = has_big(b);
    for (i64 k = 0, len = rng.in(1, 6); k < len; ++k) {
      Step s = random_step(rng, y);
      if ((s.kind == REDUCE && (s.op == 0 || s.op == 3) && has_big(y)) ||
          ((s.kind == OTHER_OP || s.kind == WHERE) && b_big))
        prog.order_sensitive = true;
      y = apply(s, y, b, &prog.text);
      prog.steps.push_back(s);
      prog.zero_sign = prog.zero_sign && keeps_zero_sign(s);
    }
    if (prog.order_sensitive) continue;
    std::vector<float> want = y.to_vector<float>();
    Tensor z = Tensor(va, dims, {.device = dev}), bd = Tensor(vb, dims, {.device = dev});
    for (const Step& s : prog.steps) z = apply(s, z, bd, nullptr);
    std::vector<float> got = z.to_vector<float>();
    INFO(dev << ", program " << p << " (seed " << seed << "), inputs " << (special ? "with" : "without")
             << " specials:\n"
             << prog.text);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (agree(got[i], want[i], prog.zero_sign)) continue;
      std::ostringstream in;
      for (std::size_t j = 0; j < va.size(); ++j) in << (j ? ", " : "") << va[j];
      FAIL("element " << i << ": " << got[i] << " on " << dev << ", " << want[i] << " on CPU; a = {"
                      << in.str() << "}");
    }
  }
}

}  // namespace

TEST_CASE("fuzz: random programs with NaN, inf, -0 and subnormals agree with CPU on CLANG",
          "[fuzz_programs_clang]") {
  fuzz_device("CLANG", 300, 1);
}
TEST_CASE("fuzz: random programs with NaN, inf, -0 and subnormals agree with CPU on LLVM",
          "[fuzz_programs_llvm]") {
  fuzz_device("LLVM", 400, 2);
}
TEST_CASE("fuzz: random programs with NaN, inf, -0 and subnormals agree with CPU on OPENCL",
          "[fuzz_programs_opencl]") {
  fuzz_device("OPENCL", 60, 3);
}
TEST_CASE("fuzz: random programs with NaN, inf, -0 and subnormals agree with CPU on CUDA",
          "[fuzz_programs_cuda]") {
  fuzz_device("CUDA", 200, 4);
}
