// The symbolic simplifier. Each builder applies its rules as it builds; each rule is an identity
// under floor semantics, so it holds for every assignment inside the bounds (see the fuzz test).
#include "metagrad/shape/symbolic.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

namespace metagrad::symbolic {

using detail::NodeImpl;
using i64 = std::int64_t;

Node make_node(NodeImpl impl);

namespace {

std::string joined_sorted(const std::vector<Node>& nodes, const char* sep) {
  std::vector<std::string> parts;
  for (const Node& n : nodes) parts.push_back(n.render());
  std::sort(parts.begin(), parts.end());
  std::string out = "(";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out + ")";
}

std::string render_impl(const NodeImpl& n) {
  auto binary = [&](const char* op) { return "(" + n.nodes[0].render() + op + std::to_string(n.b) + ")"; };
  switch (n.kind) {
    case NodeKind::Num: return std::to_string(n.b);
    case NodeKind::Variable: return n.name;
    case NodeKind::Mul: return binary("*");
    case NodeKind::Div: return binary("//");
    case NodeKind::Mod: return binary("%");
    case NodeKind::Lt: return binary("<");
    case NodeKind::Sum: return joined_sorted(n.nodes, "+");
    case NodeKind::And: return joined_sorted(n.nodes, " and ");
  }
  return "?";
}

Node unary(NodeKind kind, const Node& a, i64 b, i64 mn, i64 mx) {
  return make_node(NodeImpl{kind, mn, mx, b, {a}, {}, {}});
}

i64 ceildiv(i64 x, i64 y) { return -floordiv(-x, y); }

// A term of a sum seen as coefficient * base: `x*3` is (x, 3), a number n is (1, n), else (t, 1).
struct Term {
  Node base;
  i64 coef;
};
Term as_term(const Node& t) {
  if (t.is<MulNode>()) return {t.a(), t.b()};
  if (t.is_num()) return {Node(1), t.b()};
  return {t, 1};
}

// gcd of b and every term's coefficient; 1 if any term is not a plain multiple (a variable, a div...).
i64 common_factor(const std::vector<Node>& terms, i64 b) {
  i64 g = b;
  for (const Node& t : terms) {
    if (!t.is<MulNode>() && !t.is_num()) return 1;
    g = std::gcd(g, t.b());
  }
  return g;
}

[[noreturn]] void bad_divisor(const char* op, const Node& x, const Node& y) {
  throw std::invalid_argument(std::string("symbolic: ") + op + " of " + x.render() + " by " + y.render() +
                              ": the divisor must be a positive constant");
}

Node mul(const Node& a, i64 b) {
  if (b == 0) return 0;
  if (b == 1) return a;
  switch (a.kind()) {
    case NodeKind::Num: return a.b() * b;
    case NodeKind::Mul: return mul(a.a(), a.b() * b);
    case NodeKind::Sum: {
      std::vector<Node> terms;
      for (const Node& t : a.nodes()) terms.push_back(mul(t, b));
      return Node::sum(terms);
    }
    default:
      return unary(NodeKind::Mul, a, b, b > 0 ? a.min() * b : a.max() * b, b > 0 ? a.max() * b : a.min() * b);
  }
}

Node div(const Node& a, i64 b) {
  if (b <= 0) bad_divisor("floor division", a, b);
  if (b == 1) return a;
  if (floordiv(a.min(), b) == floordiv(a.max(), b)) return floordiv(a.min(), b);
  switch (a.kind()) {
    case NodeKind::Mul: {
      if (a.b() % b == 0) return mul(a.a(), a.b() / b);
      i64 g = std::gcd(a.b(), b);
      if (g > 1) return div(mul(a.a(), a.b() / g), b / g);
      break;
    }
    case NodeKind::Div: return div(a.a(), a.b() * b);
    case NodeKind::Sum: {
      // Terms that are whole multiples of b leave the division: (x*b + r)//b = x + r//b.
      std::vector<Node> quotient, rest;
      for (const Node& t : a.nodes()) {
        if (t.is_num()) {
          i64 q = floordiv(t.b(), b);
          if (q) quotient.push_back(q);
          if (t.b() - q * b) rest.push_back(t.b() - q * b);
        } else if (t.is<MulNode>() && t.b() % b == 0) {
          quotient.push_back(mul(t.a(), t.b() / b));
        } else {
          rest.push_back(t);
        }
      }
      if (!quotient.empty()) return Node::sum(quotient) + div(Node::sum(rest), b);
      // gcd factoring: (6x+4y)//4 = (3x+2y)//2; then split by a factor of b: r//b = (r//k)//(b/k).
      if (i64 g = common_factor(rest, b); g > 1) return div(div(a, g), b / g);
      for (const Node& t : rest) {
        i64 k = t.is<MulNode>() ? std::abs(t.b()) : 0;
        if (k > 1 && b % k == 0) return div(div(a, k), b / k);
      }
      break;
    }
    default: break;
  }
  return unary(NodeKind::Div, a, b, floordiv(a.min(), b), floordiv(a.max(), b));
}

Node mod(const Node& a, i64 b) {
  if (b <= 0) bad_divisor("modulo", a, b);
  if (b == 1) return 0;
  if (i64 q = floordiv(a.min(), b); q == floordiv(a.max(), b)) return a - q * b;
  switch (a.kind()) {
    case NodeKind::Mul: {
      if (a.b() % b == 0) return 0;
      i64 k = floormod(a.b(), b);
      if (k != a.b()) return mod(mul(a.a(), k), b);
      if (i64 g = std::gcd(k, b); g > 1) return mul(mod(mul(a.a(), k / g), b / g), g);
      break;
    }
    case NodeKind::Mod:
      if (a.b() % b == 0) return mod(a.a(), b);
      break;
    case NodeKind::Sum: {
      // Reduce every term modulo b, as tinygrad does: numbers and coefficients to their floor
      // remainders ((x*7 + y) % 6 is (x + y) % 6; multiples of b drop out), and x%k with b | k
      // becomes x. Each step changes the sum by a multiple of b. The recursion then drops the
      // modulo when the reduced sum's bounds lie in [0, b) (the q == q check above).
      std::vector<Node> terms;
      bool changed = false;
      for (const Node& t : a.nodes()) {
        if (t.is_num() && floormod(t.b(), b) != t.b()) {
          terms.push_back(floormod(t.b(), b));
          changed = true;
        } else if (t.is<MulNode>() && floormod(t.b(), b) != t.b()) {
          terms.push_back(mul(t.a(), floormod(t.b(), b)));
          changed = true;
        } else if (t.is<ModNode>() && t.b() % b == 0) {
          terms.push_back(t.a());
          changed = true;
        } else {
          terms.push_back(t);
        }
      }
      if (changed) return mod(Node::sum(terms), b);
      if (i64 g = common_factor(terms, b); g > 1) return mul(mod(div(a, g), b / g), g);
      break;
    }
    default: break;
  }
  return unary(NodeKind::Mod, a, b, 0, b - 1);
}

Node lt(const Node& a, i64 b) {
  if (a.max() < b) return 1;
  if (a.min() >= b) return 0;
  if (a.is<MulNode>() && a.b() > 0) return lt(a.a(), ceildiv(b, a.b()));
  if (a.is<SumNode>()) {
    std::vector<Node> rest;
    i64 constant = 0;
    for (const Node& t : a.nodes()) (t.is_num() ? void(constant += t.b()) : rest.push_back(t));
    if (constant) return lt(Node::sum(rest), b - constant);
    if (i64 g = common_factor(rest, 0); g > 1) return lt(div(a, g), ceildiv(b, g));
  }
  return unary(NodeKind::Lt, a, b, 0, 1);
}

i64 as_constant(const Node& n, const char* op, const Node& x, const Node& y) {
  if (!n.is_num())
    throw std::invalid_argument(std::string("symbolic: ") + op + " of " + x.render() + " and " + y.render() +
                                ": one side must be a number");
  return n.b();
}

void collect_vars(const Node& n, std::vector<Node>& out) {
  if (n.is<Variable>()) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    return;
  }
  if (!n.is_num())
    for (const Node& c : n.impl().nodes) collect_vars(c, out);
}

}  // namespace

Node make_node(NodeImpl impl) {
  impl.key = render_impl(impl);
  return Node(std::make_shared<const NodeImpl>(std::move(impl)));
}

Node::Node(i64 value, num_tag) : Node(make_node(NodeImpl{NodeKind::Num, value, value, value, {}, {}, {}})) {}

static Node variable_node(std::string name, i64 min, i64 max) {
  if (min > max)
    throw std::invalid_argument("symbolic: Variable(\"" + name + "\", " + std::to_string(min) + ", " +
                                std::to_string(max) + ") has min > max");
  if (min == max) return min;
  return make_node(NodeImpl{NodeKind::Variable, min, max, 0, {}, std::move(name), {}});
}

Variable::Variable(std::string name, i64 min, i64 max) : Node(variable_node(std::move(name), min, max)) {}

NodeKind Node::kind() const { return p_->kind; }
i64 Node::min() const { return p_->min; }
i64 Node::max() const { return p_->max; }
const std::string& Node::render() const { return p_->key; }

const Node& Node::a() const {
  if (p_->nodes.size() != 1 || kind() == NodeKind::Sum || kind() == NodeKind::And)
    throw std::logic_error("symbolic: " + render() + " has no single child a()");
  return p_->nodes[0];
}
i64 Node::b() const {
  if (kind() == NodeKind::Variable || kind() == NodeKind::Sum || kind() == NodeKind::And)
    throw std::logic_error("symbolic: " + render() + " has no constant b()");
  return p_->b;
}
const std::vector<Node>& Node::nodes() const {
  if (kind() != NodeKind::Sum && kind() != NodeKind::And)
    throw std::logic_error("symbolic: " + render() + " is not a sum or an and");
  return p_->nodes;
}
const std::string& Node::name() const {
  if (kind() != NodeKind::Variable) throw std::logic_error("symbolic: " + render() + " is not a variable");
  return p_->name;
}

bool operator==(const Node& x, const Node& y) { return x.p_ == y.p_ || x.render() == y.render(); }

Node Node::sum(const std::vector<Node>& nodes) {
  // Flatten nested sums and combine like terms: x*2 + x*3 + 1 + 2 -> x*5 + 3.
  std::vector<Term> terms;
  std::unordered_map<std::string, std::size_t> index;
  i64 constant = 0;
  auto add = [&](const Node& t) {
    if (t.is_num()) return void(constant += t.b());
    Term term = as_term(t);
    auto [it, fresh] = index.try_emplace(term.base.render(), terms.size());
    if (fresh) terms.push_back(term);
    else terms[it->second].coef += term.coef;
  };
  for (const Node& n : nodes) {
    if (n.is<SumNode>()) for (const Node& t : n.nodes()) add(t);
    else add(n);
  }
  std::vector<Node> out;
  i64 mn = constant, mx = constant;
  for (const Term& t : terms) {
    if (t.coef == 0) continue;
    out.push_back(mul(t.base, t.coef));
    mn += out.back().min();
    mx += out.back().max();
  }
  if (constant) out.push_back(constant);
  if (out.empty()) return 0;
  if (out.size() == 1) return out[0];
  return make_node(NodeImpl{NodeKind::Sum, mn, mx, 0, std::move(out), {}, {}});
}

Node Node::ands(const std::vector<Node>& nodes) {
  // Truth is "non-zero". Known-true entries drop out, a known-false one decides, duplicates merge.
  std::vector<Node> out;
  auto add = [&](const Node& n) {
    bool never_zero = n.min() > 0 || n.max() < 0;
    if (never_zero || std::find(out.begin(), out.end(), n) != out.end()) return true;
    if (n.min() == 0 && n.max() == 0) return false;
    out.push_back(n);
    return true;
  };
  for (const Node& n : nodes) {
    const std::vector<Node>& parts = n.is<AndNode>() ? n.nodes() : std::vector<Node>{n};
    for (const Node& p : parts)
      if (!add(p)) return 0;
  }
  if (out.empty()) return 1;
  if (out.size() == 1 && out[0].min() >= 0 && out[0].max() <= 1) return out[0];
  return make_node(NodeImpl{NodeKind::And, 0, 1, 0, std::move(out), {}, {}});
}

Node operator+(const Node& x, const Node& y) { return Node::sum({x, y}); }
Node operator-(const Node& x) { return mul(x, -1); }
Node operator-(const Node& x, const Node& y) { return Node::sum({x, mul(y, -1)}); }
Node operator*(const Node& x, const Node& y) {
  if (x.is_num()) return mul(y, x.b());
  return mul(x, as_constant(y, "multiplication", x, y));
}
Node operator/(const Node& x, const Node& y) {
  if (!y.is_num()) bad_divisor("floor division", x, y);
  return div(x, y.b());
}
Node operator%(const Node& x, const Node& y) {
  if (!y.is_num()) bad_divisor("modulo", x, y);
  return mod(x, y.b());
}
Node operator<(const Node& x, const Node& y) { return y.is_num() ? lt(x, y.b()) : lt(x - y, 0); }
Node operator>=(const Node& x, const Node& y) { return (-x) < (-y + 1); }

Node Node::substitute(const std::map<std::string, Node>& values) const {
  auto sub_all = [&] {
    std::vector<Node> out;
    for (const Node& n : p_->nodes) out.push_back(n.substitute(values));
    return out;
  };
  switch (kind()) {
    case NodeKind::Num: return *this;
    case NodeKind::Variable: {
      auto it = values.find(name());
      return it == values.end() ? *this : it->second;
    }
    case NodeKind::Mul: return a().substitute(values) * b();
    case NodeKind::Div: return a().substitute(values) / b();
    case NodeKind::Mod: return a().substitute(values) % b();
    case NodeKind::Lt: return a().substitute(values) < b();
    case NodeKind::Sum: return sum(sub_all());
    case NodeKind::And: return ands(sub_all());
  }
  return *this;
}

i64 Node::evaluate(const std::map<std::string, i64>& values) const {
  switch (kind()) {
    case NodeKind::Num: return b();
    case NodeKind::Variable: {
      auto it = values.find(name());
      if (it == values.end()) throw std::invalid_argument("symbolic: no value for variable " + name());
      return it->second;
    }
    case NodeKind::Mul: return a().evaluate(values) * b();
    case NodeKind::Div: return floordiv(a().evaluate(values), b());
    case NodeKind::Mod: return floormod(a().evaluate(values), b());
    case NodeKind::Lt: return a().evaluate(values) < b();
    case NodeKind::Sum: {
      i64 s = 0;
      for (const Node& n : nodes()) s += n.evaluate(values);
      return s;
    }
    case NodeKind::And:
      return std::all_of(nodes().begin(), nodes().end(), [&](const Node& n) { return n.evaluate(values) != 0; });
  }
  return 0;
}

std::vector<Node> Node::vars() const {
  std::vector<Node> out;
  collect_vars(*this, out);
  return out;
}

}  // namespace metagrad::symbolic
