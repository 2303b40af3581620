#pragma once
// fx::cut and fx::Tape: where a static model is cut into pieces the compiler sees one at a time.
//
//   fx::Tape tape;                                   // owns the cuts made while it lives
//   auto h = fx::cut(fx::layernorm(x, g, b));        // evaluated now; h reads the value
//   auto loss = ...h...h...;                         // any expression, h read many times
//   fx::grad_into(std::tie(gw, ...), loss, w, ...);  // through h back into layernorm's parameters
//
// An expression holds its children by value, so a value read n times is n copies of its whole
// subtree, and a model whose every block reads its input several times (a residual, a layernorm,
// q, k and v) is a tree exponential in its depth: the compiler runs out of memory at one GPT block.
// A cut evaluates its expression once, into the tape, and returns a leaf of the expression's shape
// (op::Cut) that reads the value: the expressions above it hold a pointer, whatever they hold
// below. The tape records the cut's expression and its backward walk, compiled once for that
// expression's type behind a function pointer; fixed::grad, given a loss that reads a cut, walks
// the loss, then each cut that received a gradient, newest first, and adds what reaches a
// parameter into its gradient. Compile cost is then the sum over the distinct cut expressions, and
// equal blocks share theirs.
//
// The cuts' values, their expressions and the leaves they point at must outlive the tape's use:
// the tape keeps them (in a per-thread arena that stops allocating once it has grown to a step's
// size) until it is destroyed; tapes nest, and an inner tape's cuts may read an outer's.
#include <new>
#include <stdexcept>
#include <type_traits>

#include "metagrad/detail/fixed/cut.hpp"
#include "metagrad/fixed/expr.hpp"

namespace metagrad::fixed {

class Tape {
 public:
  Tape() : scope_(detail::Arena::tape()), head_(detail::ad::tape_head()) { ++detail::ad::tapes_alive(); }
  ~Tape() {
    detail::ad::tape_head() = head_;
    --detail::ad::tapes_alive();
  }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

 private:
  detail::Arena::Scope scope_;
  detail::ad::TapeNode* head_;  // the newest cut before this tape
};

// e evaluated now into the innermost live tape, as a leaf that fixed::grad differentiates through.
template <Operand E>
auto cut(const E& e) {
  using X = expr_t<E>;
  using T = typename X::value_type;
  using S = typename X::shape;
  static_assert(std::is_trivially_destructible_v<X>,
                "fixed::cut: the expression must be trivially destructible");
  if (!detail::ad::tapes_alive()) throw std::logic_error("fixed::cut: no fx::Tape is alive on this thread");
  detail::Arena& a = detail::Arena::tape();
  T* value = a.alloc<T>(S::size);
  detail::assign(value, e.expr());
  const void* expr = new (a.alloc<X>(1)) X(e.expr());
  auto* n = new (a.alloc<detail::ad::TapeNode>(1)) detail::ad::TapeNode{
      detail::ad::tape_head(), expr, nullptr, sizeof(T) * S::size, nullptr, false, value, {}};
  if constexpr (std::is_floating_point_v<T>) n->backward = &detail::ad::backward_of<X>;
  detail::ad::tape_head() = n;
  return Expr<op::Cut<T, S>>(op::Cut<T, S>{{value}, n});
}

}  // namespace metagrad::fixed
