// Forward and backward of every mlop, on LazyBuffers. Gradients keep the forward's dtype.
#include "metagrad/mlops.hpp"

#include <cxxabi.h>

#include <cmath>
#include <numbers>

#include "metagrad/tensor.hpp"

namespace metagrad {

Function::~Function() = default;

std::string detail::demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? out.get() : name;
}

namespace mlops {

namespace {
using LB = LazyBufferPtr;
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

LB Sin::forward(const LB& x_) {
  x = x_;
  return x->e(UnaryOps::SIN);
}
// d sin(x) = cos(x) = sin(pi/2 - x)
std::vector<LB> Sin::backward(const LB& g) {
  return {x->const_like(std::numbers::pi / 2)->e(BinaryOps::SUB, x)->e(UnaryOps::SIN)->e(BinaryOps::MUL, g)};
}

LB Relu::forward(const LB& x) { return ret = x->e(BinaryOps::MAX, x->const_like(0)); }
// g where the output is not 0 (the subgradient at 0 is 0, as in PyTorch)
std::vector<LB> Relu::backward(const LB& g) {
  return {only(is_not(ret->e(BinaryOps::CMPEQ, ret->const_like(0))), g)};
}

LB Log::forward(const LB& x_) {
  x = x_;
  return x->e(UnaryOps::LOG2)->e(BinaryOps::MUL, x->const_like(std::numbers::ln2));
}
std::vector<LB> Log::backward(const LB& g) { return {g->e(BinaryOps::DIV, x)}; }

LB Exp::forward(const LB& x) {
  return ret = x->e(BinaryOps::MUL, x->const_like(1 / std::numbers::ln2))->e(UnaryOps::EXP2);
}
std::vector<LB> Exp::backward(const LB& g) { return {ret->e(BinaryOps::MUL, g)}; }

LB Sigmoid::forward(const LB& x) {
  LB e = x->e(BinaryOps::MUL, x->const_like(-1 / std::numbers::ln2))->e(UnaryOps::EXP2);
  return ret = x->const_like(1)->e(BinaryOps::DIV, x->const_like(1)->e(BinaryOps::ADD, e));
}
// s (1 - s): finite everywhere, where the formula's own chain rule gives inf / inf at large -x.
std::vector<LB> Sigmoid::backward(const LB& g) {
  return {ret->e(BinaryOps::MUL, ret->const_like(1)->e(BinaryOps::SUB, ret))->e(BinaryOps::MUL, g)};
}

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

LB Maximum::forward(const LB& x_, const LB& y_) {
  x = x_, y = y_;
  return ret = x->e(BinaryOps::MAX, y);
}
// As PyTorch: ties split the gradient equally, the side that loses gets 0 (a select: an inf in g
// gives 0, not NaN), and with a NaN on either side both get g.
std::vector<LB> Maximum::backward(const LB& g) {
  LB tie = x->e(BinaryOps::CMPEQ, y), half = g->e(BinaryOps::MUL, g->const_like(0.5));
  auto side = [&](const LB& other) {
    LB other_wins = other->e(BinaryOps::CMPEQ, ret);
    return tie->e(TernaryOps::WHERE, half, other_wins->e(TernaryOps::WHERE, g->const_like(0), g));
  };
  return {needs_input_grad[0] ? side(y) : nullptr, needs_input_grad[1] ? side(x) : nullptr};
}

LB Where::forward(const LB& c_, const LB& x, const LB& y) {
  c = c_;
  return c->e(TernaryOps::WHERE, x, y);
}
std::vector<LB> Where::backward(const LB& g) {
  return {nullptr, needs_input_grad[1] ? only(c, g) : nullptr,
          needs_input_grad[2] ? only(is_not(c), g) : nullptr};
}

LB Add::forward(const LB& x, const LB& y) { return x->e(BinaryOps::ADD, y); }
std::vector<LB> Add::backward(const LB& g) {
  return {needs_input_grad[0] ? g : nullptr, needs_input_grad[1] ? g : nullptr};
}

LB Sub::forward(const LB& x, const LB& y) { return x->e(BinaryOps::SUB, y); }
std::vector<LB> Sub::backward(const LB& g) {
  return {needs_input_grad[0] ? g : nullptr,
          needs_input_grad[1] ? g->const_like(0)->e(BinaryOps::SUB, g) : nullptr};
}

LB Mul::forward(const LB& x_, const LB& y_) {
  x = x_, y = y_;
  return x->e(BinaryOps::MUL, y);
}
std::vector<LB> Mul::backward(const LB& g) {
  return {needs_input_grad[0] ? y->e(BinaryOps::MUL, g) : nullptr,
          needs_input_grad[1] ? x->e(BinaryOps::MUL, g) : nullptr};
}

LB Pow::forward(const LB& x_, const LB& y_) {
  x = x_, y = y_;
  return ret = x->e(BinaryOps::POW, y);
}
// d/dx = y * x^(y-1), 0 where y = 0; d/dy = x^y * ln(x), 0 where x = 0 and y >= 0: PyTorch's
// rules, which keep 0 * inf = NaN (x = 0) out of the gradient.
std::vector<LB> Pow::backward(const LB& g) {
  LB dx, dy;
  if (needs_input_grad[0])
    dx = only(is_not(y->e(BinaryOps::CMPEQ, y->const_like(0))),
              y->e(BinaryOps::MUL, x->e(BinaryOps::POW, y->e(BinaryOps::SUB, y->const_like(1))))
                  ->e(BinaryOps::MUL, g));
  if (needs_input_grad[1]) {
    LB y_nonneg = y->e(BinaryOps::MAX, y->const_like(0))->e(BinaryOps::CMPEQ, y);
    LB zero_base = x->e(BinaryOps::CMPEQ, x->const_like(0))->e(BinaryOps::MUL, y_nonneg);  // bools: and
    dy =
        only(is_not(zero_base),
             ret->e(BinaryOps::MUL, x->e(UnaryOps::LOG2)->e(BinaryOps::MUL, x->const_like(std::numbers::ln2)))
                 ->e(BinaryOps::MUL, g));
  }
  return {dx, dy};
}

LB Div::forward(const LB& x_, const LB& y_) {
  x = x_, y = y_;
  return x->e(BinaryOps::DIV, y);
}
std::vector<LB> Div::backward(const LB& g) {
  LB dy;
  if (needs_input_grad[1])
    dy = g->const_like(0)
             ->e(BinaryOps::SUB, g)
             ->e(BinaryOps::MUL, x)
             ->e(BinaryOps::DIV, y->e(BinaryOps::MUL, y));
  return {needs_input_grad[0] ? g->e(BinaryOps::DIV, y) : nullptr, dy};
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
