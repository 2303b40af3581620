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
#include "metagrad/shape_rules.hpp"

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
// Every movement: its backward rule is its MoveTraits entry (metagrad/shape_rules.hpp), shared
// with the static path. Flip (STRIDE) takes the axes to flip, the others their op's argument.
template <MovementOps M>
struct Move final : FunctionImpl<Move<M>, 1> {
  using Arg = typename fn::MoveTraits<M>::Arg;
  Arg arg;
  Dims input_shape;
  LazyBufferPtr forward(const LazyBufferPtr& x, const Arg& arg_);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
  const char* name() const override;
};
// Every reduction, to the output shape (same rank, reduced axes 1): its backward rule is its
// ReduceTraits entry, shared with the static path.
template <ReduceOps R>
struct Reduce final : FunctionImpl<Reduce<R>, 1> {
  LazyBufferPtr x, ret;
  LazyBufferPtr forward(const LazyBufferPtr& x_, const Dims& new_shape);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
  const char* name() const override;
};

// The mlops generated from a traits table, listed once: (template, its argument, the seed's name).
// Each is an alias declared here and instantiated in runtime/tensor/mlops.cpp.
// clang-format off
#define METAGRAD_GENERATED_MLOPS(X)                                                                    \
  X(Map, fn::Fn::EXP, Exp) X(Map, fn::Fn::EXP2, Exp2) X(Map, fn::Fn::LOG, Log) X(Map, fn::Fn::SIN, Sin) \
  X(Map, fn::Fn::RELU, Relu) X(Map, fn::Fn::SIGMOID, Sigmoid) X(Map, fn::Fn::ERF, Erf)                  \
  X(Map, fn::Fn::GELU, Gelu) X(Map, fn::Fn::ATAN, Atan) X(Map, fn::Fn::ASIN, Asin)                      \
  X(Map, fn::Fn::ACOS, Acos) X(Map, fn::Fn::ADD, Add) X(Map, fn::Fn::SUB, Sub) X(Map, fn::Fn::MUL, Mul) \
  X(Map, fn::Fn::DIV, Div) X(Map, fn::Fn::POW, Pow) X(Map, fn::Fn::MAX, Maximum)                        \
  X(Map, fn::Fn::WHERE, Where)                                                                          \
  X(Reduce, ReduceOps::SUM, Sum) X(Reduce, ReduceOps::MAX, Max)                                         \
  X(Move, MovementOps::RESHAPE, Reshape) X(Move, MovementOps::EXPAND, Expand)                           \
  X(Move, MovementOps::PERMUTE, Permute) X(Move, MovementOps::PAD, Pad)                                 \
  X(Move, MovementOps::SHRINK, Shrink) X(Move, MovementOps::STRIDE, Flip)
// clang-format on
#define METAGRAD_MLOP_ALIAS(Template, Arg, Name) \
  extern template struct Template<Arg>;          \
  using Name = Template<Arg>;
METAGRAD_GENERATED_MLOPS(METAGRAD_MLOP_ALIAS)
#undef METAGRAD_MLOP_ALIAS

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
// Not differentiable: its output is bool.
METAGRAD_MLOP(Equal, 2) {
  LazyBufferPtr forward(const LazyBufferPtr& x, const LazyBufferPtr& y);
  std::vector<LazyBufferPtr> backward(const LazyBufferPtr& g) override;
};
#undef METAGRAD_MLOP

}  // namespace mlops
}  // namespace metagrad
