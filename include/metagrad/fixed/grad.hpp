#pragma once
// fixed::grad: reverse-mode differentiation of a static expression, planned at compile time.
//
//   auto [gw1, gb1, gw2] = fixed::grad(loss, w1, b1, w2);  // gradient expressions, lazily evaluated
//   w2 -= lr * gw2;                                        // ... e.g. fused into an update
//   T l = fixed::grad_into(std::tie(tw1, tb1, tw2), loss, w1, b1, w2);  // into tensors
//   fixed::vjp_into(std::tie(dx, dw), conv2d(x, w), g, x, w);  // given the output's gradient g
//
// The loss is one Expr tree (held by value, as every static expression). Its nodes are numbered
// in preorder at compile time; each node's gradient is an expression type built by its Vjp
// (vjp.hpp) from its parent's, and is evaluated only where it must be:
// - where it feeds two differentiable children, or a reduction or matmul: materialised once into
//   the arena unless it is already a plain tensor read, so no sub-expression is recomputed per use;
// - at a shared subtree (log_softmax reads its input twice, once through max): equal copies (same
//   type, same leaves and constants) are one node, whose gradients are summed in a buffer before
//   it is differentiated once, after every node above it (deepest subtrees last);
// - nowhere else: what reaches a leaf of a parameter's type is a term, an unevaluated expression.
// A parameter's gradient is the sum of its terms, each gated (op::Gate) by whether its leaf is that
// parameter (identity by data pointer, not type: two tensors of one shape are two parameters) and
// counts (a later equal copy of a shared subtree hands its gradient to the first); an off gate
// skips its term unevaluated. Forward values the rules need come from the forward tree with each
// reduction or matmul replaced by its value, computed once (equal copies share it). No runtime
// graph is built: the walk is unrolled at compile time and its only state is a few pointer arrays.
// Temporaries live in the per-thread arena, which stops allocating once it has grown to a step's
// high-water mark, so a training step allocates nothing after the first.
// A loss that reads a cut (fixed/cut.hpp) is walked, then each cut it reached, newest first. A
// loss tree of more than METAGRAD_FIXED_MAX_NODES nodes (4096 unless defined before the include)
// is refused with a compile error that asks for fx::cut: its plan would cost minutes and gigabytes.
#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/detail/fixed/cut.hpp"
#include "metagrad/detail/fixed/grad.hpp"
#include "metagrad/fixed/conv2d_vjp.hpp"  // conv2d's rule: its own ops, in their own file
#include "metagrad/fixed/tensor.hpp"
#include "metagrad/fixed/vjp.hpp"

namespace metagrad::fixed {

// The gradients of a loss with respect to parameters, as expression types (tuple-like:
// `auto [gw, gb] = fixed::grad(loss, w, b);`, or `get<K>(g)`), and the loss's value. Building it
// runs the forward pass and the backward pass up to each gradient's last fused expression; the
// intermediates it keeps live in the per-thread arena until it is destroyed, so it is neither
// copied nor moved (it lives where fixed::grad's result is bound). The expressions read the loss's
// tensors when evaluated: evaluate them (into tensors, or into the update of their own parameter)
// before writing any tensor the loss reads.
template <class E, class... P>
class Gradients {
  using Plan = detail::ad::Backward<E, P...>;
  using Result = decltype(std::declval<Plan&>().run());
  template <std::size_t K>
  using Expression = decltype(std::declval<const Plan&>().template gradient<K>(
      std::declval<const decltype(Result::terms)&>()));

 public:
  using value_type = typename E::value_type;

  Gradients(const E& loss, const P&... params)
      : plan_(loss, params...), result_(plan_.run()), exprs_(gradients(std::index_sequence_for<P...>{})) {}
  Gradients(const Gradients&) = delete;
  Gradients& operator=(const Gradients&) = delete;

  value_type loss() const { return result_.loss; }
  template <std::size_t K>
  const auto& get() const {
    return detail::ad::slot<K>(exprs_);
  }
  // The gradients into tensors of their parameters' types: each one's terms assigned one by one,
  // ungated.
  void into(std::tuple<TensorOf<P>&...> out) const {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (plan_.template gradient_into<K>(result_.terms, std::get<K>(out)), ...);
    }
    (std::index_sequence_for<P...>{});
  }

 private:
  template <std::size_t... K>
  static auto types(std::index_sequence<K...>) -> detail::ad::Pack<Expression<K>...>;
  template <std::size_t... K>
  auto gradients(std::index_sequence<K...>) const {
    return decltype(types(std::index_sequence_for<P...>{})){{plan_.template gradient<K>(result_.terms)}...};
  }

  detail::Arena::Scope scope_;  // first: everything below allocates in it
  Plan plan_;
  Result result_;
  decltype(types(std::index_sequence_for<P...>{})) exprs_;
};

// A loss that reads a cut (fixed/cut.hpp): each gradient summed into an arena buffer by the walks
// over the loss and the tape, and seen as a leaf over it.
template <class E, class... P>
requires detail::ad::reads_cut<E>::value class Gradients<E, P...> {
  using T = typename E::value_type;

 public:
  using value_type = T;

  Gradients(const E& loss, const P&... params)
      : bufs_{detail::Arena::local().alloc<T>(P::size)...},
        loss_(detail::ad::into_params<P...>({params.data()...}, bufs_,
                                            [&](const auto& s) { return detail::ad::loss_terms(loss, s); })),
        exprs_(leaves(std::index_sequence_for<P...>{})) {}
  Gradients(const Gradients&) = delete;
  Gradients& operator=(const Gradients&) = delete;

  value_type loss() const { return loss_; }
  template <std::size_t K>
  const auto& get() const {
    return std::get<K>(exprs_);
  }
  void into(std::tuple<TensorOf<P>&...> out) const {
    [&]<std::size_t... K>(std::index_sequence<K...>) { ((std::get<K>(out) = std::get<K>(exprs_)), ...); }
    (std::index_sequence_for<P...>{});
  }

 private:
  template <std::size_t... K>
  auto leaves(std::index_sequence<K...>) const {
    return std::tuple{detail::ad::leaf<T, typename P::shape>(static_cast<const T*>(bufs_[K]))...};
  }

  detail::Arena::Scope scope_;  // first: the gradients and the cuts' gradients live in it
  std::array<void*, sizeof...(P)> bufs_;
  T loss_;
  std::tuple<Expr<op::Leaf<T, typename P::shape>>...> exprs_;
};

template <std::size_t K, class E, class... P>
const auto& get(const Gradients<E, P...>& g) {
  return g.template get<K>();
}

// d loss / d params as gradient expressions (see Gradients).
template <Operand L, class... P>
auto grad(const L& loss, const P&... params) {
  detail::ad::check_grad_args<L, P...>();
  if constexpr (detail::ad::small_enough<expr_t<L>>)  // else only the check's error, not gigabytes
    return Gradients<expr_t<L>, P...>(loss.expr(), params...);
}

// d loss / d params into `out` (a tuple of references to tensors of the parameters' types, e.g.
// std::tie(gw, gb), none of them a parameter); returns the loss. Parameters the loss does not read
// get zeros.
// (The walk's terms go straight into the tensors: Gradients' gated expressions, never evaluated
// here, are not built; their types were a third of the W5 step's compile time with clang.)
template <Operand L, class... P>
typename expr_t<L>::value_type grad_into(std::tuple<TensorOf<P>&...> out, const L& loss, const P&... params) {
  detail::ad::check_grad_args<L, P...>();
  if constexpr (detail::ad::reads_cut<expr_t<L>>::value) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return detail::ad::into_params<P...>(
          {params.data()...}, {std::get<K>(out).data()...},
          [&](const auto& s) { return detail::ad::loss_terms(loss.expr(), s); });
    }
    (std::index_sequence_for<P...>{});
  } else if constexpr (!detail::ad::small_enough<expr_t<L>>) {
    return {};
  } else {
    detail::Arena::Scope scope;
    detail::ad::Backward<expr_t<L>, P...> plan(loss.expr(), params...);
    auto result = plan.run();
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (plan.template gradient_into<K>(result.terms, std::get<K>(out)), ...);
    }
    (std::index_sequence_for<P...>{});
    return result.loss;
  }
}

namespace err {
struct vjp {
  static constexpr const char* join = " with gradient ";
};
}  // namespace err

// The vector-Jacobian product of an output y with a cotangent g of y's shape: d sum(y * g) / d params
// into `out` (PyTorch's y.backward(g), JAX's vjp), without evaluating y itself, only what the rules
// read. A layer's backward step given its output's gradient: where grad_into's loss would need the
// forward again (a conv's output, already computed for the next layer), this does not.
template <Operand Y, Operand G, class... P>
void vjp_into(std::tuple<TensorOf<P>&...> out, const Y& y, const G& g, const P&... params) {
  using S = typename expr_t<Y>::shape;
  using GS = typename expr_t<G>::shape;
  constexpr bool ok = std::is_same_v<S, GS>;
  METAGRAD_FIXED_SHAPE_CHECK(ok, "fixed: vjp_into: the gradient must have the output shape", err::vjp, S, GS);
  detail::ad::check_vjp_args<Y, G, P...>();
  if constexpr (ok && detail::ad::reads_cut<expr_t<Y>>::value) {
    const expr_t<Y> root = y.expr();
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      detail::ad::into_params<P...>({params.data()...}, {std::get<K>(out).data()...}, [&](const auto& s) {
        detail::ad::Backward<expr_t<Y>> plan(root);
        detail::ad::route(plan.run_from(g.expr()), s);
        return 0;
      });
    }
    (std::index_sequence_for<P...>{});
  } else if constexpr (ok && detail::ad::small_enough<expr_t<Y>>) {
    detail::Arena::Scope scope;
    const expr_t<Y> root = y.expr();
    detail::ad::Backward<expr_t<Y>, P...> plan(root, params...);
    auto terms = plan.run_from(g.expr());
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (plan.template gradient_into<K>(terms, std::get<K>(out)), ...);
    }
    (std::index_sequence_for<P...>{});
  }
}

// The gradients evaluated: a std::tuple of tensors of the parameters' types.
template <class E, class... P>
std::tuple<TensorOf<P>...> eval(const Gradients<E, P...>& g) {
  std::tuple<TensorOf<P>...> out;
  std::apply([&](auto&... t) { g.into(std::tie(t...)); }, out);
  return out;
}

}  // namespace metagrad::fixed

template <class E, class... P>
struct std::tuple_size<metagrad::fixed::Gradients<E, P...>>
    : std::integral_constant<std::size_t, sizeof...(P)> {};
template <std::size_t K, class E, class... P>
struct std::tuple_element<K, metagrad::fixed::Gradients<E, P...>> {
  using type =
      std::remove_reference_t<decltype(get<K>(std::declval<const metagrad::fixed::Gradients<E, P...>&>()))>;
};
