#pragma once
// The derivatives (the seed's mlops.py): every differentiable op is a Function with a forward on
// LazyBuffers and a backward rule; every hlop on Tensor is built from these, none has its own.
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "metagrad/detail/helpers.hpp"
#include "metagrad/functions.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/ops.hpp"

namespace metagrad {

class Tensor;

// The autograd context. apply() runs forward on the inputs' LazyBuffers and, when an input needs
// a gradient (and Tensor::no_grad is off), keeps the inputs as parents for backward().
class Function {
 public:
  std::string device;
  std::vector<bool> needs_input_grad;
  bool requires_grad = false;
  std::vector<Tensor> parents;

  virtual ~Function();
  // One gradient per parent; nullptr where needs_input_grad is false.
  virtual std::vector<LazyBufferPtr> backward(const LazyBufferPtr& grad_output) = 0;
  virtual const char* name() const = 0;
};

// CRTP base: Derived::arity Tensor inputs, then static arguments forwarded to Derived::forward.
template <class Derived, std::size_t Arity = 1>
class FunctionImpl : public Function {
 public:
  static constexpr std::size_t arity = Arity;
  template <class... Args>
  static detail::dependent<Tensor, Args...> apply(const Args&... args);
  const char* name() const override;
};

namespace mlops {

// Every differentiable elementwise function: its forward and backward are its FnTraits entry's
// (metagrad/functions.hpp), run on LazyBuffers by runtime/tensor/mlops.cpp.
template <fn::Fn F>
struct Map final : FunctionImpl<Map<F>, fn::FnTraits<F>::arity> {
  std::array<LazyBufferPtr, fn::FnTraits<F>::arity> x;
  LazyBufferPtr ret;
  LazyBufferPtr forward(const LazyBufferPtr& a, const LazyBufferPtr& b = {}, const LazyBufferPtr& c = {});
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
  const char* name() const override;  // the seed's: "Sigmoid", "Maximum"
};
#define METAGRAD_MAP_MLOP(Name, F) \
  extern template struct Map<F>;   \
  using Name = Map<F>;
METAGRAD_MAP_MLOP(Exp, fn::Fn::EXP)
METAGRAD_MAP_MLOP(Exp2, fn::Fn::EXP2)
METAGRAD_MAP_MLOP(Log, fn::Fn::LOG)
METAGRAD_MAP_MLOP(Sin, fn::Fn::SIN)
METAGRAD_MAP_MLOP(Relu, fn::Fn::RELU)
METAGRAD_MAP_MLOP(Sigmoid, fn::Fn::SIGMOID)
METAGRAD_MAP_MLOP(Erf, fn::Fn::ERF)
METAGRAD_MAP_MLOP(Gelu, fn::Fn::GELU)
METAGRAD_MAP_MLOP(Atan, fn::Fn::ATAN)
METAGRAD_MAP_MLOP(Asin, fn::Fn::ASIN)
METAGRAD_MAP_MLOP(Acos, fn::Fn::ACOS)
METAGRAD_MAP_MLOP(Add, fn::Fn::ADD)
METAGRAD_MAP_MLOP(Sub, fn::Fn::SUB)
METAGRAD_MAP_MLOP(Mul, fn::Fn::MUL)
METAGRAD_MAP_MLOP(Div, fn::Fn::DIV)
METAGRAD_MAP_MLOP(Pow, fn::Fn::POW)
METAGRAD_MAP_MLOP(Maximum, fn::Fn::MAX)
METAGRAD_MAP_MLOP(Where, fn::Fn::WHERE)
#undef METAGRAD_MAP_MLOP

#define METAGRAD_MLOP(Name, Arity) struct Name final : FunctionImpl<Name, Arity>

METAGRAD_MLOP(Contiguous, 1) {
  LazyBufferPtr forward(const LazyBufferPtr& x);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Cast, 1) {
  DType input_dtype = dtypes::float32;
  LazyBufferPtr forward(const LazyBufferPtr& x, DType dtype);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
// Reductions take the output shape: same rank, reduced axes 1.
METAGRAD_MLOP(Sum, 1) {
  Dims input_shape;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& new_shape);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Max, 1) {
  LazyBufferPtr x, ret;
  LazyBufferPtr forward(const LazyBufferPtr& x_, const Dims& new_shape);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
// Not differentiable: its output is bool.
METAGRAD_MLOP(Equal, 2) {
  LazyBufferPtr forward(const LazyBufferPtr& x, const LazyBufferPtr& y);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Expand, 1) {
  Dims input_shape;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& shape);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Reshape, 1) {
  Dims input_shape;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& shape);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Permute, 1) {
  Dims order;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& order_);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
// arg[i] = (before, after)
METAGRAD_MLOP(Pad, 1) {
  Pairs narg;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Pairs& arg);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
// arg[i] = [begin, end)
METAGRAD_MLOP(Shrink, 1) {
  Pairs narg;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Pairs& arg);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
METAGRAD_MLOP(Flip, 1) {
  Dims steps;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Dims& axes);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};

#undef METAGRAD_MLOP

}  // namespace mlops
}  // namespace metagrad
