#pragma once
// The symbolic index algebra (the seed's shape/symbolic.py). A Node is an immutable value handle;
// every builder simplifies as it builds, so `(a + b*10) % 10` is already `(a%10)`.
//
// Semantics are Python's: `/` is floor division and `%` takes the sign of the divisor, for negative
// numerators too. Divisors must be positive constants. Every rule keeps the value equal for every
// assignment of the variables inside their bounds, and min()/max() bound every value.
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metagrad/detail/shape/symbolic.hpp"

namespace metagrad::symbolic {

enum class NodeKind : std::uint8_t { Num, Variable, Mul, Div, Mod, Sum, Lt, And };

class Node {
 public:
  // Implicit, so numbers mix with nodes: `x + 3`, `sum({x, 3})`.
  template <std::integral I>
  Node(I value) : Node(static_cast<std::int64_t>(value), num_tag{}) {}  // NOLINT

  NodeKind kind() const;
  template <class K>
  bool is() const {
    return kind() == K::node_kind;
  }
  std::int64_t min() const;
  std::int64_t max() const;
  bool is_num() const { return kind() == NodeKind::Num; }

  // Children, by kind: Mul/Div/Mod/Lt have a() and the constant b(); Num has b() (its value);
  // Sum/And have nodes(); Variable has name(). Asking a kind for what it lacks throws.
  const Node& a() const;
  std::int64_t b() const;
  const std::vector<Node>& nodes() const;
  const std::string& name() const;

  // The seed's rendering: `(x*3)`, `(x//3)`, `(x%3)`, `(x<3)`, sums and ands sorted as strings.
  const std::string& render() const;
  std::string str() const { return render(); }

  Node substitute(const std::map<std::string, Node>& values) const;
  std::int64_t evaluate(const std::map<std::string, std::int64_t>& values) const;
  std::vector<Node> vars() const;  // distinct variables, in first-seen order

  static Node sum(const std::vector<Node>& nodes);
  static Node ands(const std::vector<Node>& nodes);

  // Structural equality (same simplified expression), not an expression builder.
  friend bool operator==(const Node& x, const Node& y);

  friend Node operator+(const Node& x, const Node& y);
  friend Node operator-(const Node& x, const Node& y);
  friend Node operator-(const Node& x);
  friend Node operator*(const Node& x, const Node& y);  // one side must be a number
  friend Node operator/(const Node& x, const Node& y);  // floor division; y a positive number
  friend Node operator%(const Node& x, const Node& y);  // y a positive number
  friend Node operator<(const Node& x, const Node& y);
  friend Node operator>=(const Node& x, const Node& y);  // the seed's `(-x) < (-y+1)`

  const detail::NodeImpl& impl() const { return *p_; }

 private:
  struct num_tag {};
  Node(std::int64_t value, num_tag);
  explicit Node(std::shared_ptr<const detail::NodeImpl> p) : p_(std::move(p)) {}
  friend Node make_node(detail::NodeImpl impl);

  std::shared_ptr<const detail::NodeImpl> p_;
};

// The seed's node kinds. Variable and NumNode construct; the others name a kind for Node::is<>.
struct Variable : Node {
  static constexpr NodeKind node_kind = NodeKind::Variable;
  // min and max inclusive; min == max gives the number itself, as in the seed.
  Variable(std::string name, std::int64_t min, std::int64_t max);
};
struct NumNode : Node {
  static constexpr NodeKind node_kind = NodeKind::Num;
  explicit NumNode(std::int64_t value) : Node(value) {}
};
struct MulNode {
  static constexpr NodeKind node_kind = NodeKind::Mul;
};
struct DivNode {
  static constexpr NodeKind node_kind = NodeKind::Div;
};
struct ModNode {
  static constexpr NodeKind node_kind = NodeKind::Mod;
};
struct SumNode {
  static constexpr NodeKind node_kind = NodeKind::Sum;
};
struct LtNode {
  static constexpr NodeKind node_kind = NodeKind::Lt;
};
struct AndNode {
  static constexpr NodeKind node_kind = NodeKind::And;
};

// Python's floor division and modulo on integers, also usable by renderers and tests.
constexpr std::int64_t floordiv(std::int64_t x, std::int64_t y) {
  std::int64_t q = x / y;
  return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}
constexpr std::int64_t floormod(std::int64_t x, std::int64_t y) { return x - floordiv(x, y) * y; }

}  // namespace metagrad::symbolic
