// Forward and backward of every mlop, on LazyBuffers. Gradients keep the forward's dtype.
#include "metagrad/mlops.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/helpers.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

// Dropping an autograd graph releases it without recursion, as ~LazyBuffer does its graph: a
// Tensor's last handle frees its Function, whose parents would free theirs, a frame per op.
Function::~Function() {
  if (!parents.empty()) detail::release_flat(std::move(parents));
}

namespace mlops {

namespace {
using LB = LazyBufferPtr;
using fn::Fn;
using fn::FnTraits;
using fn::none;

// The vocabulary of metagrad/functions.hpp on LazyBuffers: each operation as the hand-written
// mlops wrote it (a constant is const_like of the other operand, -x is 0 - x, x != c is
// (x == c) == 0), so the graphs, and so the kernels, are theirs.
struct L {
  LB p;
  L(LB b) : p(std::move(b)) {}  // NOLINT: LB in, LB out
  L c(double v) const { return p->const_like(v); }
  L exp2() const { return p->e(UnaryOps::EXP2); }
  L log2() const { return p->e(UnaryOps::LOG2); }
  L sin() const { return p->e(UnaryOps::SIN); }
  L exp() const;  // the functions of functions.hpp that rules use, by their forward
  L log() const;
  L sqrt() const { return p->e(BinaryOps::POW, p->const_like(0.5)); }  // as Tensor::sqrt
};
L bin(BinaryOps op, const L& x, const L& y) { return x.p->e(op, y.p); }
#define METAGRAD_L_OPERATOR(sym, OP)                                                              \
  [[maybe_unused]] L operator sym(const L& x, const L& y) { return bin(BinaryOps::OP, x, y); }    \
  [[maybe_unused]] L operator sym(const L& x, double y) { return bin(BinaryOps::OP, x, x.c(y)); } \
  [[maybe_unused]] L operator sym(double x, const L& y) { return bin(BinaryOps::OP, y.c(x), y); }
METAGRAD_L_OPERATOR(+, ADD)
METAGRAD_L_OPERATOR(-, SUB)
METAGRAD_L_OPERATOR(*, MUL)
METAGRAD_L_OPERATOR(/, DIV)
METAGRAD_L_OPERATOR(==, CMPEQ)
#undef METAGRAD_L_OPERATOR
L operator-(const L& x) { return 0.0 - x; }
L operator!=(const L& x, double y) { return (x == y) == 0.0; }
L maximum(const L& x, const L& y) { return bin(BinaryOps::MAX, x, y); }
L maximum(const L& x, double y) { return bin(BinaryOps::MAX, x, x.c(y)); }
L pow(const L& x, const L& y) { return bin(BinaryOps::POW, x, y); }
L where(const L& c, const L& x, const L& y) { return c.p->e(TernaryOps::WHERE, x.p, y.p); }
L where(const L& c, const L& x, double y) { return where(c, x, x.c(y)); }
L where(const L& c, double x, const L& y) { return where(c, y.c(x), y); }
L L::exp() const { return FnTraits<Fn::EXP>::forward(*this); }
L L::log() const { return FnTraits<Fn::LOG>::forward(*this); }

LB lb(const L& x) { return x.p; }
LB lb(none) { return nullptr; }

}  // namespace

LB Contiguous::forward(const LB& x) { return x->contiguous(); }
std::vector<LB> Contiguous::backward(const LB& g) { return {g}; }

LB Cast::forward(const LB& x, DType dtype) {
  input_dtype = x->dtype;
  return x->cast(dtype);
}
std::vector<LB> Cast::backward(const LB& g) { return {g->cast(input_dtype)}; }

// "metagrad::mlops::" and a traits entry's name capitalised: the seed's "Sigmoid", "Reshape".
static std::string mlop_name(const char* entry) {
  std::string s = entry;
  s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return "metagrad::mlops::" + s;
}

// The node protocol of functions.hpp over a Map's saved values.
template <Fn F>
struct Node {
  const Map<F>& m;
  L out() const { return m.ret; }
  template <std::size_t I>
  L x() const {
    return m.x[I];
  }
  template <std::size_t I, class Grad>
  L when(Grad grad) const {
    return m.needs_input_grad[I] ? grad() : L(nullptr);
  }
};

template <Fn F>
LB Map<F>::forward(const LB& a, const LB& b, const LB& c) {
  const LB in[] = {a, b, c};
  std::copy_n(in, x.size(), x.begin());
  return ret = [&]<std::size_t... I>(std::index_sequence<I...>) { return FnTraits<F>::forward(L(x[I])...).p; }
  (std::make_index_sequence<FnTraits<F>::arity>{});
}
template <Fn F>
std::vector<LB> Map<F>::backward(const LB& g) {
  return std::apply([](const auto&... d) { return std::vector<LB>{lb(d)...}; },
                    FnTraits<F>::grad(Node<F>{*this}, L(g)));
}
template <Fn F>
const char* Map<F>::name() const {
  static const std::string n = mlop_name(FnTraits<F>::name);
  return n.c_str();
}

// The node protocol of shape_rules.hpp over a reduction's saved values.
template <ReduceOps R>
struct ReduceNode {
  const Reduce<R>& r;
  DType dtype;  // the gradient's
  L out() const { return r.ret; }
  template <std::size_t I>
  L x() const {
    return r.x;
  }
  L expand(const L& v) const { return v.p->movement_op(MovementOps::EXPAND, r.x->shape()); }
  L sum(const L& v) const { return v.p->r(ReduceOps::SUM, r.ret->shape()); }
  L as_grad(const L& mask) const { return mask.p->cast(dtype); }
};

template <ReduceOps R>
LB Reduce<R>::forward(const LB& x_, const Dims& new_shape) {
  x = x_;
  return ret = x->r(R, new_shape);
}
template <ReduceOps R>
std::vector<LB> Reduce<R>::backward(const LB& g) {
  return {lb(fn::ReduceTraits<R>::grad(ReduceNode<R>{*this, g->dtype}, L(g)))};
}
template <ReduceOps R>
const char* Reduce<R>::name() const {
  static const std::string n = mlop_name(fn::ReduceTraits<R>::name);
  return n.c_str();
}

LB Equal::forward(const LB& x, const LB& y) { return x->e(BinaryOps::CMPEQ, y); }
std::vector<LB> Equal::backward(const LB&) {
  throw std::logic_error("mlops::Equal has no derivative: comparisons are not differentiable");
}

// Checked before reading the shape along `arg`: a wrong rank must be an error, not a read past it.
static void check_rank(const char* op, const LB& x, const Pairs& arg) {
  if (arg.size() != x->shape().size())
    throw std::invalid_argument(detail::cat(op, " of shape ", to_string(x->shape()), " with ", to_string(arg),
                                            ": one pair per dimension"));
}

template <MovementOps M>
LB Move<M>::forward(const LB& x, const Arg& arg_) {
  if constexpr (std::is_same_v<Arg, Pairs>) check_rank(fn::MoveTraits<M>::name, x, arg_);
  input_shape = x->shape();
  if constexpr (M == MovementOps::STRIDE)
    arg = flip_steps(arg_, input_shape.size());  // flip's axes
  else
    arg = arg_;
  return x->movement_op(M, arg);
}
// g moved back by the rule: a movement, or expand's sum back to the input's shape.
template <MovementOps M>
std::vector<LB> Move<M>::backward(const LB& g) {
  using Rule = fn::MoveTraits<M>;
  auto back = Rule::back_arg(arg, input_shape);
  if constexpr (std::is_same_v<decltype(Rule::back), const ReduceOps>)
    return {g->r(Rule::back, back)};
  else
    return {g->movement_op(Rule::back, back)};
}
template <MovementOps M>
const char* Move<M>::name() const {
  static const std::string n = mlop_name(fn::MoveTraits<M>::name);
  return n.c_str();
}

#define METAGRAD_MLOP_INSTANCE(Template, Arg, Name) template struct Template<Arg>;
METAGRAD_GENERATED_MLOPS(METAGRAD_MLOP_INSTANCE)
#undef METAGRAD_MLOP_INSTANCE

}  // namespace mlops
}  // namespace metagrad
