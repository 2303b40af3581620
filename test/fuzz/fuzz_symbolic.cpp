// Fuzzer for the symbolic algebra: random expressions over variables with random (also negative)
// bounds, built with the simplifying builders and checked against plain integer arithmetic with
// Python's floor semantics at random assignments: the value must match and lie in the node's
// [min, max]. Sums of terms with coefficients above the divisor (and negative ones) under % and //
// are generated often, so the modulo-of-a-sum rule ((x*7 + y) % 6 = (x + y) % 6) is exercised.
#include <catch2/catch.hpp>
#include <functional>
#include <map>

#include "fuzz_common.hpp"
#include "metagrad/shape/symbolic.hpp"

using namespace metagrad::symbolic;
using i64 = std::int64_t;

namespace {

struct Var {
  std::string name;
  i64 lo, hi;
};

// An expression as a node and as a reference function of the assignment.
struct Expr {
  Node node;
  std::function<i64(const std::vector<i64>&)> ref;
  std::string text;
};

Expr gen(fuzz::Rng& r, const std::vector<Var>& vars, int depth) {
  int kind = depth <= 0 ? static_cast<int>(r.in(0, 1)) : static_cast<int>(r.in(0, 7));
  switch (kind) {
    case 0: {
      auto k = static_cast<std::size_t>(r.in(0, static_cast<i64>(vars.size()) - 1));
      const Var& v = vars[k];
      return {Variable(v.name, v.lo, v.hi), [k](const std::vector<i64>& a) { return a[k]; }, v.name};
    }
    case 1: {
      i64 c = r.in(-9, 9);
      return {c, [c](const std::vector<i64>&) { return c; }, std::to_string(c)};
    }
    case 2:
    case 3: {  // a sum of scaled terms, coefficients often above later divisors
      std::vector<Expr> parts;
      for (i64 n = r.in(2, 4); n-- > 0;) {
        Expr e = gen(r, vars, depth - 1);
        i64 c = r.chance(70) ? r.in(-20, 20) : 1;
        parts.push_back({e.node * c, [f = e.ref, c](const std::vector<i64>& a) { return f(a) * c; },
                         "(" + e.text + ")*" + std::to_string(c)});
      }
      std::vector<Node> nodes;
      std::string text;
      for (const Expr& e : parts) nodes.push_back(e.node), text += (text.empty() ? "" : " + ") + e.text;
      auto refs = parts;
      return {Node::sum(nodes),
              [refs](const std::vector<i64>& a) {
                i64 s = 0;
                for (const Expr& e : refs) s += e.ref(a);
                return s;
              },
              "(" + text + ")"};
    }
    case 4:
    case 5: {
      Expr e = gen(r, vars, depth - 1);
      i64 d = r.pick(std::vector<i64>{1, 2, 3, 4, 5, 6, 7, 8, 12, 16});
      return {e.node % d, [f = e.ref, d](const std::vector<i64>& a) { return floormod(f(a), d); },
              "(" + e.text + ")%" + std::to_string(d)};
    }
    case 6: {
      Expr e = gen(r, vars, depth - 1);
      i64 d = r.pick(std::vector<i64>{1, 2, 3, 4, 6, 7, 8});
      return {e.node / d, [f = e.ref, d](const std::vector<i64>& a) { return floordiv(f(a), d); },
              "(" + e.text + ")//" + std::to_string(d)};
    }
    default: {
      Expr x = gen(r, vars, depth - 1), y = gen(r, vars, depth - 1);
      return {x.node + y.node, [f = x.ref, g = y.ref](const std::vector<i64>& a) { return f(a) + g(a); },
              "(" + x.text + " + " + y.text + ")"};
    }
  }
}

}  // namespace

TEST_CASE("fuzz: symbolic expressions keep their values and bounds", "[fuzz_symbolic]") {
  const std::uint64_t seed = fuzz::seed(0x5b01c);
  const long n = fuzz::inputs(100000);
  fuzz::Rng r(seed);
  long mods = 0, evaluations = 0;
  for (long i = 0; i < n; ++i) {
    std::vector<Var> vars;
    for (i64 k = r.in(1, 3); k-- > 0;) {
      i64 lo = r.chance(30) ? r.in(-8, 0) : 0;
      vars.push_back({std::string(1, static_cast<char>('a' + vars.size())), lo, lo + r.in(1, 12)});
    }
    Expr e = gen(r, vars, static_cast<int>(r.in(1, 3)));
    mods += e.node.render().find('%') != std::string::npos;
    for (int k = 0; k < 4; ++k) {
      std::vector<i64> a;
      std::map<std::string, i64> m;
      for (const Var& v : vars) a.push_back(r.in(v.lo, v.hi)), m[v.name] = a.back();
      i64 want = e.ref(a), got = e.node.evaluate(m);
      ++evaluations;
      if (got != want || want < e.node.min() || want > e.node.max()) {
        std::string at;
        for (const Var& v : vars)
          at += v.name + " in [" + std::to_string(v.lo) + ", " + std::to_string(v.hi) +
                "] = " + std::to_string(m[v.name]) + "; ";
        FAIL("seed " << seed << ", input " << i << ": " << e.text << " built as " << e.node.render() << " ["
                     << e.node.min() << ", " << e.node.max() << "] gives " << got << ", want " << want
                     << " at " << at);
      }
    }
  }
  CAPTURE(n, mods, evaluations);
  REQUIRE(mods >= n / 10);
}
