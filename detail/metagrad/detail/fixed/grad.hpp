#pragma once
// The internals of fixed/grad.hpp: the compile-time plan of the backward walk (preorder numbers,
// links, shared subtrees), the walk itself (Backward) and its lists of gradient terms.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/fixed/conv2d_vjp.hpp"  // every rule: vjp.hpp's and conv2d's
#include "metagrad/fixed/tensor.hpp"
#include "metagrad/fixed/vjp.hpp"

namespace metagrad::fixed::detail::ad {
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

// Preorder number of child I relative to its parent E.
template <class E, std::size_t I>
inline constexpr std::size_t child_offset = []<std::size_t... J>(std::index_sequence<J...>) {
  return (std::size_t{1} + ... + count<mp::mp_at_c<typename E::children_types, J>>);
}
(std::make_index_sequence<I>{});

template <class E>
inline constexpr std::size_t arity_of = E::arity;

// The preorder number of the first node of type V in Ns (builtin type comparisons, no class
// templates instantiated).
template <class V, class... Ns>
constexpr std::size_t first_of(mp::mp_list<Ns...>) {
  constexpr bool same[] = {std::is_same_v<Ns, V>...};
  std::size_t i = 0;
  while (!same[i]) ++i;
  return i;
}

// The parent and the child slot of every node of R, in preorder: node id's children follow it,
// each after the subtree of the one before.
template <class R>
struct links {
  struct arrays {
    std::array<std::size_t, count<R>> parent{}, slot{};
  };
  static constexpr arrays value = []<std::size_t... I>(std::index_sequence<I...>) {
    using Ns = nodes_t<R>;
    const std::size_t size[] = {count<mp::mp_at_c<Ns, I>>...}, arity[] = {arity_of<mp::mp_at_c<Ns, I>>...};
    arrays a;
    for (std::size_t id = 0; id < sizeof...(I); ++id)
      for (std::size_t k = 0, c = id + 1; k < arity[id]; c += size[c], ++k) a.parent[c] = id, a.slot[c] = k;
    return a;
  }
  (std::make_index_sequence<count<R>>{});
};

// Same type, same leaves and constants: the same value. Constants bit for bit: 0 and -0 differ
// (under a divide, a max's forward), and a NaN is its own.
template <class E>
bool equal(const E& a, const E& b) {
  if constexpr (kind<E>::leaf)
    return a.op.data == b.op.data;
  else if constexpr (kind<E>::constant)
    return std::memcmp(&a.op.value, &b.op.value, sizeof a.op.value) == 0;
  else if constexpr (arity_of<E> == 1)
    return equal(a.kids.k0, b.kids.k0);
  else if constexpr (arity_of<E> == 2)
    return equal(a.kids.k0, b.kids.k0) && equal(a.kids.k1, b.kids.k1);
  else
    return equal(a.kids.k0, b.kids.k0) && equal(a.kids.k1, b.kids.k1) && equal(a.kids.k2, b.kids.k2);
}

// A cut's value (fixed/cut.hpp), and whether an expression reads one: then fixed::grad goes
// through the tape (one trait per node type, where a preorder list would be the size of the tree).
template <class E>
struct is_cut : std::false_type {};
template <class T, class S>
struct is_cut<Expr<op::Cut<T, S>>> : std::true_type {};
template <class E>
struct reads_cut;
template <class Op, class... C>
struct reads_cut<Expr<Op, C...>>
    : std::bool_constant<(is_cut<Expr<Op, C...>>::value || ... || reads_cut<C>::value)> {};

// Plain reads of a buffer: re-reading them per use costs nothing, so they are never materialised.
template <class E>
struct cheap : std::bool_constant<kind<E>::leaf || kind<E>::constant> {};
template <MovementOps M, auto Arg, class C>
struct cheap<Expr<op::Move<M, Arg>, C>> : cheap<C> {};

// A gradient that is a plain read of a buffer (a root gradient handed through a sum or a residual
// unchanged): a sink with no gradient yet may take the buffer itself, not a copy.
template <class G>
struct plain_read : std::false_type {};
template <class T, class S>
struct plain_read<Expr<op::Leaf<T, S>>> : std::true_type {};

// A view of a leaf that its gradient passes through unchanged but for where it lies (reshapes,
// permutes, slices, pads; not a broadcast, whose gradient is a sum).
template <class E>
struct view_of_leaf : std::bool_constant<kind<E>::leaf> {};
template <MovementOps M, auto Arg, class C>
struct view_of_leaf<Expr<op::Move<M, Arg>, C>>
    : std::bool_constant<M != MovementOps::EXPAND && view_of_leaf<C>::value> {};

template <class T, class S>
auto leaf(const T* p) {
  return Expr<op::Leaf<T, S>>(op::Leaf<T, S>{p});
}

// A term that is a pad (under reshapes, which read a contiguous buffer alike): a slice's gradient,
// such as one head's of a packed q, k, v. Its inner expression is what it writes; the rest is 0.
template <class G>
struct padded_term : std::false_type {};
template <Pairs P, class C>
struct padded_term<Expr<op::Move<MovementOps::PAD, P>, C>> : std::true_type {
  static constexpr Pairs pads = P;
  using padded = typename Expr<op::Move<MovementOps::PAD, P>, C>::shape;  // the buffer's shape
  static const C& inner(const Expr<op::Move<MovementOps::PAD, P>, C>& g) { return g.kids.k0; }
};
template <Dims D, class C>
struct padded_term<Expr<op::Move<MovementOps::RESHAPE, D>, C>> : padded_term<C> {
  static const auto& inner(const Expr<op::Move<MovementOps::RESHAPE, D>, C>& g) {
    return padded_term<C>::inner(g.kids.k0);
  }
};

// The inner expression evaluated alone, then added into (or written to) its region of buf: runs of
// whole contiguous rows, so the pad's zeros are neither computed nor added (an add over the whole
// buffer, its mask tested per element, was three passes of the packed q, k, v's gradient).
template <class V, class G>
void add_region(V* buf, bool written, const G& g, bool zero_gaps = true) {
  using PT = padded_term<G>;
  static constexpr Dims P = PT::padded::dims;
  using Q = typename std::remove_cvref_t<decltype(PT::inner(g))>::shape;
  static constexpr std::size_t R = P.size();
  // The contiguous run: the innermost axes the region spans whole, times the next axis's extent.
  static constexpr std::size_t first_full = [] {
    std::size_t d = R;
    while (d > 0 && Q::dims[d - 1] == P[d - 1]) --d;
    return d;
  }();
  constexpr index_t run = [] {
    index_t n = 1;
    for (std::size_t d = first_full == 0 ? 0 : first_full - 1; d < R; ++d) n *= Q::dims[d];
    return n;
  }();
  constexpr std::size_t outer = first_full == 0 ? 0 : first_full - 1;  // axes [0, outer) step by odometer
  static constexpr std::array<index_t, R> stride = [] {
    std::array<index_t, R> s{};
    index_t k = 1;
    for (std::size_t d = R; d-- > 0;) s[d] = k, k *= P[d];
    return s;
  }();
  constexpr index_t base = [] {
    index_t o = 0;
    for (std::size_t d = 0; d < R; ++d) o += PT::pads[d].first * stride[d];
    return o;
  }();
  // The region as a view of buf: the inner expression evaluated straight into it.
  static constexpr View region = [] {
    Dims st;
    for (std::size_t d = 0; d < R; ++d) st.push_back(stride[d]);
    return View(Q::dims, st, base);
  }();
  // f(r, dst) for each run r of the region, dst its place in buf, in increasing address order.
  auto each_run = [&](auto f) {
    std::array<index_t, R> pos{};
    for (index_t r = 0; r < Q::size / run; ++r) {
      index_t at = base;
      for (std::size_t d = 0; d < outer; ++d) at += pos[d] * stride[d];
      f(r, buf + at);
      for (std::size_t d = outer; d-- > 0;) {
        if (++pos[d] < Q::dims[d]) break;
        pos[d] = 0;
      }
    }
  };
  // A first write zeroes the gaps between the runs, not the whole (after the inner expression,
  // which may read buf, is evaluated).
  auto clear_gaps = [&] {
    if (written || !zero_gaps) return;
    V* gap = buf;
    each_run([&](index_t, V* dst) { std::fill(gap, dst, V(0)), gap = dst + run; });
    std::fill(gap, buf + prod(P), V(0));
  };
  if (!reads(PT::inner(g), buf)) {
    clear_gaps();
    return assign_view<region>(buf, PT::inner(g), written);
  }
  Arena::Scope scope;
  V* tmp = Arena::local().alloc<V>(Q::size);
  detail::assign(tmp, PT::inner(g));
  clear_gaps();
  each_run([&](index_t r, V* __restrict dst) {
    const V* __restrict src = tmp + r * run;
    if (written)
      for (index_t j = 0; j < run; ++j) dst[j] += src[j];
    else
      std::copy(src, src + run, dst);
  });
}

// A padded term whose region spans its buffer but along one axis (a packed q, k, v's head): in each
// of `outer` blocks of ext x inner elements, the axis's [lo, hi).
template <class G, bool = padded_term<G>::value>
struct slab_of : std::false_type {};
template <class G>
struct slab_of<G, true> {
  using PT = padded_term<G>;
  static constexpr Dims P = PT::padded::dims;
  using Q = typename std::remove_cvref_t<decltype(PT::inner(std::declval<const G&>()))>::shape;
  static constexpr std::size_t axis = [] {
    std::size_t a = P.size(), n = 0;
    for (std::size_t d = 0; d < P.size(); ++d)
      if (Q::dims[d] != P[d]) a = d, ++n;
    return n == 1 ? a : P.size();
  }();
  static constexpr bool value = axis < P.size();
  static constexpr index_t span(std::size_t from, std::size_t to) {
    index_t k = 1;
    for (std::size_t d = from; d < to; ++d) k *= P[d];
    return k;
  }
  static constexpr index_t outer = value ? span(0, axis) : 0, ext = value ? P[axis] : 0,
                           inner = value ? span(axis + 1, P.size()) : 0,
                           lo = value ? PT::pads[axis].first : 0, hi = value ? lo + Q::dims[axis] : 0;
};

// g written to buf, or added to what buf holds.
template <class S, class V, class G>
void add_into(V* buf, bool written, const G& g) {
  if constexpr (padded_term<G>::value && std::is_floating_point_v<V>)
    add_region(buf, written, g);
  else if (written)
    detail::assign(buf, leaf<V, S>(buf) + g);
  else
    detail::assign(buf, g);
}

// A gradient that reached a leaf of a parameter's type: its expression, the leaf's data, and
// whether it counts (a later equal copy of a shared subtree hands its gradient to the first copy).
template <class L, class G>
struct Term {
  using leaf_type = L;
  G g;
  const void* at;
  bool on;
};

// The walk's lists of terms: an aggregate of indexed slots, a few instantiations where std::tuple
// and tuple_cat cost hundreds (their constructors' constraints).
template <std::size_t I, class T>
struct Slot {
  T v;
};
template <class Is, class... T>
struct PackOf;
template <std::size_t... I, class... T>
struct PackOf<std::index_sequence<I...>, T...> : Slot<I, T>... {
  static constexpr std::size_t size = sizeof...(T);
};
template <class... T>
using Pack = PackOf<std::index_sequence_for<T...>, T...>;
template <std::size_t I, class T>
constexpr T& slot(Slot<I, T>& s) {
  return s.v;
}
template <std::size_t I, class T>
constexpr const T& slot(const Slot<I, T>& s) {
  return s.v;
}
template <std::size_t I, class T>
T slot_type(const Slot<I, T>&);  // declared only: the element type of slot I
template <std::size_t I, class P>
using element_t = decltype(slot_type<I>(std::declval<const P&>()));

template <std::size_t... I, class... T>
void switch_off(PackOf<std::index_sequence<I...>, T...>& terms) {
  ((slot<I>(terms).on = false), ...);
}
template <std::size_t... I, class... T, class U>
auto append(const PackOf<std::index_sequence<I...>, T...>& p, const U& u) {  // copies: pointers and values
  return Pack<T..., U>{Slot<I, T>{slot<I>(p)}..., Slot<sizeof...(T), U>{u}};
}
// Pack<Pack<a, b>, Pack<>, Pack<c>> as Pack<a, b, c>: where each element comes from, by table.
template <class... P>
struct flat_index {
  static constexpr std::size_t n = (std::size_t{0} + ... + P::size);
  struct at_t {
    std::size_t outer[n + 1], inner[n + 1];
  };
  static constexpr at_t at = [] {
    at_t a{};
    std::size_t k = 0, i = 0;
    for (std::size_t sz : {std::size_t{0}, P::size...}) {
      for (std::size_t j = 0; j < sz; ++j) a.outer[k] = i - 1, a.inner[k++] = j;
      ++i;
    }
    return a;
  }();
};
template <class F, class Parts, std::size_t... K>
auto flatten(const Parts& parts, std::index_sequence<K...>) {
  return Pack<element_t<F::at.inner[K], element_t<F::at.outer[K], Parts>>...>{
      {slot<F::at.inner[K]>(slot<F::at.outer[K]>(parts))}...};
}
template <std::size_t... I, class... P>
auto concat(const PackOf<std::index_sequence<I...>, P...>& parts) {
  using F = flat_index<P...>;
  return flatten<F>(parts, std::make_index_sequence<F::n>{});
}

// What the walk returns: the loss and every term.
template <class T, class Terms>
struct Run {
  T loss;
  Terms terms;
};

template <class R, class... P>
class Backward {
 public:  // the plan's types are public: Mp11's algorithms instantiate them from outside
  using Ns = nodes_t<R>;
  static constexpr std::size_t N = count<R>;
  template <std::size_t Id>
  using node_t = mp::mp_at_c<Ns, Id>;
  using T = typename R::value_type;
  // Only subtrees with a leaf of some parameter's type, or a cut, are differentiated: which leaf is
  // which parameter is known only at run time (by data pointer), so each such leaf gets a gated
  // term. With no parameters named (a cut's recorded backward, where fixed::grad names them
  // later), every leaf of the loss's element type is a candidate.
  using param_leaves = mp::mp_list<decltype(std::declval<const P&>().expr())...>;
  template <class E>
  using is_candidate =
      std::bool_constant<kind<E>::leaf &&
                         (is_cut<E>::value || (sizeof...(P) == 0 ? std::is_same_v<typename E::value_type, T>
                                                                 : mp::mp_contains<param_leaves, E>::value))>;
  template <class E>
  static constexpr bool reaches = mp::mp_any_of<nodes_t<E>, is_candidate>::value;
  template <class E>
  static constexpr std::size_t id_of = first_of<E>(Ns{});  // the first node of E's type
  // The plan as tables over preorder numbers, computed in one constant expression:
  // - shared: with equal copies taken as one node, it has two parents (or is two children of one):
  //   the edges into its copies, as (its parent's type, which child), are not all the same. Its
  //   gradients are then summed before it is differentiated, once;
  // - stored: shared, or materialised (a reduction or matmul, whose forward value is kept);
  // - order: the shared nodes, deepest last; equal heights by preorder, so a first copy precedes
  //   its equals.
  struct Tables {
    bool shared[N], stored[N];
    std::size_t type[N], order[N], n_order, stored_ids[N], n_stored;
  };
  template <std::size_t... I>
  static constexpr Tables make_plan(std::index_sequence<I...>) {
    const auto& L = links<R>::value;
    Tables t{};
    const std::size_t type[] = {id_of<node_t<I>>...};
    const bool leaf[] = {kind<node_t<I>>::leaf...}, plain[] = {view_of_leaf<node_t<I>>::value...},
               mat[] = {materialised<node_t<I>>...}, reach[] = {reaches<node_t<I>>...};
    std::size_t height[N] = {};
    for (std::size_t j = N; j-- > 1;) height[L.parent[j]] = std::max(height[L.parent[j]], height[j] + 1);
    // fan_in[type]: the edges into the type's nodes differ from the first (one pass: the plan is the
    // largest constant expression of a step, and a pass per node made it quadratic)
    std::size_t first[N] = {};  // by type: the first edge into it (0: none yet)
    bool fan_in[N] = {};
    for (std::size_t j = 1; j < N; ++j) {
      const std::size_t f = first[type[j]];
      if (!f)
        first[type[j]] = j;
      else if (type[L.parent[j]] != type[L.parent[f]] || L.slot[j] != L.slot[f])
        fan_in[type[j]] = true;
    }
    for (std::size_t id = 0; id < N; ++id) {
      t.type[id] = type[id];
      // (a view of a leaf is not: its gradients go on to the leaf one by one, where a sum first
      // was a buffer zeroed and added into, and the sink then takes each as a slab, alone; a
      // broadcast is, its gradient a sum reduced once)
      t.shared[id] = !leaf[id] && !plain[id] && reach[id] && fan_in[type[id]];
      t.stored[id] = t.shared[id] || mat[id];
      if (t.stored[id]) t.stored_ids[t.n_stored++] = id;
      if (t.shared[id]) {
        std::size_t k = t.n_order++;
        for (; k > 0 && height[t.order[k - 1]] < height[id]; --k) t.order[k] = t.order[k - 1];
        t.order[k] = id;
      }
    }
    return t;
  }
  static constexpr Tables plan = make_plan(std::make_index_sequence<N>{});
  template <class E>
  static constexpr bool shared = plan.shared[id_of<E>];
  template <std::size_t... K>
  static auto order_list(std::index_sequence<K...>) -> mp::mp_list<mp::mp_size_t<plan.order[K]>...>;
  using shared_order = decltype(order_list(std::make_index_sequence<plan.n_order>{}));
  template <std::size_t... K>
  static auto stored_list(std::index_sequence<K...>) -> std::index_sequence<plan.stored_ids[K]...>;
  using stored = decltype(stored_list(std::make_index_sequence<plan.n_stored>{}));

  Backward(const R& root, const P&... params) : root_(root), params_{params.data()...} {}
  // root_value: the root's forward value where the caller holds it (a cut's), read by the root's
  // rule (exp's, sigmoid's gradient is their value times g) instead of computing the root again.
  Backward(const R& root, const void* root_value, const P&... params)
      : root_(root), params_{params.data()...}, root_value_(root_value) {}

  // The root's value as a leaf: the caller's, else evaluated once into the arena.
  auto root_value() {
    if (!root_value_) {
      T* buf = Arena::local().alloc<T>(R::shape::size);
      detail::assign(buf, rebuild(root_, 0));
      root_value_ = buf;
    }
    return leaf<T, typename R::shape>(static_cast<const T*>(root_value_));
  }

  // The loss, and every term in the order the walk meets them.
  auto run() {
    prepare();
    T loss;
    detail::assign(&loss, cached(root_, 0));
    auto all = walk(Expr<op::Const<T, typename R::shape>>(op::Const<T, typename R::shape>{T(1)}));
    return Run<T, decltype(all)>{loss, all};
  }
  // The terms of sum(root * seed) (seed: root's shape), the root itself left unevaluated.
  template <class G>
  auto run_from(const G& seed) {
    prepare();
    return walk(seed);
  }

  // d loss / d parameter K from the terms: the sum of those reaching a leaf that is parameter K,
  // each gated by that test, which skips the others unevaluated (zeros where no term can).
  template <std::size_t K, class Terms>
  auto gradient(const Terms& terms) const {
    using Param = mp::mp_at_c<mp::mp_list<P...>, K>;
    using S = typename Param::shape;
    using Mine = terms_of<K, Terms>;
    if constexpr (mp::mp_empty<Mine>::value) {
      return Expr<op::Const<T, S>>(op::Const<T, S>{T(0)});
    } else {
      const void* p = params_[K];
      return [&]<class... I>(mp::mp_list<I...>) { return (... + gate(slot<I::value>(terms), p)); }(Mine{});
    }
  }
  // The same into a tensor: the counting terms assigned and added, without gates.
  template <std::size_t K, class Terms, class Out>
  void gradient_into(const Terms& terms, Out& out) const {
    const void* p = params_[K];
    bool written = false;
    [&]<class... I>(mp::mp_list<I...>) {
      [[maybe_unused]] constexpr std::size_t first = mp::mp_front<mp::mp_list<I..., mp::mp_size_t<0>>>::value;
      (add_term<I::value == first>(slot<I::value>(terms), p, out, written), ...);
    }(terms_of<K, Terms>{});
    if (!written) std::fill(out.begin(), out.end(), T(0));
  }

  // Node `id` as the rules see it: its value and its children's (reductions already computed).
  // Node numbers are run-time values, so equal subtrees share one instantiation of the walk.
  template <class E>
  struct NodeRef {
    Backward& b;
    const E& e;
    std::size_t id;
    template <std::size_t I>
    using child_t = mp::mp_at_c<typename E::children_types, I>;
    const auto& op() const { return e.op; }
    auto out() const {
      if constexpr (std::is_same_v<E, R> && !kind<E>::leaf && !kind<E>::constant && !materialised<E>)
        return b.root_value();  // E is the root: no proper subtree has the root's type
      else
        return b.cached(e, id);
    }
    template <std::size_t I>
    auto x() const {
      return b.cached(fixed::child<I>(e), id + child_offset<E, I>);
    }
  };

  template <class E>
  auto cached(const E& e, std::size_t id) {
    if constexpr (kind<E>::leaf || kind<E>::constant) {
      return e;
    } else if constexpr (materialised<E>) {
      using V = typename E::value_type;
      const std::size_t r = rep_[id];
      if (!value_[r]) {
        V* buf = Arena::local().alloc<V>(E::shape::size);
        Materialise<typename E::op_type>::run(buf, rebuild(e, id));
        value_[r] = buf;
      }
      return leaf<V, typename E::shape>(static_cast<const V*>(value_[r]));
    } else {
      return rebuild(e, id);
    }
  }

 private:
  template <std::size_t K, class Terms>
  struct reaching {
    template <class I>
    using fn = std::is_same<typename element_t<I::value, Terms>::leaf_type, mp::mp_at_c<param_leaves, K>>;
  };
  // The positions of the terms that may reach parameter K (a leaf of its type).
  template <std::size_t K, class Terms>
  using terms_of = mp::mp_copy_if_q<mp::mp_iota_c<Terms::size>, reaching<K, Terms>>;
  // One term into out if it counts: assigned if it is the first to, else added. The first term of
  // a list only ever assigns, so no adding loop is compiled for it (a parameter read once: none).
  template <bool First, class Term, class Out>
  static void add_term(const Term& t, const void* p, Out& out, bool& written) {
    if (!counts(t, p)) return;
    if constexpr (!First) {
      if (written) {
        out += t.g;
        return;
      }
    }
    out = t.g;
    written = true;
  }
  template <class Term>
  static bool counts(const Term& t, const void* param) {
    return t.on && t.at == param;
  }
  template <class Term>
  static auto gate(const Term& t, const void* param) {
    return Expr<op::Gate, decltype(t.g)>(op::Gate{counts(t, param)}, t.g);
  }

  void prepare() {
    locate(root_, 0);
    [&]<std::size_t... Id>(std::index_sequence<Id...>) {  // equal copies point at the first one
      (find_rep<node_t<Id>>(Id), ...);
    }
    (stored{});
  }
  template <class G>
  auto walk(const G& seed) {
    auto top = back(root_, seed, 0);
    auto below = concat(expand_shared(Pack<>{}, shared_order{}));
    return concat(Pack<decltype(top), decltype(below)>{{top}, {below}});
  }

  template <class E>
  auto rebuild(const E& e, std::size_t id) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      using Node = Expr<typename E::op_type, decltype(cached(fixed::child<I>(e), id))...>;
      return Node(e.op, cached(fixed::child<I>(e), id + child_offset<E, I>)...);
    }
    (std::make_index_sequence<arity_of<E>>{});
  }

  template <class G>
  auto stash(const G& g) {
    using V = typename G::value_type;
    V* buf = Arena::local().alloc<V>(G::shape::size);
    detail::assign(buf, g);
    return leaf<V, typename G::shape>(buf);
  }

  template <class E, class G>
  auto back(const E& e, const G& g, std::size_t id) {
    if constexpr (std::is_same_v<G, none> || !reaches<E>) {
      return Pack<>{};
    } else if constexpr (is_cut<E>::value) {  // at: the cut's tape entry
      return Pack<Term<E, G>>{{{g, e.op.node, true}}};
    } else if constexpr (kind<E>::leaf) {
      return Pack<Term<E, G>>{{{g, e.op.data, true}}};
    } else {
      static_assert(std::is_same_v<typename G::shape, typename E::shape>,
                    "fixed::grad: a rule gave a gradient of the wrong shape");
      if constexpr (shared<E>) {  // summed now, differentiated once later
        using V = typename E::value_type;
        using S = typename E::shape;
        const std::size_t r = rep_[id];
        const bool written = grad_[r] != nullptr;
        if constexpr (plain_read<G>::value) {
          if (!written) {  // the buffer itself, read only (copied when a second term comes)
            grad_[r] = const_cast<V*>(g.op.data), lent_[r] = true;
            return Pack<>{};
          }
        }
        if (lent_[r]) {  // the sum into a buffer of its own, the lent one left as it is
          V* own = Arena::local().alloc<V>(S::size);
          detail::assign(own, leaf<V, S>(static_cast<const V*>(grad_[r])) + g);
          grad_[r] = own, lent_[r] = false;
          return Pack<>{};
        }
        if (!written) grad_[r] = Arena::local().alloc<V>(S::size);
        add_into<S>(static_cast<V*>(grad_[r]), written, g);
        return Pack<>{};
      } else {
        return expand(e, g, id);
      }
    }
  }

  template <class E, class G>
  auto expand(const E& e, const G& g, std::size_t id) {
    constexpr std::size_t differentiable = []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + (reaches<mp::mp_at_c<typename E::children_types, I>> ? 1 : 0));
    }
    (std::make_index_sequence<arity_of<E>>{});
    if constexpr (!cheap<G>::value && (differentiable > 1 || materialised<E>)) {
      return expand(e, stash(g), id);
    } else {
      NodeRef<E> n{*this, e, id};
      return [&]<std::size_t... I>(std::index_sequence<I...>) {  // braces: children left to right
        return concat(Pack<decltype(child_terms<I>(n, g))...>{{child_terms<I>(n, g)}...});
      }
      (std::make_index_sequence<arity_of<E>>{});
    }
  }
  template <std::size_t I, class E, class G>
  auto child_terms(const NodeRef<E>& n, const G& g) {
    using C = mp::mp_at_c<typename E::children_types, I>;
    if constexpr (reaches<C>)
      return back(fixed::child<I>(n.e), Vjp<typename E::op_type>::template grad<I>(n, g),
                  n.id + child_offset<E, I>);
    else
      return Pack<>{};
  }

  // Each shared subtree, once its gradient is summed: `done` holds the terms of those before it.
  template <class Done>
  auto expand_shared(Done done, mp::mp_list<>) {
    return done;
  }
  template <class Done, class Id, class... Rest>
  auto expand_shared(Done done, mp::mp_list<Id, Rest...>) {
    constexpr std::size_t I = Id::value;
    using E = node_t<I>;
    using V = typename E::value_type;
    using Terms = decltype(expand(node<I>(), leaf<V, typename E::shape>(nullptr), I));
    std::optional<Terms> mine;
    if (rep_[I] == I) {
      V* g = static_cast<V*>(grad_[I]);
      if (!g) {  // no gradient reached it: zeros keep the terms' reads valid; they do not count
        g = Arena::local().alloc<V>(E::shape::size);
        std::fill(g, g + E::shape::size, V(0));
      }
      mine.emplace(expand(node<I>(), leaf<V, typename E::shape>(g), I));
      if (!grad_[I]) switch_off(*mine);
    } else {  // an equal copy: its gradient was summed into the first copy's, which counts it
      using Pos = mp::mp_iota_c<Done::size>;
      mp::mp_for_each<Pos>([&](auto k) {
        using J = mp::mp_at_c<shared_order, decltype(k)::value>;
        if constexpr (std::is_same_v<node_t<J::value>, E>)
          if (rep_[I] == J::value) mine.emplace(slot<decltype(k)::value>(done));
      });
      switch_off(*mine);
    }
    return expand_shared(append(done, *mine), mp::mp_list<Rest...>{});
  }

  // Where each node is (run time: the tree is held by value); node<Id>() is node Id.
  template <class E>
  void locate(const E& e, std::size_t id) {
    addr_[id] = &e;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (locate(fixed::child<I>(e), id + child_offset<E, I>), ...);
    }
    (std::make_index_sequence<arity_of<E>>{});
  }
  template <std::size_t Id>
  const node_t<Id>& node() const {
    return *static_cast<const node_t<Id>*>(addr_[Id]);
  }
  // rep_[id]: the first node equal to node id (of type E).
  template <class E>
  void find_rep(std::size_t id) {
    const E& e = *static_cast<const E*>(addr_[id]);
    rep_[id] = id;
    for (std::size_t j = id_of<E>; j < id; ++j)
      if (plan.type[j] == id_of<E> && equal(*static_cast<const E*>(addr_[j]), e)) {
        rep_[id] = rep_[j];
        return;
      }
  }

  const R& root_;
  std::array<const void*, sizeof...(P)> params_;  // the parameters' data: who is who at run time
  std::array<const void*, N> addr_{};
  std::array<std::size_t, N> rep_{};
  std::array<const void*, N> value_{};  // forward values of reductions and matmuls (by rep_)
  std::array<void*, N> grad_{};         // summed gradients of shared subtrees (by rep_)
  std::array<bool, N> lent_{};          // grad_ is a term's buffer, not the walk's: never written
  const void* root_value_ = nullptr;    // the root's forward value (root_value())
};

// The nodes of E's tree: a value read n times counts n times (one trait per node type, so cheap
// however large the tree). fixed::grad refuses a tree larger than METAGRAD_FIXED_MAX_NODES, whose
// backward plan would take the compiler minutes and gigabytes: it asks for fx::cut instead.
template <class E>
struct tree_size;
template <class Op, class... C>
struct tree_size<Expr<Op, C...>>
    : std::integral_constant<std::size_t, (std::size_t{1} + ... + tree_size<C>::value)> {};
#ifndef METAGRAD_FIXED_MAX_NODES
#define METAGRAD_FIXED_MAX_NODES 4096
#endif
template <class E>
inline constexpr bool small_enough = tree_size<E>::value <= METAGRAD_FIXED_MAX_NODES;

template <class T>
struct is_tensor : std::false_type {};
template <class T, index_t... D>
struct is_tensor<Tensor<T, D...>> : std::true_type {};

template <Operand L, class... P>
void check_grad_args() {
  using E = expr_t<L>;
  static_assert(E::shape::size == 1, "fixed::grad: the loss must be a single value (sum or mean it)");
  static_assert(std::is_floating_point_v<typename E::value_type>,
                "fixed::grad: the loss must be floating-point");
  static_assert((is_tensor<P>::value && ...), "fixed::grad: parameters must be fixed::Tensors");
  static_assert(
      small_enough<E>,
      "fixed::grad: the loss is a tree of more than METAGRAD_FIXED_MAX_NODES nodes (a value read n times "
      "is n copies of its expression): cut it with fx::cut where values are read more than once "
      "(docs/architecture.md, compile cost), or define METAGRAD_FIXED_MAX_NODES higher");
  static_assert((std::is_same_v<typename P::value_type, typename E::value_type> && ...),
                "fixed::grad: parameters must have the loss's element type");
}
template <Operand Y, Operand G, class... P>
void check_vjp_args() {
  using E = expr_t<Y>;
  static_assert(std::is_same_v<typename expr_t<G>::value_type, typename E::value_type>,
                "fixed::vjp_into: the gradient must have the output's element type");
  static_assert(std::is_floating_point_v<typename E::value_type>,
                "fixed::vjp_into: the output must be floating-point");
  static_assert((is_tensor<P>::value && ...), "fixed::vjp_into: parameters must be fixed::Tensors");
  static_assert(
      small_enough<E>,
      "fixed::vjp_into: the output is a tree of more than METAGRAD_FIXED_MAX_NODES nodes (a value read n "
      "times is n copies of its expression): cut it with fx::cut where values are read more than once "
      "(docs/architecture.md, compile cost), or define METAGRAD_FIXED_MAX_NODES higher");
  static_assert((std::is_same_v<typename P::value_type, typename E::value_type> && ...),
                "fixed::vjp_into: parameters must have the output's element type");
}
}  // namespace metagrad::fixed::detail::ad
