// Forward and backward of every mlop, on LazyBuffers. Gradients keep the forward's dtype.
#include "metagrad/mlops.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
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

// A bool mask as the gradient's dtype.
LB as(const LB& mask, const LB& like) { return mask->cast(like->dtype); }
// g where mask holds, else 0: a select, so an inf in g where the mask is off gives 0, not NaN.
LB only(const LB& mask, const LB& g) { return mask->e(TernaryOps::WHERE, g, g->const_like(0)); }
LB is_not(const LB& mask) { return mask->e(BinaryOps::CMPEQ, mask->const_like(0)); }
}  // namespace

LB Contiguous::forward(const LB& x) { return x->contiguous(); }
std::vector<LB> Contiguous::backward(const LB& g) { return {g}; }

LB Cast::forward(const LB& x, DType dtype) {
  input_dtype = x->dtype;
  return x->cast(dtype);
}
std::vector<LB> Cast::backward(const LB& g) { return {g->cast(input_dtype)}; }

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
  static const std::string n = [] {
    std::string s = FnTraits<F>::name;
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return "metagrad::mlops::" + s;
  }();
  return n.c_str();
}
template struct Map<Fn::EXP>;
template struct Map<Fn::EXP2>;
template struct Map<Fn::LOG>;
template struct Map<Fn::SIN>;
template struct Map<Fn::RELU>;
template struct Map<Fn::SIGMOID>;
template struct Map<Fn::ERF>;
template struct Map<Fn::GELU>;
template struct Map<Fn::ATAN>;
template struct Map<Fn::ASIN>;
template struct Map<Fn::ACOS>;
template struct Map<Fn::ADD>;
template struct Map<Fn::SUB>;
template struct Map<Fn::MUL>;
template struct Map<Fn::DIV>;
template struct Map<Fn::POW>;
template struct Map<Fn::MAX>;
template struct Map<Fn::WHERE>;

LB Sum::forward(const LB& x, const Dims& new_shape) {
  input_shape = x->shape();
  return x->r(ReduceOps::SUM, new_shape);
}
std::vector<LB> Sum::backward(const LB& g) { return {g->movement_op(MovementOps::EXPAND, input_shape)}; }

LB Max::forward(const LB& x_, const Dims& new_shape) {
  x = x_;
  return ret = x->r(ReduceOps::MAX, new_shape);
}
// The gradient is shared equally among the elements that reach the max; a NaN max is reached by
// the NaNs (as PyTorch's max()), so a NaN row's gradient is finite too.
std::vector<LB> Max::backward(const LB& g) {
  LB hit = x->e(BinaryOps::CMPEQ, ret->movement_op(MovementOps::EXPAND, x->shape()));
  LB is_max = hit->e(BinaryOps::MAX, is_not(x->e(BinaryOps::CMPEQ, x)));  // or: bools' MAX
  LB count = as(is_max, g)->r(ReduceOps::SUM, g->shape());
  return {only(is_max, g->e(BinaryOps::DIV, count)->movement_op(MovementOps::EXPAND, x->shape()))};
}

LB Equal::forward(const LB& x, const LB& y) { return x->e(BinaryOps::CMPEQ, y); }
std::vector<LB> Equal::backward(const LB&) {
  throw std::logic_error("mlops::Equal has no derivative: comparisons are not differentiable");
}

LB Expand::forward(const LB& x, const Dims& shape) {
  input_shape = x->shape();
  return x->movement_op(MovementOps::EXPAND, shape);
}
std::vector<LB> Expand::backward(const LB& g) { return {g->r(ReduceOps::SUM, input_shape)}; }

LB Reshape::forward(const LB& x, const Dims& shape) {
  input_shape = x->shape();
  return x->movement_op(MovementOps::RESHAPE, shape);
}
std::vector<LB> Reshape::backward(const LB& g) { return {g->movement_op(MovementOps::RESHAPE, input_shape)}; }

LB Permute::forward(const LB& x, const Dims& order_) {
  order = order_;
  return x->movement_op(MovementOps::PERMUTE, order);
}
std::vector<LB> Permute::backward(const LB& g) {
  Dims inverse = Dims::filled(order.size(), 0);
  for (std::size_t i = 0; i < order.size(); ++i)
    inverse[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  return {g->movement_op(MovementOps::PERMUTE, inverse)};
}

// Checked before reading the shape along `arg`: a wrong rank must be an error, not a read past it.
static void check_rank(const char* op, const LB& x, const Pairs& arg) {
  if (arg.size() != x->shape().size())
    throw std::invalid_argument(detail::cat(op, " of shape ", to_string(x->shape()), " with ", to_string(arg),
                                            ": one pair per dimension"));
}

LB Pad::forward(const LB& x, const Pairs& arg) {
  check_rank("pad", x, arg);
  for (std::size_t i = 0; i < arg.size(); ++i) narg.push_back({arg[i].first, arg[i].first + x->shape()[i]});
  return x->movement_op(MovementOps::PAD, arg);
}
std::vector<LB> Pad::backward(const LB& g) { return {g->movement_op(MovementOps::SHRINK, narg)}; }

LB Shrink::forward(const LB& x, const Pairs& arg) {
  check_rank("shrink", x, arg);
  for (std::size_t i = 0; i < arg.size(); ++i) narg.push_back({arg[i].first, x->shape()[i] - arg[i].second});
  return x->movement_op(MovementOps::SHRINK, arg);
}
std::vector<LB> Shrink::backward(const LB& g) { return {g->movement_op(MovementOps::PAD, narg)}; }

LB Flip::forward(const LB& x, const Dims& axes) {
  steps = Dims::filled(x->shape().size(), 1);
  for (std::int64_t a : axes) steps[static_cast<std::size_t>(a)] = -1;
  return x->movement_op(MovementOps::STRIDE, steps);
}
std::vector<LB> Flip::backward(const LB& g) { return {g->movement_op(MovementOps::STRIDE, steps)}; }

}  // namespace mlops
}  // namespace metagrad
