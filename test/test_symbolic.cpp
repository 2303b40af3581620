// The symbolic index algebra: the walkthrough's example, one case per simplification rule (checked by
// rendering and by value), a seeded property test over thousands of random expressions against a
// reference evaluator written here with Python's semantics, and the errors at the door.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "metagrad/shape/symbolic.hpp"

using namespace metagrad::symbolic;
using Catch::Matchers::Contains;
using i64 = std::int64_t;
using Env = std::map<std::string, i64>;

namespace {

// The reference semantics, written independently of the library's floordiv/floormod: C++ `/`
// truncates toward zero, so a non-exact negative quotient is one too high. Divisors are positive.
i64 py_floordiv(i64 x, i64 d) {
  i64 q = x / d;
  if (q * d > x) --q;
  return q;
}
i64 py_mod(i64 x, i64 d) { return x - py_floordiv(x, d) * d; }

// Calls the reference with as many values as it takes.
template <class F>
i64 call_ref(F& f, const std::vector<i64>& v) {
  if constexpr (std::is_invocable_v<F&>) {
    return f();
  } else if constexpr (std::is_invocable_v<F&, i64>) {
    return f(v.at(0));
  } else if constexpr (std::is_invocable_v<F&, i64, i64>) {
    return f(v.at(0), v.at(1));
  } else {
    return f(v.at(0), v.at(1), v.at(2));
  }
}

// Checks n's rendering, and for every assignment of `vars` inside their bounds that n evaluates to
// ref(values...) and lies in [n.min(), n.max()].
template <class F>
void check(const Node& n, const std::string& render, const std::vector<Node>& vars, F ref) {
  CHECK(n.render() == render);
  std::vector<const Node*> vs;
  for (const Node& v : vars) {
    REQUIRE(v.is<Variable>());
    vs.push_back(&v);
  }
  std::vector<i64> val;
  for (const Node* v : vs) val.push_back(v->min());
  int failures = 0;
  for (;;) {
    Env env;
    std::string where;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      env[vs[i]->name()] = val[i];
      where += vs[i]->name() + "=" + std::to_string(val[i]) + " ";
    }
    const i64 want = call_ref(ref, val);
    const i64 got = n.evaluate(env);
    if (got != want || got < n.min() || got > n.max()) {
      INFO(n.render() << " at " << where << "in [" << n.min() << ", " << n.max() << "]");
      CHECK(got == want);
      CHECK(n.min() <= got);
      CHECK(got <= n.max());
      if (++failures == 3) return;
    }
    std::size_t i = 0;
    for (; i < vs.size(); ++i) {
      if (val[i] < vs[i]->max()) {
        ++val[i];
        break;
      }
      val[i] = vs[i]->min();
    }
    if (i == vs.size()) return;
  }
}

template <class F>
std::string invalid_argument_what(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) { return e.what(); }
  return "<no std::invalid_argument was thrown>";
}

}  // namespace

TEST_CASE("symbolic: the walkthrough's example (section 6)", "[symbolic]") {
  Node a = Variable("a", 0, 10);
  Node b = Variable("b", 0, 10);
  CHECK((a * 10).min() == 0);
  CHECK((a * 10).max() == 100);
  CHECK((a + b).min() == 0);
  CHECK((a + b).max() == 20);
  check((a + b * 10) % 10, "(a%10)", {a, b}, [](i64 x, i64 y) { return py_mod(x + y * 10, 10); });
  Node e = (a * 40 + b) / 20;
  check(e, "(a*2)", {a, b}, [](i64 x, i64 y) { return py_floordiv(x * 40 + y, 20); });
  CHECK(e.min() == 0);
  CHECK(e.max() == 20);
  CHECK(e.is<MulNode>());
}

TEST_CASE("symbolic: rendering conventions", "[symbolic]") {
  Node x = Variable("x", 0, 9);
  Node y = Variable("y", 0, 9);
  CHECK(x.render() == "x");
  CHECK(Node(-3).render() == "-3");
  CHECK((x * 3).render() == "(x*3)");
  CHECK((x / 3).render() == "(x//3)");
  CHECK((x % 3).render() == "(x%3)");
  CHECK((x < 3).render() == "(x<3)");
  CHECK((x * -3).render() == "(x*-3)");
  // Sums and ands sort their terms' renderings as strings: '(' < '-' < digits < letters.
  CHECK((y + x * 2 - 5).render() == "((x*2)+-5+y)");
  CHECK(Node::ands({y < 4, x < 3}).render() == "((x<3) and (y<4))");
  CHECK((x * 2).str() == (x * 2).render());
}

TEST_CASE("symbolic: constant folding", "[symbolic]") {
  check(Node(3) + 4, "7", {}, [] { return i64{7}; });
  check(Node(3) - 10, "-7", {}, [] { return i64{-7}; });
  check(Node(2) * -3, "-6", {}, [] { return i64{-6}; });
  check(Node(-7) / 2, "-4", {}, [] { return py_floordiv(-7, 2); });
  check(Node(7) / 2, "3", {}, [] { return i64{3}; });
  check(Node(-7) % 3, "2", {}, [] { return py_mod(-7, 3); });
  check(Node(7) % 3, "1", {}, [] { return i64{1}; });
  check(Node(3) < 4, "1", {}, [] { return i64{1}; });
  check(Node(4) < 4, "0", {}, [] { return i64{0}; });
  check(Node::ands({3, -1}), "1", {}, [] { return i64{1}; });
  check(Node::ands({3, 0}), "0", {}, [] { return i64{0}; });
  check(Node::sum({1, 2, -3, 4}), "4", {}, [] { return i64{4}; });
  check(Node::sum({}), "0", {}, [] { return i64{0}; });
  CHECK((Node(3) + 4).is_num());
  CHECK((Node(-7) / 2).b() == -4);

  Node x = Variable("x", -5, 5);
  check(x + 0, "x", {x}, [](i64 v) { return v; });
  check(x * 1, "x", {x}, [](i64 v) { return v; });
  check(x * 0, "0", {x}, [](i64) { return i64{0}; });
  check(x - x, "0", {x}, [](i64) { return i64{0}; });
  check(x / 1, "x", {x}, [](i64 v) { return v; });
  check(x % 1, "0", {x}, [](i64) { return i64{0}; });
  check((x + 3) + -3, "x", {x}, [](i64 v) { return v; });
  check((x + 3) * 2 - 6, "(x*2)", {x}, [](i64 v) { return (v + 3) * 2 - 6; });
  check(-(-x), "x", {x}, [](i64 v) { return v; });
}

TEST_CASE("symbolic: sums flatten and merge like terms", "[symbolic]") {
  Node x = Variable("x", -3, 4);
  Node y = Variable("y", 0, 5);
  check(x * 2 + x * 3, "(x*5)", {x}, [](i64 a) { return a * 5; });
  CHECK((x * 2 + x * 3).min() == -15);
  CHECK((x * 2 + x * 3).max() == 20);
  check(x + x, "(x*2)", {x}, [](i64 a) { return a * 2; });
  check((x + y) + (x + 3), "((x*2)+3+y)", {x, y}, [](i64 a, i64 b) { return a + b + a + 3; });
  check(Node::sum({x, Node::sum({y, 1}), 2}), "(3+x+y)", {x, y}, [](i64 a, i64 b) { return a + b + 3; });
  check(x * 2 + y - x * 2, "y", {x, y}, [](i64 a, i64 b) { return a * 2 + b - a * 2; });
  check(x + y - x, "y", {x, y}, [](i64 a, i64 b) { return a + b - a; });
  check((x + y) - (x + y), "0", {x, y}, [](i64, i64) { return i64{0}; });
  // Like terms are found by rendering, so compound bases merge too.
  check(x / 2 + (x / 2) * 3, "((x//2)*4)", {x}, [](i64 a) { return py_floordiv(a, 2) * 4; });
  check((x % 3) * 2 - (x % 3), "(x%3)", {x}, [](i64 a) { return py_mod(a, 3); });
  Node s = x * 2 + y * 3 - 4;
  CHECK(s.is<SumNode>());
  CHECK(s.nodes().size() == 3);
  CHECK(s.min() == -10);
  CHECK(s.max() == 19);
}

TEST_CASE("symbolic: multiplying a sum distributes", "[symbolic]") {
  Node x = Variable("x", -3, 4);
  Node y = Variable("y", 0, 5);
  check((x + y + 2) * 3, "((x*3)+(y*3)+6)", {x, y}, [](i64 a, i64 b) { return (a + b + 2) * 3; });
  check(3 * (x + y + 2), "((x*3)+(y*3)+6)", {x, y}, [](i64 a, i64 b) { return (a + b + 2) * 3; });
  check(((x + 1) * 2) * 3, "((x*6)+6)", {x}, [](i64 a) { return (a + 1) * 6; });
  check(-(x - y), "((x*-1)+y)", {x, y}, [](i64 a, i64 b) { return -(a - b); });
  check((x * 2 + y) * -2, "((x*-4)+(y*-2))", {x, y}, [](i64 a, i64 b) { return (a * 2 + b) * -2; });
  CHECK(((x + y + 2) * 3).is<SumNode>());
}

TEST_CASE("symbolic: (x*c)//c is x, and a multiple of c divides exactly", "[symbolic]") {
  Node x = Variable("x", -6, 9);
  check((x * 4) / 4, "x", {x}, [](i64 a) { return py_floordiv(a * 4, 4); });
  check((x * 12) / 4, "(x*3)", {x}, [](i64 a) { return py_floordiv(a * 12, 4); });
  check((x * -6) / 3, "(x*-2)", {x}, [](i64 a) { return py_floordiv(a * -6, 3); });
  check((x * -5) / 5, "(x*-1)", {x}, [](i64 a) { return py_floordiv(a * -5, 5); });
  // A partial common factor reduces both sides: (6x)//4 = (3x)//2.
  check((x * 6) / 4, "((x*3)//2)", {x}, [](i64 a) { return py_floordiv(a * 6, 4); });
  check((x * 4) % 4, "0", {x}, [](i64 a) { return py_mod(a * 4, 4); });
  check((x * -8) % 4, "0", {x}, [](i64 a) { return py_mod(a * -8, 4); });
}

TEST_CASE("symbolic: div and mod of a sum drop or pull out terms the bounds allow", "[symbolic]") {
  // The seed's examples: b*10 is a whole multiple and leaves the modulo; b in 0..10 cannot move
  // (a*40 + b)//20 off 2a.
  Node a = Variable("a", 0, 10);
  Node b = Variable("b", 0, 10);
  check((a + b * 10) % 10, "(a%10)", {a, b}, [](i64 p, i64 q) { return py_mod(p + q * 10, 10); });
  check((a * 40 + b) / 20, "(a*2)", {a, b}, [](i64 p, i64 q) { return py_floordiv(p * 40 + q, 20); });

  Node x = Variable("x", -3, 4);
  Node y = Variable("y", 0, 9);
  Node r = Variable("r", 0, 3);
  // Multiples of the divisor are pulled out of the division; the remainder is divided alone.
  check((x * 4 + y) / 4, "((y//4)+x)", {x, y}, [](i64 p, i64 q) { return py_floordiv(p * 4 + q, 4); });
  // ... and when the remainder stays inside one bucket it is gone.
  check((x * 4 + r) / 4, "x", {x, r}, [](i64 p, i64 q) { return py_floordiv(p * 4 + q, 4); });
  check((x * 4 + r + 8) / 4, "(2+x)", {x, r}, [](i64 p, i64 q) { return py_floordiv(p * 4 + q + 8, 4); });
  check((x * 8 + y * 4 + r) / 4, "((x*2)+y)", {x, y, r},
        [](i64 p, i64 q, i64 s) { return py_floordiv(p * 8 + q * 4 + s, 4); });
  // Constants split into quotient and remainder by floor semantics: -5 = -2*4 + 3.
  check((x * 4 + y - 5) / 4, "(((3+y)//4)+-2+x)", {x, y},
        [](i64 p, i64 q) { return py_floordiv(p * 4 + q - 5, 4); });
  // Modulo drops whole multiples and reduces constants into [0, c).
  check((x * 4 + y + 5) % 4, "((1+y)%4)", {x, y}, [](i64 p, i64 q) { return py_mod(p * 4 + q + 5, 4); });
  check((x * 4 + r) % 4, "r", {x, r}, [](i64 p, i64 q) { return py_mod(p * 4 + q, 4); });
  check((x * -12 + y) % 6, "(y%6)", {x, y}, [](i64 p, i64 q) { return py_mod(p * -12 + q, 6); });
  // An inner x%k with c | k contributes x mod c.
  check((x % 6 + y) % 3, "((x+y)%3)", {x, y}, [](i64 p, i64 q) { return py_mod(py_mod(p, 6) + q, 3); });
}

TEST_CASE("symbolic: gcd factoring in div and mod", "[symbolic]") {
  Node x = Variable("x", 0, 9);
  Node y = Variable("y", -2, 5);
  check((x * 4 + y * 6) / 2, "((x*2)+(y*3))", {x, y},
        [](i64 p, i64 q) { return py_floordiv(p * 4 + q * 6, 2); });
  check((x * 4 + y * 6) / 4, "(((y*3)//2)+x)", {x, y},
        [](i64 p, i64 q) { return py_floordiv(p * 4 + q * 6, 4); });
  // No term is a multiple of 8, but 2 divides everything: (6x+4y)//8 = (3x+2y)//4.
  check((x * 6 + y * 4) / 8, "((((x*3)//2)+y)//2)", {x, y},
        [](i64 p, i64 q) { return py_floordiv(p * 6 + q * 4, 8); });
  check((x * 4) % 6, "(((x*2)%3)*2)", {x}, [](i64 p) { return py_mod(p * 4, 6); });
  check((x * 9) % 6, "((x%2)*3)", {x}, [](i64 p) { return py_mod(p * 9, 6); });
  check((x * 4 + y * 6) % 8, "((((x*2)+(y*3))%4)*2)", {x, y},
        [](i64 p, i64 q) { return py_mod(p * 4 + q * 6, 8); });
  // A coefficient outside [0, c) is reduced first: 7x = x (mod 6), -1*x = 5x (mod 6).
  check((x * 7) % 6, "(x%6)", {x}, [](i64 p) { return py_mod(p * 7, 6); });
  check((x * -1) % 6, "((x*5)%6)", {x}, [](i64 p) { return py_mod(-p, 6); });
  // gcd factoring of a comparison: 2x + 4y < 7 iff x + 2y < 4.
  check((x * 2 + y * 4) < 7, "(((y*2)+x)<4)", {x, y}, [](i64 p, i64 q) { return i64{p * 2 + q * 4 < 7}; });
}

TEST_CASE("symbolic: nested div/div and mod/mod", "[symbolic]") {
  Node x = Variable("x", -20, 50);
  check((x / 2) / 3, "(x//6)", {x}, [](i64 p) { return py_floordiv(py_floordiv(p, 2), 3); });
  check(((x / 2) / 3) / 4, "(x//24)", {x},
        [](i64 p) { return py_floordiv(py_floordiv(py_floordiv(p, 2), 3), 4); });
  check((x % 6) % 3, "(x%3)", {x}, [](i64 p) { return py_mod(py_mod(p, 6), 3); });
  check((x % 12) % 4 % 2, "(x%2)", {x}, [](i64 p) { return py_mod(py_mod(py_mod(p, 12), 4), 2); });
  // (x%3) already lies in [0, 3), so a wider modulo leaves it alone.
  check((x % 3) % 6, "(x%3)", {x}, [](i64 p) { return py_mod(py_mod(p, 3), 6); });
  // 4 does not divide 6: (x%6)%4 is not x%4, and must stay nested.
  check((x % 6) % 4, "((x%6)%4)", {x}, [](i64 p) { return py_mod(py_mod(p, 6), 4); });
}

TEST_CASE("symbolic: mod and div resolved by bounds", "[symbolic]") {
  Node x = Variable("x", 0, 5);
  check(x % 6, "x", {x}, [](i64 p) { return py_mod(p, 6); });
  check(x / 6, "0", {x}, [](i64 p) { return py_floordiv(p, 6); });
  Node hi = Variable("hi", 6, 11);
  check(hi % 6, "(-6+hi)", {hi}, [](i64 p) { return py_mod(p, 6); });
  check(hi / 6, "1", {hi}, [](i64 p) { return py_floordiv(p, 6); });
  Node neg = Variable("n", -3, -1);
  check(neg % 3, "(3+n)", {neg}, [](i64 p) { return py_mod(p, 3); });
  check(neg / 3, "-1", {neg}, [](i64 p) { return py_floordiv(p, 3); });
  Node z = Variable("z", -3, 4);
  check(z / 5, "(z//5)", {z}, [](i64 p) { return py_floordiv(p, 5); });
  CHECK((z / 5).min() == -1);
  CHECK((z / 5).max() == 0);
  check(z % 5, "(z%5)", {z}, [](i64 p) { return py_mod(p, 5); });
  CHECK((z % 5).min() == 0);
  CHECK((z % 5).max() == 4);
  check((z + 3) % 8, "(3+z)", {z}, [](i64 p) { return py_mod(p + 3, 8); });
}

TEST_CASE("symbolic: LtNode and AndNode resolved by bounds", "[symbolic]") {
  Node x = Variable("x", 0, 5);
  Node y = Variable("y", -2, 6);
  check(x < 6, "1", {x}, [](i64 p) { return i64{p < 6}; });
  check(x < 0, "0", {x}, [](i64 p) { return i64{p < 0}; });
  check(x < 3, "(x<3)", {x}, [](i64 p) { return i64{p < 3}; });
  CHECK((x < 3).min() == 0);
  CHECK((x < 3).max() == 1);
  // Constants move to the right, positive factors divide out (rounding up).
  check(x * 3 < 7, "(x<3)", {x}, [](i64 p) { return i64{p * 3 < 7}; });
  check(x + 2 < 5, "(x<3)", {x}, [](i64 p) { return i64{p + 2 < 5}; });
  check(x < y, "(((y*-1)+x)<0)", {x, y}, [](i64 p, i64 q) { return i64{p < q}; });
  check(x >= 2, "((x*-1)<-1)", {x}, [](i64 p) { return i64{p >= 2}; });
  check(x >= 0, "1", {x}, [](i64 p) { return i64{p >= 0}; });
  check(x + 10 < y, "0", {x, y}, [](i64 p, i64 q) { return i64{p + 10 < q}; });

  check(Node::ands({x < 6, y < 3}), "(y<3)", {x, y}, [](i64 p, i64 q) { return i64{p < 6 && q < 3}; });
  check(Node::ands({x < 0, y < 3}), "0", {x, y}, [](i64 p, i64 q) { return i64{p < 0 && q < 3}; });
  check(Node::ands({x < 3, y < 3}), "((x<3) and (y<3))", {x, y},
        [](i64 p, i64 q) { return i64{p < 3 && q < 3}; });
  check(Node::ands({x < 3, x < 3}), "(x<3)", {x}, [](i64 p) { return i64{p < 3}; });
  check(Node::ands({Node::ands({x < 3, y < 3}), x < 3, x + 1}), "((x<3) and (y<3))", {x, y},
        [](i64 p, i64 q) { return i64{p < 3 && q < 3}; });
  check(Node::ands({}), "1", {}, [] { return i64{1}; });
  // Truth is "non-zero": a non-boolean entry stays, but the and itself is 0 or 1.
  check(Node::ands({y}), "(y)", {y}, [](i64 q) { return i64{q != 0}; });
  CHECK(Node::ands({y}).min() == 0);
  CHECK(Node::ands({y}).max() == 1);
}

TEST_CASE("symbolic: a Variable with min == max is a number", "[symbolic]") {
  Node k = Variable("k", 4, 4);
  CHECK(k.is_num());
  CHECK(k.is<NumNode>());
  CHECK(k.b() == 4);
  CHECK(k.render() == "4");
  CHECK(k.vars().empty());
  Node x = Variable("x", 0, 9);
  // A number multiplies, divides and compares like any constant.
  check(k * x, "(x*4)", {x}, [](i64 p) { return 4 * p; });
  check((x * 8) / k, "(x*2)", {x}, [](i64 p) { return py_floordiv(p * 8, 4); });
  check(x % k, "(x%4)", {x}, [](i64 p) { return py_mod(p, 4); });
  CHECK(Variable("m", -2, -2).render() == "-2");
  CHECK(NumNode(7).render() == "7");
}

TEST_CASE("symbolic: bad input throws std::invalid_argument naming the expression", "[symbolic]") {
  Node x = Variable("x", 0, 9);
  Node y = Variable("y", 0, 9);
  Node s = x * 2 + 1;
  REQUIRE(s.render() == "((x*2)+1)");

  CHECK_THROWS_AS(Variable("v", 5, 2), std::invalid_argument);
  CHECK_THAT(invalid_argument_what([] { return Variable("v", 5, 2); }),
             Contains("Variable(\"v\", 5, 2)") && Contains("min > max"));

  CHECK_THROWS_AS(s / 0, std::invalid_argument);
  CHECK_THAT(invalid_argument_what([&] { return s / 0; }), Contains("((x*2)+1) by 0"));
  CHECK_THAT(invalid_argument_what([&] { return s % 0; }), Contains("modulo of ((x*2)+1) by 0"));
  CHECK_THAT(invalid_argument_what([&] { return s / -3; }), Contains("((x*2)+1) by -3"));
  CHECK_THAT(invalid_argument_what([&] { return s % -3; }), Contains("((x*2)+1) by -3"));
  // Constant numerators and divisors that fold to zero are checked too.
  CHECK_THAT(invalid_argument_what([] { return Node(6) / -2; }), Contains("6 by -2"));
  CHECK_THAT(invalid_argument_what([] { return Node(6) % 0; }), Contains("6 by 0"));
  CHECK_THAT(invalid_argument_what([&] { return x / Variable("z", 0, 0); }), Contains("x by 0"));

  CHECK_THROWS_AS(s / y, std::invalid_argument);
  CHECK_THAT(invalid_argument_what([&] { return s / y; }), Contains("((x*2)+1) by y"));
  CHECK_THAT(invalid_argument_what([&] { return s % (y + 1); }), Contains("((x*2)+1) by (1+y)"));

  CHECK_THROWS_AS(s * y, std::invalid_argument);
  CHECK_THAT(invalid_argument_what([&] { return s * y; }), Contains("((x*2)+1)") && Contains("y"));
  CHECK_THAT(invalid_argument_what([&] { return (x < 3) * (y % 4); }),
             Contains("(x<3)") && Contains("(y%4)"));
  CHECK_THAT(invalid_argument_what([&] { return Node::sum({x, 1}) * x; }), Contains("(1+x) and x"));
  // Substituting an expression under a constant factor is fine: the factor is still a number.
  CHECK_NOTHROW((x * 3).substitute({{"x", y + 1}}));
}

TEST_CASE("symbolic: node kinds and their children", "[symbolic]") {
  Node x = Variable("x", 0, 9);
  Node y = Variable("y", 0, 9);
  CHECK(x.is<Variable>());
  CHECK(x.name() == "x");
  const Node m = x * 3, d = (x + y) / 4, md = x % 4, l = x < 4, s = x + y, an = Node::ands({x < 4, y < 4});
  CHECK(m.is<MulNode>());
  CHECK(m.a() == x);
  CHECK(m.b() == 3);
  CHECK(d.is<DivNode>());
  CHECK(d.a() == x + y);
  CHECK(d.b() == 4);
  CHECK(md.is<ModNode>());
  CHECK(l.is<LtNode>());
  CHECK(s.is<SumNode>());
  CHECK(s.nodes().size() == 2);
  CHECK(an.is<AndNode>());
  CHECK(an.nodes().size() == 2);
  CHECK(Node(5).b() == 5);
  // A handle is a value: copies share the node, and building never changes an operand.
  Node copy = s;
  Node bigger = copy + 1;
  CHECK(copy.render() == "(x+y)");
  CHECK(s.render() == "(x+y)");
  CHECK(bigger.render() == "(1+x+y)");
  // Asking a kind for what it lacks throws.
  CHECK_THROWS_AS(x.a(), std::logic_error);
  CHECK_THROWS_AS(x.b(), std::logic_error);
  CHECK_THROWS_AS(s.a(), std::logic_error);
  CHECK_THROWS_AS(s.b(), std::logic_error);
  CHECK_THROWS_AS(m.nodes(), std::logic_error);
  CHECK_THROWS_AS(m.name(), std::logic_error);
  CHECK_THROWS_AS(Node(1).a(), std::logic_error);
}

TEST_CASE("symbolic: evaluate needs every variable; vars lists distinct variables", "[symbolic]") {
  Node x = Variable("x", 0, 9);
  Node y = Variable("y", -4, 4);
  Node e = (x * 2 + y) % 5 + x / 3 + (y < 2);
  CHECK(e.evaluate({{"x", 7}, {"y", -3}}) == py_mod(7 * 2 - 3, 5) + 7 / 3 + 1);
  CHECK_THROWS_AS(e.evaluate({{"x", 1}}), std::invalid_argument);
  CHECK_THAT(invalid_argument_what([&] { return e.evaluate({{"x", 1}}); }), Contains("y"));
  CHECK_THROWS_AS(e.evaluate({}), std::invalid_argument);
  CHECK(Node(5).evaluate({}) == 5);

  const std::vector<Node> vs = e.vars();
  REQUIRE(vs.size() == 2);
  CHECK(vs[0].is<Variable>());
  CHECK(vs[1].is<Variable>());
  CHECK(((vs[0].name() == "x" && vs[1].name() == "y") || (vs[0].name() == "y" && vs[1].name() == "x")));
  CHECK((x * 3 + x % 4 + x / 2).vars().size() == 1);
  CHECK(Node(3).vars().empty());
  CHECK((x - x).vars().empty());
  CHECK(Variable("k", 2, 2).vars().empty());

  // Substitution rebuilds, so it simplifies again.
  check((x * 2 + y).substitute({{"x", Node(3)}}), "(6+y)", {y}, [](i64 q) { return 6 + q; });
  CHECK((x * 2 + y).substitute({{"x", 3}, {"y", -4}}).render() == "2");
  CHECK((x * 2 + y).substitute({}).render() == (x * 2 + y).render());
}

// ---------------------------------------------------------------------------------------------
// The property test. A random expression is kept as a small tree of our own, evaluated here with
// Python's semantics and also built through Node's operators; every assignment inside the bounds
// must give the same value, inside [min, max] of every built subexpression.

namespace {

enum class Op { Var, Num, Add, Sub, Neg, Mul, Div, Mod, Lt, LtExpr, Ge, And };

struct Tree {
  Op op = Op::Num;
  i64 c = 0;      // Num value; Mul factor; Div/Mod divisor; Lt bound
  int var = 0;    // Var index
  int style = 0;  // which builder spelling to use (operator, Node::sum, int on the left, ...)
  std::vector<Tree> kids;
  std::optional<Node> node;  // what the library built for this subtree
};

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(std::uint64_t seed) : gen(seed) {}
  // Inclusive; modulo bias is irrelevant here and keeps streams identical on every standard library.
  i64 in(i64 lo, i64 hi) { return lo + static_cast<i64>(gen() % static_cast<std::uint64_t>(hi - lo + 1)); }
  bool chance(int percent) { return in(0, 99) < percent; }
};

const char* const kNames[] = {"x", "y", "z"};
constexpr i64 kFactors[] = {-12, -8, -6, -4, 4, 6, 8, 12};
constexpr i64 kDivisors[] = {2, 3, 4, 6, 8, 12};

Tree gen_tree(Rng& r, int depth, int nvars) {
  Tree t;
  t.style = static_cast<int>(r.in(0, 2));
  if (depth == 0 || r.chance(22)) {
    if (r.chance(70)) {
      t.op = Op::Var;
      t.var = static_cast<int>(r.in(0, nvars - 1));
    } else {
      t.op = Op::Num;
      t.c = r.in(-12, 12);
    }
    return t;
  }
  static constexpr Op ops[] = {Op::Add, Op::Add, Op::Add, Op::Sub,    Op::Neg, Op::Mul,
                               Op::Mul, Op::Mul, Op::Div, Op::Div,    Op::Div, Op::Mod,
                               Op::Mod, Op::Mod, Op::Lt,  Op::LtExpr, Op::Ge,  Op::And};
  t.op = ops[r.in(0, std::size(ops) - 1)];
  auto kid = [&] { t.kids.push_back(gen_tree(r, depth - 1, nvars)); };
  switch (t.op) {
    case Op::Add:
    case Op::And: {
      const i64 n = r.in(2, 3);
      for (i64 i = 0; i < n; ++i) kid();
      break;
    }
    case Op::Sub:
    case Op::LtExpr:
    case Op::Ge:
      kid();
      kid();
      break;
    case Op::Neg:
      kid();
      break;
    case Op::Mul:
      kid();
      // Composite factors and divisors often share a factor, so the gcd and multiple rules fire.
      t.c = r.chance(70) ? r.in(-5, 5) : kFactors[r.in(0, std::size(kFactors) - 1)];
      break;
    case Op::Div:
    case Op::Mod:
      kid();
      t.c = r.chance(50) ? kDivisors[r.in(0, std::size(kDivisors) - 1)] : r.in(1, 12);
      break;
    case Op::Lt:
      kid();
      t.c = r.in(-10, 20);
      break;
    default:
      break;
  }
  return t;
}

std::string show(const Tree& t) {
  auto k = [&](std::size_t i) { return show(t.kids[i]); };
  auto joined = [&](const char* sep) {
    std::string s = "(";
    for (std::size_t i = 0; i < t.kids.size(); ++i) s += (i ? sep : "") + k(i);
    return s + ")";
  };
  switch (t.op) {
    case Op::Var:
      return kNames[t.var];
    case Op::Num:
      return std::to_string(t.c);
    case Op::Add:
      return joined(" + ");
    case Op::Sub:
      return "(" + k(0) + " - " + k(1) + ")";
    case Op::Neg:
      return "-" + k(0);
    case Op::Mul:
      return "(" + k(0) + " * " + std::to_string(t.c) + ")";
    case Op::Div:
      return "(" + k(0) + " // " + std::to_string(t.c) + ")";
    case Op::Mod:
      return "(" + k(0) + " % " + std::to_string(t.c) + ")";
    case Op::Lt:
      return "(" + k(0) + " < " + std::to_string(t.c) + ")";
    case Op::LtExpr:
      return "(" + k(0) + " < " + k(1) + ")";
    case Op::Ge:
      return "(" + k(0) + " >= " + k(1) + ")";
    case Op::And:
      return joined(" and ");
  }
  return "?";
}

// Builds t through the library, every spelling of each operator, and keeps each subtree's node.
const Node& build(Tree& t, const std::vector<Node>& vars) {
  std::vector<Node> k;
  for (Tree& c : t.kids) k.push_back(build(c, vars));
  switch (t.op) {
    case Op::Var:
      t.node = vars[t.var];
      break;
    case Op::Num:
      t.node = t.style == 0 ? Node(t.c) : Node(NumNode(t.c));
      break;
    case Op::Add:
      if (t.style == 0) {
        Node s = k[0];
        for (std::size_t i = 1; i < k.size(); ++i) s = s + k[i];
        t.node = s;
      } else if (t.style == 1) {
        t.node = Node::sum(k);
      } else {  // right-nested
        Node s = k.back();
        for (std::size_t i = k.size() - 1; i-- > 0;) s = k[i] + s;
        t.node = s;
      }
      break;
    case Op::Sub:
      t.node = t.style == 0 ? k[0] - k[1] : k[0] + (-k[1]);
      break;
    case Op::Neg:
      t.node = t.style == 0 ? -k[0] : k[0] * -1;
      break;
    case Op::Mul:
      t.node = t.style == 0 ? k[0] * t.c : t.style == 1 ? t.c * k[0] : k[0] * NumNode(t.c);
      break;
    case Op::Div:
      t.node = t.style == 0 ? k[0] / t.c : k[0] / NumNode(t.c);
      break;
    case Op::Mod:
      t.node = t.style == 0 ? k[0] % t.c : k[0] % NumNode(t.c);
      break;
    case Op::Lt:
      t.node = t.style == 0 ? k[0] < t.c : k[0] < NumNode(t.c);
      break;
    case Op::LtExpr:
      t.node = k[0] < k[1];
      break;
    case Op::Ge:
      t.node = k[0] >= k[1];
      break;
    case Op::And:
      if (t.style == 0) {
        t.node = Node::ands(k);
      } else {  // nested ands flatten
        Node a = k[0];
        for (std::size_t i = 1; i < k.size(); ++i) a = Node::ands({a, k[i]});
        t.node = a;
      }
      break;
  }
  return *t.node;
}

// The reference value of t at `val`. With check_bounds, also counts every subtree whose built
// node's [min, max] misses the value (the first is described in *why).
i64 reference(const Tree& t, const std::vector<i64>& val, bool check_bounds, int& bad, std::string* why) {
  std::vector<i64> k;
  for (const Tree& c : t.kids) k.push_back(reference(c, val, check_bounds, bad, why));
  i64 v = 0;
  switch (t.op) {
    case Op::Var:
      v = val[t.var];
      break;
    case Op::Num:
      v = t.c;
      break;
    case Op::Add:
      for (i64 x : k) v += x;
      break;
    case Op::Sub:
      v = k[0] - k[1];
      break;
    case Op::Neg:
      v = -k[0];
      break;
    case Op::Mul:
      v = k[0] * t.c;
      break;
    case Op::Div:
      v = py_floordiv(k[0], t.c);
      break;
    case Op::Mod:
      v = py_mod(k[0], t.c);
      break;
    case Op::Lt:
      v = k[0] < t.c;
      break;
    case Op::LtExpr:
      v = k[0] < k[1];
      break;
    case Op::Ge:
      v = k[0] >= k[1];
      break;
    case Op::And: {
      bool all = true;
      for (i64 x : k) all = all && x != 0;
      v = all;
      break;
    }
  }
  if (check_bounds && t.node && (v < t.node->min() || v > t.node->max())) {
    if (bad++ == 0 && why)
      *why = show(t) + " built as " + t.node->render() + " has bounds [" + std::to_string(t.node->min()) +
             ", " + std::to_string(t.node->max()) + "] but takes the value " + std::to_string(v);
  }
  return v;
}

struct Range {
  i64 lo, hi;
};

// Calls f(values) for every assignment of the ranges.
template <class F>
void for_each_assignment(const std::vector<Range>& ranges, F f) {
  std::vector<i64> val;
  for (const Range& r : ranges) val.push_back(r.lo);
  for (;;) {
    f(val);
    std::size_t i = 0;
    for (; i < ranges.size(); ++i) {
      if (val[i] < ranges[i].hi) {
        ++val[i];
        break;
      }
      val[i] = ranges[i].lo;
    }
    if (i == ranges.size()) return;
  }
}

std::string describe(const std::vector<Range>& ranges, const std::vector<i64>& val) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    os << kNames[i] << " in [" << ranges[i].lo << ", " << ranges[i].hi << "]";
    if (i < val.size()) os << " = " << val[i];
    os << "; ";
  }
  return os.str();
}

Range random_range(Rng& r, bool wide) {
  switch (r.in(0, 9)) {
    case 0:
      return {-3, 4};
    case 1: {
      const i64 v = r.in(-5, 5);
      return {v, v};  // a single value: the Variable is a number
    }
    default: {
      const i64 lo = r.in(-6, 4);
      return {lo, lo + r.in(1, wide ? 30 : 7)};
    }
  }
}

// A replacement for a variable with range [lo, hi]: an expression over fresh variables u, w whose
// values stay inside [lo, hi] (simplifications made under the old bounds must keep holding).
struct Replacement {
  Node node;
  std::vector<Range> ranges;               // of u, w
  std::function<i64(i64 u, i64 w)> value;  // the reference value
  std::string text;
};

Replacement random_replacement(Rng& r, Range v) {
  const i64 n = v.hi - v.lo;
  switch (r.in(0, 4)) {
    case 0:
      return {Variable("w", 0, n) + v.lo, {{0, 0}, {0, n}}, [v](i64, i64 w) { return w + v.lo; }, "w + lo"};
    case 1:
      return {Variable("w", -7, 9) % (n + 1) + v.lo,
              {{0, 0}, {-7, 9}},
              [v, n](i64, i64 w) { return py_mod(w, n + 1) + v.lo; },
              "w % (n+1) + lo"};
    case 2:
      return {Variable("w", 0, 2 * n + 1) / 2 + v.lo,
              {{0, 0}, {0, 2 * n + 1}},
              [v](i64, i64 w) { return py_floordiv(w, 2) + v.lo; },
              "w // 2 + lo"};
    case 3:
      return {Variable("u", 0, n / 2) + Variable("w", 0, n - n / 2) + v.lo,
              {{0, n / 2}, {0, n - n / 2}},
              [v](i64 u, i64 w) { return u + w + v.lo; },
              "u + w + lo"};
    default:
      return {v.hi - Variable("w", 0, n), {{0, 0}, {0, n}}, [v](i64, i64 w) { return v.hi - w; }, "hi - w"};
  }
}

}  // namespace

TEST_CASE("symbolic: random expressions keep their values and bounds (property test)", "[symbolic]") {
  // 6 x 1200 expressions; a longer local fuzz only needs more seeds here.
  const std::uint64_t seeds[] = {1, 2, 3, 20240607, 0x5eed5eedULL, 987654321};
  constexpr int kPerSeed = 1200;
  constexpr int kMaxReports = 10;

  long expressions = 0, assignments = 0, numeric_substitutions = 0, expr_substitutions = 0,
       substituted_assignments = 0;
  int reports = 0;
  auto report = [&](const std::string& what) {
    if (reports++ < kMaxReports) FAIL_CHECK(what);
  };

  for (std::uint64_t seed : seeds) {
    Rng r(seed);
    for (int i = 0; i < kPerSeed; ++i) {
      const int nvars = static_cast<int>(r.in(1, 3));
      std::vector<Range> ranges;
      for (int v = 0; v < nvars; ++v) ranges.push_back(random_range(r, nvars == 1));
      Tree t = gen_tree(r, static_cast<int>(r.in(1, 4)), nvars);
      const std::string context =
          "seed " + std::to_string(seed) + ", expression #" + std::to_string(i) + ": " + show(t) + " with ";
      std::vector<Node> vars;
      for (int v = 0; v < nvars; ++v) vars.push_back(Variable(kNames[v], ranges[v].lo, ranges[v].hi));

      std::optional<Node> built;
      try {
        built = build(t, vars);
      } catch (const std::exception& e) {
        report(context + describe(ranges, {}) + "threw while building: " + e.what());
        continue;
      }
      const Node& n = *built;
      ++expressions;
      if (n.min() > n.max()) report(context + "built " + n.render() + " with min > max");
      // Building is deterministic, and vars() names only variables the expression was built from.
      Tree again = t;
      if (!(build(again, vars) == n)) report(context + "rebuilt differently: " + again.node->render());
      const std::vector<Node> used = n.vars();
      for (std::size_t u = 0; u < used.size(); ++u) {
        const bool known = std::any_of(vars.begin(), vars.end(), [&](const Node& v) { return v == used[u]; });
        const bool repeated =
            std::any_of(used.begin(), used.begin() + u, [&](const Node& v) { return v == used[u]; });
        if (!used[u].is<Variable>() || !known || repeated)
          report(context + "vars() of " + n.render() + " lists " + used[u].render());
      }

      // Every assignment: the value, and every subexpression's bounds.
      std::vector<std::vector<i64>> picked;  // a few assignments kept for substitution
      for_each_assignment(ranges, [&](const std::vector<i64>& val) {
        ++assignments;
        int bad = 0;
        std::string why;
        const i64 want = reference(t, val, true, bad, &why);
        Env env;
        for (int v = 0; v < nvars; ++v) env[kNames[v]] = val[v];
        const i64 got = n.evaluate(env);
        if (got != want)
          report(context + describe(ranges, val) + "built " + n.render() + " evaluates to " +
                 std::to_string(got) + ", the reference is " + std::to_string(want));
        if (bad) report(context + describe(ranges, val) + why);
        if (picked.size() < 2 || r.chance(2)) picked.push_back(val);
      });

      // Substituting numbers for every variable folds to the reference number.
      for (std::size_t p = 0; p < picked.size() && p < 3; ++p) {
        const std::vector<i64>& val = picked[picked.size() - 1 - p];
        std::map<std::string, Node> values;
        for (int v = 0; v < nvars; ++v) values.emplace(kNames[v], Node(val[v]));
        ++numeric_substitutions;
        int bad = 0;
        const i64 want = reference(t, val, false, bad, nullptr);
        const Node s = n.substitute(values);
        if (!s.is_num() || s.b() != want)
          report(context + describe(ranges, val) + "substituting numbers into " + n.render() + " gives " +
                 s.render() + ", the reference is " + std::to_string(want));
      }

      // Every 10th expression: substitute one variable with an expression ranging inside its bounds.
      if (i % 10 != 0) continue;
      std::vector<int> free_vars;
      for (int v = 0; v < nvars; ++v)
        if (ranges[v].lo < ranges[v].hi) free_vars.push_back(v);
      if (free_vars.empty()) continue;
      const int target = free_vars[r.in(0, static_cast<i64>(free_vars.size()) - 1)];
      Replacement rep = random_replacement(r, ranges[target]);
      ++expr_substitutions;
      std::optional<Node> s;
      try {
        s = n.substitute({{kNames[target], rep.node}});
      } catch (const std::exception& e) {
        report(context + describe(ranges, {}) + "substituting " + kNames[target] + " = " + rep.node.render() +
               " threw: " + e.what());
        continue;
      }
      std::vector<Range> all = ranges;  // the old variables, then u and w
      all.insert(all.end(), rep.ranges.begin(), rep.ranges.end());
      for_each_assignment(all, [&](const std::vector<i64>& val) {
        ++substituted_assignments;
        std::vector<i64> old(val.begin(), val.begin() + nvars);
        old[target] = rep.value(val[nvars], val[nvars + 1]);
        int bad = 0;
        const i64 want = reference(t, old, false, bad, nullptr);
        Env env;
        for (int v = 0; v < nvars; ++v) env[kNames[v]] = val[v];
        env["u"] = val[nvars];
        env["w"] = val[nvars + 1];
        const i64 got = s->evaluate(env);
        if (got != want || got < s->min() || got > s->max())
          report(context + describe(ranges, old) + "u = " + std::to_string(val[nvars]) +
                 ", w = " + std::to_string(val[nvars + 1]) + ": substituting " + kNames[target] + " = " +
                 rep.node.render() + " (" + rep.text + ") into " + n.render() + " gives " + s->render() +
                 " in [" + std::to_string(s->min()) + ", " + std::to_string(s->max()) + "] evaluating to " +
                 std::to_string(got) + ", the reference is " + std::to_string(want));
      });
    }
  }

  INFO(expressions << " expressions, " << assignments << " assignments, " << numeric_substitutions
                   << " numeric substitutions, " << expr_substitutions << " expression substitutions over "
                   << substituted_assignments << " assignments");
  CHECK(reports == 0);
  CHECK(expressions >= 5000);
  CHECK(assignments >= 100000);
  CHECK(expr_substitutions >= 300);
}
