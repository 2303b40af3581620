#pragma once
// The internals of fixed/cut.hpp: a tape entry per cut (its value, its expression and the backward
// walk compiled for that expression's type, behind a function pointer), the gradient sinks the
// walks add into, and the pass over the tape that fixed::grad makes when a loss reads a cut.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <boost/mp11/algorithm.hpp>

#include "metagrad/detail/fixed/cpu.hpp"
#include "metagrad/detail/fixed/grad.hpp"

namespace metagrad::fixed::detail::ad {

struct Sinks;
// A cut's gradient written so far only in slabs along one axis (slab_of, grad.hpp), the rest not yet
// zeroed: a packed q, k, v's gradient is then its three heads' copies, neither zeroed first nor added.
struct Slabs {
  index_t outer, ext, inner_bytes;
  int n;  // 0: none pending (the gradient, if written, is whole)
  std::pair<index_t, index_t> at[8];
};
// One cut. Entries are linked newest first across every live fx::Tape of the thread, so following
// `prev` from the newest is a reverse topological order: a cut's expression can only read cuts
// made before it.
struct TapeNode {
  TapeNode* prev;
  const void* expr;                                 // a copy of the cut expression, in the tape's arena
  void (*backward)(const TapeNode&, const Sinks&);  // null: not differentiable (an integer cut)
  std::size_t bytes;                                // of its value (and of its gradient)
  void* grad;                                       // d loss / d value during a backward pass
  bool written;                                     // grad holds a gradient (else it is garbage)
  const void* value;                                // the cut's value (its expression's, evaluated)
  Slabs slabs;                                      // where grad is written, when only in slabs
};

inline TapeNode*& tape_head() {  // the thread's newest cut
  thread_local TapeNode* head = nullptr;
  return head;
}
inline int& tapes_alive() {
  thread_local int n = 0;
  return n;
}

// Where the terms of a backward walk go: parameter k's gradient (by its data pointer) or a cut's.
struct Sinks {
  std::size_t n;
  const void* const* at;  // the parameters' data
  void* const* buf;       // their gradients
  bool* written;
};

template <class V, class S, class G>
void accumulate(void* to, bool& written, const G& g) {
  add_into<S>(static_cast<V*>(to), written, g);
  written = true;
}
// The rest of a gradient written in slabs zeroed, before anything else adds into it or reads it.
inline void settle(TapeNode& n) {
  Slabs& s = n.slabs;
  if (!s.n) return;
  std::sort(s.at, s.at + s.n);
  auto* p = static_cast<std::byte*>(n.grad);
  for (index_t o = 0; o < s.outer; ++o) {
    std::byte* block = p + o * s.ext * s.inner_bytes;
    index_t k = 0;
    for (int i = 0; i < s.n; ++i) {
      if (s.at[i].first > k) std::memset(block + k * s.inner_bytes, 0, (s.at[i].first - k) * s.inner_bytes);
      k = s.at[i].second;
    }
    if (k < s.ext) std::memset(block + k * s.inner_bytes, 0, (s.ext - k) * s.inner_bytes);
  }
  s.n = 0;
}
// A term into a cut's gradient: a slab into a gradient not yet written, or written only in other
// slabs of the same axis, is copied there alone; anything else settles the slabs first.
template <class V, class S, class G>
void accumulate_cut(TapeNode& n, const G& g) {
  if constexpr (std::is_floating_point_v<V> && slab_of<G>::value) {
    using L = slab_of<G>;
    Slabs& s = n.slabs;
    const index_t bytes = L::inner * static_cast<index_t>(sizeof(V));
    bool joins = !n.written;
    if (n.written && s.n > 0 && s.n < 8 && s.outer == L::outer && s.ext == L::ext && s.inner_bytes == bytes) {
      joins = true;
      for (int i = 0; i < s.n; ++i) joins = joins && (L::hi <= s.at[i].first || s.at[i].second <= L::lo);
    }
    if (joins) {
      if (!n.written) s = Slabs{L::outer, L::ext, bytes, 0, {}};
      s.at[s.n++] = {L::lo, L::hi};
      add_region(static_cast<V*>(n.grad), false, g, false);
      n.written = true;
      return;
    }
  }
  settle(n);
  accumulate<V, S>(n.grad, n.written, g);
}

// Every counting term into its sink; terms whose leaf is neither a parameter nor a cut (an input)
// are skipped unevaluated. lender: the gradient buffer of the cut whose backward this is, dead once
// its terms are routed: a cut that its gradient reaches unchanged, and that has no gradient yet,
// takes that buffer instead of a copy (after every other term, which may still read it).
template <class Terms>
void route(const Terms& terms, const Sinks& s, void* lender = nullptr) {
  bool taken = false;
  auto each = [&](auto i, auto lent_pass) {
    const auto& t = slot<decltype(i)::value>(terms);
    using L = typename std::remove_cvref_t<decltype(t)>::leaf_type;
    using G = std::remove_cvref_t<decltype(t.g)>;
    using V = typename L::value_type;
    if (!t.on) return;
    if constexpr (is_cut<L>::value) {
      auto* n = static_cast<TapeNode*>(const_cast<void*>(t.at));
      bool lent = false;
      if constexpr (plain_read<G>::value) lent = lender && static_cast<const void*>(t.g.op.data) == lender;
      if (lent != decltype(lent_pass)::value) return;
      if (lent && !n->written && !taken) {  // the lender's buffer, once: a second taker would share it
        n->grad = lender, n->written = true, taken = true;
        return;
      }
      accumulate_cut<V, typename L::shape>(*n, t.g);
    } else {
      if (decltype(lent_pass)::value) return;
      for (std::size_t k = 0; k < s.n; ++k)
        if (s.at[k] == t.at) return accumulate<V, typename L::shape>(s.buf[k], s.written[k], t.g);
    }
  };
  mp::mp_for_each<mp::mp_iota_c<Terms::size>>([&](auto i) { each(i, std::false_type{}); });
  if (lender) mp::mp_for_each<mp::mp_iota_c<Terms::size>>([&](auto i) { each(i, std::true_type{}); });
}

// A cut's recorded backward: its expression's walk from the cut's gradient, compiled once per
// expression type (equal blocks of a model share it).
template <class X>
void backward_of(const TapeNode& n, const Sinks& s) {
  using V = typename X::value_type;
  Arena::Scope scope;
  Backward<X> plan(*static_cast<const X*>(n.expr), n.value);
  route(plan.run_from(leaf<V, typename X::shape>(static_cast<const V*>(n.grad))), s, n.grad);
}

// The backward pass through the tape: `top` routes the loss's own terms into `s` (returning what
// the caller wants back, the loss), then every cut that received a gradient hands it on, newest
// first.
template <class F>
auto through_tape(const Sinks& s, F&& top) {
  if (!tapes_alive()) throw std::logic_error("fixed::grad: the loss reads a cut, but no fx::Tape is alive");
  Arena::Scope scope;  // the cuts' gradients, for this pass only
  TapeNode* newest = tape_head();
  for (TapeNode* n = newest; n; n = n->prev) {
    n->written = false, n->slabs.n = 0;
    n->grad = n->backward ? Arena::local().alloc<std::byte>(n->bytes) : nullptr;
  }
  auto r = [&] {
    Arena::Scope walk;
    return top();
  }();
  for (TapeNode* n = newest; n; n = n->prev)
    if (n->written) settle(*n), n->backward(*n, s);
  return r;
}

// d loss / d each parameter into buf (zeros where nothing reaches it), `walk` routing the terms of
// the loss (or output) into the sinks; returns what walk returns.
template <class... P, class Walk>
auto into_params(const std::array<const void*, sizeof...(P)>& at, const std::array<void*, sizeof...(P)>& buf,
                 Walk&& walk) {
  std::array<bool, sizeof...(P) + 1> written{};
  const Sinks s{sizeof...(P), at.data(), buf.data(), written.data()};
  auto r = through_tape(s, [&] { return walk(s); });
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((written[K] ? void() : void(std::fill_n(static_cast<typename P::value_type*>(buf[K]), P::size, 0))),
     ...);
  }
  (std::index_sequence_for<P...>{});
  return r;
}
// The loss's own walk: its value, its terms routed.
template <class E>
typename E::value_type loss_terms(const E& loss, const Sinks& s) {
  Backward<E> plan(loss);
  auto r = plan.run();
  route(r.terms, s);
  return r.loss;
}

}  // namespace metagrad::fixed::detail::ad
