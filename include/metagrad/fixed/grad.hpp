#pragma once
// fixed::grad: reverse-mode differentiation of a static expression, planned at compile time.
//
//   auto [gw1, gb1, gw2] = fixed::grad(loss, w1, b1, w2);       // fixed::Tensors, the params' shapes
//   T l = fixed::grad_into(std::tie(gw1, gb1, gw2), loss, w1, b1, w2);  // into existing tensors
//
// The loss is one Expr tree (held by value, as every static expression). Its nodes are numbered
// in preorder at compile time; each node's gradient is an expression type built by its Vjp
// (vjp.hpp) from its parent's, and is evaluated only where it must be:
// - at a parameter: a leaf whose data pointer is one of the parameters' (identity, not value: two
//   tensors of one shape are different parameters); a parameter met twice accumulates;
// - where it feeds two differentiable children, or a reduction or matmul: materialised once into
//   the arena unless it is already a plain tensor read, so no sub-expression is recomputed per use;
// - at a subtree that occurs more than once (log_softmax uses its input three times): equal copies
//   (same type, same leaves and constants) are one node, whose gradients are summed in a buffer
//   before it is differentiated once, after every node above it (deepest subtrees last).
// Forward values the rules need come from the forward tree with each reduction or matmul replaced
// by its value, computed once (equal copies share it). No runtime graph is built: the walk is
// unrolled at compile time and its only state is a few pointer arrays on the stack. Temporaries
// live in the per-thread arena, which stops allocating once it has grown to a step's high-water
// mark, so a training step that reuses its gradient tensors allocates nothing after the first.
// The results are tensors, not the final gradient expressions: those read such temporaries, which
// live only as long as the call.
#include <algorithm>
#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/fixed/tensor.hpp"
#include "metagrad/fixed/vjp.hpp"

namespace metagrad::fixed {

namespace detail::ad {
namespace mp = boost::mp11;

template <class E>
struct preorder;
template <class Op, class... C>
struct preorder<Expr<Op, C...>> {
  using type = mp::mp_append<mp::mp_list<Expr<Op, C...>>, typename preorder<C>::type...>;
};
template <class E>
using nodes_t = typename preorder<E>::type;
template <class E>
inline constexpr std::size_t count = mp::mp_size<nodes_t<E>>::value;

template <class E>
using is_leaf = std::bool_constant<kind<E>::leaf>;
template <class E>
inline constexpr bool has_leaf = mp::mp_any_of<nodes_t<E>, is_leaf>::value;

// Preorder number of child I relative to its parent E.
template <class E, std::size_t I>
inline constexpr std::size_t child_offset = []<std::size_t... J>(std::index_sequence<J...>) {
  return (std::size_t{1} + ... + count<mp::mp_at_c<typename E::children_types, J>>);
}
(std::make_index_sequence<I>{});

template <class E>
inline constexpr std::size_t arity_of = mp::mp_size<typename E::children_types>::value;

// The node numbered Id below e.
template <std::size_t Id, class E>
const auto& at(const E& e) {
  if constexpr (Id == 0) {
    return e;
  } else {
    constexpr std::size_t I = []<std::size_t... J>(std::index_sequence<J...>) {
      std::size_t i = 0;
      ((i = child_offset<E, J> <= Id ? J : i), ...);
      return i;
    }
    (std::make_index_sequence<arity_of<E>>{});
    return at<Id - child_offset<E, I>>(std::get<I>(e.children()));
  }
}

template <class E>
struct height;
template <class Op, class... C>
struct height<Expr<Op, C...>> {
  static constexpr std::size_t value = std::max({std::size_t{0}, (1 + height<C>::value)...});
};

// Same type, same leaves and constants: the same value.
template <class E>
bool equal(const E& a, const E& b) {
  if constexpr (kind<E>::leaf)
    return a.op.data == b.op.data;
  else if constexpr (kind<E>::constant)
    return a.op.value == b.op.value;
  else
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (equal(std::get<I>(a.children()), std::get<I>(b.children())) && ...);
    }
  (std::make_index_sequence<arity_of<E>>{});
}

// Plain reads of a buffer: re-reading them per use costs nothing, so they are never materialised.
template <class E>
struct cheap : std::bool_constant<kind<E>::leaf || kind<E>::constant> {};
template <MovementOps M, auto Arg, class C>
struct cheap<Expr<op::Move<M, Arg>, C>> : cheap<C> {};

template <class T, class S>
auto leaf(const T* p) {
  return Expr<op::Leaf<T, S>>(op::Leaf<T, S>{p});
}

template <class R, class... P>
class Backward {
  using Ns = nodes_t<R>;
  static constexpr std::size_t N = count<R>;
  template <std::size_t Id>
  using node_t = mp::mp_at_c<Ns, Id>;
  template <class Id>
  using is_shared =
      std::bool_constant<Id::value != 0 && !kind<node_t<Id::value>>::leaf && has_leaf<node_t<Id::value>> &&
                         (mp::mp_count<Ns, node_t<Id::value>>::value > 1)>;
  template <class Id>
  using is_stored = std::bool_constant<is_shared<Id>::value || materialised<node_t<Id::value>>>;
  template <class A, class B>
  using higher = std::bool_constant<(height<node_t<A::value>>::value > height<node_t<B::value>>::value)>;
  // Nodes whose equal copies are found at run time, and the shared ones deepest-subtree last.
  using stored = mp::mp_copy_if<mp::mp_iota_c<N>, is_stored>;
  using shared_order = mp::mp_sort<mp::mp_copy_if<mp::mp_iota_c<N>, is_shared>, higher>;
  template <std::size_t Id>
  struct same_as {
    template <class J>
    using fn = std::is_same<node_t<J::value>, node_t<Id>>;
  };

 public:
  using T = typename R::value_type;
  using Out = std::tuple<TensorOf<P>&...>;

  Backward(const R& root, Out out, const P&... params) : root_(root), out_(out), params_(params...) {}

  T run() {
    mp::mp_for_each<stored>([&](auto id) {  // equal copies point at the first one
      constexpr std::size_t Id = decltype(id)::value;
      rep_[Id] = Id;
      bool found = false;
      mp::mp_for_each<mp::mp_copy_if_q<mp::mp_iota_c<Id>, same_as<Id>>>([&](auto j) {
        if (!found && equal(at<decltype(j)::value>(root_), at<Id>(root_)))
          rep_[Id] = rep_[decltype(j)::value], found = true;
      });
    });
    T loss;
    detail::assign(&loss, cached<0>(root_));
    back<0>(root_, Expr<op::Const<T, typename R::shape>>(op::Const<T, typename R::shape>{T(1)}));
    mp::mp_for_each<shared_order>([&](auto id) {
      constexpr std::size_t Id = decltype(id)::value;
      using E = node_t<Id>;
      if (rep_[Id] == Id && grad_[Id])
        expand<Id>(at<Id>(root_), leaf<typename E::value_type, typename E::shape>(
                                      static_cast<const typename E::value_type*>(grad_[Id])));
    });
    [&]<std::size_t... K>(std::index_sequence<K...>) {  // parameters the loss does not read
      ((written_[K] ? void() : std::fill(std::get<K>(out_).begin(), std::get<K>(out_).end(), T(0))), ...);
    }
    (std::index_sequence_for<P...>{});
    return loss;
  }

  // Node Id as the rules see it: its value and its children's (reductions already computed).
  template <std::size_t Id, class E>
  struct NodeRef {
    Backward& b;
    const E& e;
    template <std::size_t I>
    using child_t = mp::mp_at_c<typename E::children_types, I>;
    auto out() const { return b.template cached<Id>(e); }
    template <std::size_t I>
    auto x() const {
      return b.template cached<Id + child_offset<E, I>>(std::get<I>(e.children()));
    }
  };

  template <std::size_t Id, class E>
  auto cached(const E& e) {
    if constexpr (kind<E>::leaf || kind<E>::constant) {
      return e;
    } else if constexpr (materialised<E>) {
      using V = typename E::value_type;
      const std::size_t r = rep_[Id];
      if (!value_[r]) {
        V* buf = Arena::local().alloc<V>(E::shape::size);
        Materialise<typename E::op_type>::run(buf, rebuild<Id>(e));
        value_[r] = buf;
      }
      return leaf<V, typename E::shape>(static_cast<const V*>(value_[r]));
    } else {
      return rebuild<Id>(e);
    }
  }

 private:
  template <std::size_t Id, class E>
  auto rebuild(const E& e) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      using Node =
          Expr<typename E::op_type, decltype(cached<Id + child_offset<E, I>>(std::get<I>(e.children())))...>;
      return Node(e.op, cached<Id + child_offset<E, I>>(std::get<I>(e.children()))...);
    }
    (std::make_index_sequence<arity_of<E>>{});
  }

  // Is some parameter a leaf below e?
  template <class E>
  bool needs(const E& e) const {
    if constexpr (kind<E>::leaf) {
      return [&]<std::size_t... K>(std::index_sequence<K...>) { return (is_param<K>(e) || ...); }
      (std::index_sequence_for<P...>{});
    } else if constexpr (!has_leaf<E>) {
      return false;
    } else {
      return std::apply([&](const auto&... c) { return (needs(c) || ...); }, e.children());
    }
  }

  template <std::size_t K, class E>
  bool is_param(const E& e) const {
    if constexpr (std::is_same_v<decltype(std::get<K>(params_).expr()), E>)
      return std::get<K>(params_).data() == e.op.data;
    else
      return false;
  }

  template <class G>
  auto stash(const G& g) {
    using V = typename G::value_type;
    V* buf = Arena::local().alloc<V>(G::shape::size);
    detail::assign(buf, g);
    return leaf<V, typename G::shape>(buf);
  }

  template <std::size_t Id, class E, class G>
  void back(const E& e, const G& g) {
    if constexpr (std::is_same_v<G, none> || !has_leaf<E>) {
      return;
    } else if constexpr (kind<E>::leaf) {
      [&]<std::size_t... K>(std::index_sequence<K...>) { (to_param<K>(e, g), ...); }
      (std::index_sequence_for<P...>{});
    } else {
      static_assert(std::is_same_v<typename G::shape, typename E::shape>,
                    "fixed::grad: a rule gave a gradient of the wrong shape");
      if (!needs(e)) return;
      if constexpr (is_shared<mp::mp_size_t<Id>>::value) {  // summed now, differentiated once later
        using V = typename E::value_type;
        const std::size_t r = rep_[Id];
        if (!grad_[r]) {
          V* buf = Arena::local().alloc<V>(E::shape::size);
          detail::assign(buf, g);
          grad_[r] = buf;
        } else {
          V* buf = static_cast<V*>(grad_[r]);
          detail::assign(buf, leaf<V, typename E::shape>(buf) + g);
        }
      } else {
        expand<Id>(e, g);
      }
    }
  }

  template <std::size_t Id, class E, class G>
  void expand(const E& e, const G& g) {
    constexpr std::size_t differentiable = []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + (has_leaf<mp::mp_at_c<typename E::children_types, I>> ? 1 : 0));
    }
    (std::make_index_sequence<arity_of<E>>{});
    if constexpr (!cheap<G>::value && (differentiable > 1 || materialised<E>)) {
      expand<Id>(e, stash(g));
    } else {
      NodeRef<Id, E> n{*this, e};
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (back<Id + child_offset<E, I>>(std::get<I>(e.children()),
                                       Vjp<typename E::op_type>::template grad<I>(n, g)),
         ...);
      }
      (std::make_index_sequence<arity_of<E>>{});
    }
  }

  template <std::size_t K, class E, class G>
  void to_param(const E& e, const G& g) {
    using Param = std::tuple_element_t<K, std::tuple<P...>>;
    if constexpr (std::is_same_v<decltype(std::declval<const Param&>().expr()), E>) {
      static_assert(std::is_same_v<typename G::shape, typename Param::shape>,
                    "fixed::grad: a gradient's shape differs from its parameter's");
      if (!is_param<K>(e)) return;
      if (written_[K])
        std::get<K>(out_) += g;
      else
        std::get<K>(out_) = g;
      written_[K] = true;
    }
  }

  const R& root_;
  Out out_;
  std::tuple<const P&...> params_;
  std::array<bool, sizeof...(P)> written_{};
  std::array<std::size_t, N> rep_{};
  std::array<const void*, N> value_{};  // forward values of reductions and matmuls (by rep_)
  std::array<void*, N> grad_{};         // summed gradients of shared subtrees (by rep_)
};

template <class T>
struct is_tensor : std::false_type {};
template <class T, index_t... D>
struct is_tensor<Tensor<T, D...>> : std::true_type {};
}  // namespace detail::ad

// d loss / d params into `out` (a tuple of references to tensors of the parameters' types, e.g.
// std::tie(gw, gb), none of them a parameter); returns the loss. Parameters the loss does not read
// get zeros.
template <Operand L, class... P>
typename expr_t<L>::value_type grad_into(std::tuple<TensorOf<P>&...> out, const L& loss, const P&... params) {
  using E = expr_t<L>;
  static_assert(E::shape::size == 1, "fixed::grad: the loss must be a single value (sum or mean it)");
  static_assert(std::is_floating_point_v<typename E::value_type>,
                "fixed::grad: the loss must be floating-point");
  static_assert((detail::ad::is_tensor<P>::value && ...), "fixed::grad: parameters must be fixed::Tensors");
  static_assert((std::is_same_v<typename P::value_type, typename E::value_type> && ...),
                "fixed::grad: parameters must have the loss's element type");
  detail::Arena::Scope scope;
  const E& root = loss.expr();
  return detail::ad::Backward<E, P...>(root, out, params...).run();
}

// The gradients of loss with respect to params, as a std::tuple of tensors of their types.
template <Operand L, class... P>
std::tuple<TensorOf<P>...> grad(const L& loss, const P&... params) {
  std::tuple<TensorOf<P>...> g;
  std::apply([&](auto&... t) { grad_into(std::tie(t...), loss, params...); }, g);
  return g;
}

}  // namespace metagrad::fixed
