// einsum from the ops the library has: a letter repeated in one operand takes a diagonal, a letter
// no one else needs is summed where it first can be, and each pair of operands is contracted as one
// batched matmul (batch letters, then each side's own letters, against the contracted ones), so the
// work goes to the GEMM. The gradient is that of diagonal, sum, permute, reshape and matmul.
#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <numeric>
#include <stdexcept>

#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {

using Labels = std::vector<int>;  // a letter's char code, or 256 + k for the k-th broadcast ("...") axis

struct Term {
  Tensor t;
  Labels l;
};

std::string shapes_of(const std::vector<Tensor>& ops) {
  std::string s;
  for (const Tensor& t : ops) s += (s.empty() ? "" : ", ") + to_string(t.shape());
  return s;
}

bool has(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }

// Sums the axes whose label `keep` rejects.
Term sum_unneeded(Term a, const std::function<bool(int)>& keep) {
  std::vector<std::int64_t> axes;
  Labels l;
  for (std::size_t i = 0; i < a.l.size(); ++i)
    if (keep(a.l[i]))
      l.push_back(a.l[i]);
    else
      axes.push_back(static_cast<std::int64_t>(i));
  if (!axes.empty()) a.t = a.t.sum(Axes(axes));
  return {a.t, l};
}

std::int64_t size_of(const Term& a, int label) {
  return a.t.shape()[static_cast<std::size_t>(std::find(a.l.begin(), a.l.end(), label) - a.l.begin())];
}

// a and b as one (batch, a's own, b's own) term, summing the shared letters `needed` rejects.
Term contract(Term a, Term b, const std::function<bool(int)>& needed, const std::string& where) {
  Labels batch, sum, own_a, own_b;
  for (int x : a.l) (has(b.l, x) ? (needed(x) ? batch : sum) : own_a).push_back(x);
  for (int x : b.l)
    if (!has(a.l, x)) own_b.push_back(x);
  // A size-1 axis against a longer one broadcasts.
  std::vector<std::int64_t> ea(a.t.shape().begin(), a.t.shape().end()),
      eb(b.t.shape().begin(), b.t.shape().end());
  for (std::size_t i = 0; i < a.l.size(); ++i) {
    if (!has(b.l, a.l[i])) continue;
    std::int64_t sa = ea[i], sb = size_of(b, a.l[i]);
    auto j = static_cast<std::size_t>(std::find(b.l.begin(), b.l.end(), a.l[i]) - b.l.begin());
    if (sa != sb && sa != 1 && sb != 1)
      throw std::invalid_argument(detail::cat("einsum: ", where, ": a subscript has sizes ",
                                              std::to_string(sa), " and ", std::to_string(sb)));
    ea[i] = eb[j] = std::max(sa, sb);
  }
  a.t = a.t.expand(ea), b.t = b.t.expand(eb);
  auto arrange = [](const Term& t, const std::vector<const Labels*>& groups) {
    std::vector<std::int64_t> order, shape;
    for (const Labels* g : groups) {
      std::int64_t n = 1;
      for (int x : *g) {
        order.push_back(std::find(t.l.begin(), t.l.end(), x) - t.l.begin());
        n *= size_of(t, x);
      }
      shape.push_back(n);
    }
    return t.t.permute(order).reshape(shape);
  };
  Tensor m = arrange(a, {&batch, &own_a, &sum}).matmul(arrange(b, {&batch, &sum, &own_b}));
  Labels l = batch;
  l.insert(l.end(), own_a.begin(), own_a.end());
  l.insert(l.end(), own_b.begin(), own_b.end());
  std::vector<std::int64_t> shape;
  for (int x : batch) shape.push_back(size_of(a, x));
  for (int x : own_a) shape.push_back(size_of(a, x));
  for (int x : own_b) shape.push_back(size_of(b, x));
  return {m.reshape(shape), l};
}

}  // namespace

Tensor Tensor::einsum(std::string_view subscripts, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : subscripts)
    if (c != ' ') eq += c;
  std::string where = detail::cat("\"", eq, "\" on ", shapes_of(operands));
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(detail::cat("einsum: ", where, ": ", why));
  };
  std::size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs)
    if (c == ',')
      terms.emplace_back();
    else
      terms.back().push_back(c);
  if (operands.empty()) fail("no operands");
  if (terms.size() != operands.size())
    fail(detail::cat(std::to_string(terms.size()), " subscripts for ", std::to_string(operands.size()),
                     " operands"));
  // Letters, and "..." as the broadcast axes numbered from the right (numpy's alignment).
  auto parse = [&](const std::string& s, std::int64_t rank, std::int64_t& dots) {
    Labels l;
    std::size_t e = s.find("...");
    if (e != std::string::npos && s.find("...", e + 1) != std::string::npos)
      fail("\"...\" twice in one subscript");
    std::string bare = e == std::string::npos ? s : s.substr(0, e) + s.substr(e + 3);
    for (char c : bare)
      if (!std::isalpha(static_cast<unsigned char>(c)))
        fail(detail::cat("'", std::string(1, c), "' is not a letter"));
    dots = e == std::string::npos ? 0 : rank - static_cast<std::int64_t>(bare.size());
    if (rank >= 0 && (dots < 0 || (e == std::string::npos && static_cast<std::int64_t>(bare.size()) != rank)))
      fail(detail::cat("subscript \"", s, "\" does not fit a tensor of rank ", std::to_string(rank)));
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i == e) {
        for (std::int64_t k = dots; k-- > 0;) l.push_back(256 + static_cast<int>(k));
        i += 2;
      } else {
        l.push_back(static_cast<unsigned char>(s[i]));
      }
    }
    return l;
  };
  std::vector<Term> in;
  std::int64_t max_dots = 0;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    std::int64_t dots = 0;
    in.push_back({operands[k], parse(terms[k], operands[k].ndim(), dots)});
    max_dots = std::max(max_dots, dots);
  }
  std::map<int, int> count;
  for (const Term& t : in)
    for (int x : t.l) ++count[x];
  Labels out;
  if (arrow == std::string::npos) {  // broadcast axes, then the letters seen once, in order
    for (std::int64_t k = max_dots; k-- > 0;) out.push_back(256 + static_cast<int>(k));
    for (auto [x, n] : count)
      if (x < 256 && n == 1) out.push_back(x);
  } else {
    std::string rhs = eq.substr(arrow + 2);
    std::int64_t dots = 0;
    out = parse(rhs, -1, dots);
    if (rhs.find("...") != std::string::npos) {  // the -1 rank left it empty: all broadcast axes
      out.clear();
      std::size_t e = rhs.find("...");
      for (char c : rhs.substr(0, e)) out.push_back(static_cast<unsigned char>(c));
      for (std::int64_t k = max_dots; k-- > 0;) out.push_back(256 + static_cast<int>(k));
      for (char c : rhs.substr(e + 3)) out.push_back(static_cast<unsigned char>(c));
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (!count.count(out[i]) && out[i] < 256)
        fail(detail::cat("output subscript '", std::string(1, char(out[i])), "' is in no input"));
      if (std::count(out.begin(), out.end(), out[i]) > 1)
        fail(detail::cat("output subscript '", std::string(1, char(out[i])), "' appears twice"));
    }
  }
  // Repeated letters in one operand: their diagonal, as one axis at the end.
  for (Term& t : in) {
    for (std::size_t i = 0; i < t.l.size(); ++i)
      for (std::size_t j = t.l.size(); j-- > i + 1;)
        if (t.l[j] == t.l[i]) {
          if (t.t.shape()[i] != t.t.shape()[j])
            fail(detail::cat("subscript '", std::string(1, char(t.l[i])), "' has sizes ",
                             std::to_string(t.t.shape()[i]), " and ", std::to_string(t.t.shape()[j]),
                             " in one operand"));
          int x = t.l[i];
          t.t = t.t.diagonal(0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(j));
          t.l.erase(t.l.begin() + static_cast<std::ptrdiff_t>(j));
          t.l.erase(t.l.begin() + static_cast<std::ptrdiff_t>(i));
          t.l.push_back(x);
          i = static_cast<std::size_t>(-1);  // start over: the positions moved
          break;
        }
  }
  // Left to right: a letter stays while the output or a later operand has it.
  auto needed_after = [&](std::size_t k) {
    return [&, k](int x) {
      if (has(out, x)) return true;
      for (std::size_t j = k + 1; j < in.size(); ++j)
        if (has(in[j].l, x)) return true;
      return false;
    };
  };
  auto in_others = [&](std::size_t k) {
    return [&, k](int x) {
      if (has(out, x)) return true;
      for (std::size_t j = 0; j < in.size(); ++j)
        if (j != k && has(in[j].l, x)) return true;
      return false;
    };
  };
  for (std::size_t k = 0; k < in.size(); ++k) in[k] = sum_unneeded(in[k], in_others(k));
  Term acc = in[0];
  for (std::size_t k = 1; k < in.size(); ++k) {
    if (acc.t.device() != in[k].t.device()) fail("operands on different devices");
    acc = sum_unneeded(contract(acc, in[k], needed_after(k), where), needed_after(k));
  }
  acc = sum_unneeded(acc, [&](int x) { return has(out, x); });
  // Every output letter is in some input, so still here: put them in order.
  std::vector<std::int64_t> order;
  for (int x : out) { order.push_back(std::find(acc.l.begin(), acc.l.end(), x) - acc.l.begin()); }
  return acc.t.permute(order);
}

}  // namespace metagrad
