#pragma once
// Helpers of the static-path gradient tests: the same data as a dynamic CPU Tensor (optionally a
// parameter), element-by-element agreement of a fixed tensor with a dynamic one (float: 1e-4
// relative plus 1e-5 absolute, as the paths sum in different orders and the static exp is a
// polynomial), and fixed::grad against central finite differences (double: step 1e-6, agreement
// to 1e-5 relative plus 1e-6 absolute).
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fixed_check.hpp"
#include "metagrad/fixed/grad.hpp"

namespace metagrad::test {

// A dynamic CPU Tensor holding t's values, optionally requiring grad.
template <class Tn>
metagrad::Tensor dyn(const Tn& t, bool param = false) {
  metagrad::Tensor d = dynamic(t);
  d.requires_grad_(param);
  return d;
}

// got (a fixed tensor) equals want (a dynamic one), element by element.
template <class Tn>
void same(const Tn& got, const metagrad::Tensor& want, const char* what) {
  std::vector<float> w = want.to_vector<float>();
  REQUIRE(w.size() == static_cast<std::size_t>(Tn::size));
  for (index_t i = 0; i < Tn::size; ++i) {
    INFO(what << ", flat index " << i << ": static " << got[i] << ", dynamic " << w[std::size_t(i)]);
    REQUIRE(close(got[i], w[std::size_t(i)], 1e-4, 1e-5));
  }
}

// Each parameter's gradient (grads: evaluated tensors, one per parameter in order) against central
// differences of value(), each element moved by +-1e-6.
template <class Value, class G, class... P>
void require_fd(const Value& value, const G& grads, P&... params) {
  auto one = [&](auto& p, const auto& g, int which) {
    for (index_t i = 0; i < std::remove_cvref_t<decltype(p)>::size; ++i) {
      double keep = p[i], h = 1e-6;
      p[i] = keep + h;
      double up = value();
      p[i] = keep - h;
      double down = value();
      p[i] = keep;
      INFO("parameter " << which << ", flat index " << i << ": grad " << g[i] << ", finite difference "
                        << (up - down) / (2 * h));
      REQUIRE(close(g[i], (up - down) / (2 * h), 1e-5, 1e-6));
    }
  };
  std::apply(
      [&](const auto&... g) {
        int k = 0;
        (one(params, g, k++), ...);
      },
      grads);
}

// fixed::grad of loss against central differences, each parameter element moved by +-1e-6. The
// gradient expressions are evaluated first (they read the parameters), each on its own and all
// into tensors by fx::eval (the two must agree to rounding).
template <class L, class... P>
void check_fd(const L& loss, P&... params) {
  auto grads = [&]<std::size_t... K>(std::index_sequence<K...>) {
    auto g = fx::grad(loss, params...);
    auto into = fx::eval(g);
    std::tuple<fx::TensorOf<P>...> lazy{fx::eval(get<K>(g))...};
    (check_all(
         std::get<K>(lazy), [&](index_t i) { return double(std::get<K>(into)[i]); }, 1e-12, 1e-15),
     ...);
    return lazy;
  }
  (std::index_sequence_for<P...>{});
  require_fd([&] { return double(fx::eval(loss)[0]); }, grads, params...);
}

}  // namespace metagrad::test
