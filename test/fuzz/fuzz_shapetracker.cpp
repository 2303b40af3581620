// Fuzzer for the ShapeTracker: random movement-op sequences on small shapes, checked against a
// dense reference (each position holds the buffer index it reads, -1 for padding) through the
// symbolic index and validity expressions, before and after simplify(); and random bad arguments
// (wrong counts, negative sizes, sizes and pads whose products or sums leave int64, zero or huge
// steps), each of which must throw std::invalid_argument and leave the tracker as it was.
#include <catch2/catch.hpp>
#include <limits>
#include <numeric>

#include "fuzz_common.hpp"
#include "metagrad/shape/shapetracker.hpp"

using namespace metagrad;
using i64 = std::int64_t;

namespace {

struct Dense {
  Dims shape;
  std::vector<i64> data;  // row-major over shape
};

Dims strides_of(const Dims& s) {
  Dims st = Dims::filled(s.size(), 0);
  i64 acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) st[i] = acc, acc *= s[i];
  return st;
}

// out[pos] = in[f(pos)] for every position of `shape` (f returns -1 for padding).
template <class F>
Dense gather(const Dense& in, const Dims& shape, F f) {
  Dense out{shape, std::vector<i64>(static_cast<std::size_t>(prod(shape)))};
  Dims st = strides_of(shape), ist = strides_of(in.shape);
  for (i64 flat = 0; flat < prod(shape); ++flat) {
    Dims pos = Dims::filled(shape.size(), 0);
    for (std::size_t d = 0; d < shape.size(); ++d) pos[d] = (flat / st[d]) % shape[d];
    std::optional<Dims> src = f(pos);
    i64 v = -1;
    if (src) {
      i64 at = 0;
      for (std::size_t d = 0; d < src->size(); ++d) at += (*src)[d] * ist[d];
      v = in.data[static_cast<std::size_t>(at)];
    }
    out.data[static_cast<std::size_t>(flat)] = v;
  }
  return out;
}

constexpr i64 kBig = i64{1} << 62, kMax = std::numeric_limits<i64>::max();

// One random op applied to both (valid ones), or a bad one that must throw.
void step(fuzz::Rng& r, ShapeTracker& st, Dense& ref, long& rejected) {
  const Dims s = st.shape();
  const std::size_t n = s.size();
  auto bad = [&](auto op) {
    ShapeTracker copy = st;
    REQUIRE_THROWS_AS(op(copy), std::invalid_argument);
    REQUIRE(copy == st);
    ++rejected;
  };
  switch (r.in(0, 6)) {
    case 0: {  // reshape: a random factorisation of the size, or a bad shape
      if (r.chance(15)) {
        Dims w = s;
        w.push_back(r.pick(std::vector<i64>{-1, 2, kBig, kMax}));
        if (prod(s) != 0 || w.back() < 0) bad([&](ShapeTracker& t) { t.reshape(w); });
        Dims huge{kBig, 4, 0};
        bad([&](ShapeTracker& t) { t.reshape(huge); });
        return;
      }
      i64 size = prod(s);
      Dims w;
      if (size == 0) {
        w = {r.in(0, 3), 0};
      } else {
        i64 left = size;
        while (left > 1 && w.size() < 4) {
          std::vector<i64> divs;
          for (i64 d = 2; d <= left; ++d)
            if (left % d == 0) divs.push_back(d);
          w.push_back(r.pick(divs));
          left /= w.back();
          if (r.chance(20)) w.push_back(1);
        }
        if (left > 1) w.push_back(left);
      }
      st.reshape(w);
      ref.shape = w;
      return;
    }
    case 1: {  // permute
      Dims order = Dims::filled(n, 0);
      std::iota(order.begin(), order.end(), 0);
      for (std::size_t i = n; i > 1; --i)
        std::swap(order[i - 1], order[static_cast<std::size_t>(r.in(0, static_cast<i64>(i) - 1))]);
      if (r.chance(10) && n > 0) {
        Dims w = order;
        w[0] = static_cast<i64>(n);
        bad([&](ShapeTracker& t) { t.permute(w); });
        return;
      }
      st.permute(order);
      ref = gather(
          ref,
          [&] {
            Dims o;
            for (i64 a : order) o.push_back(s[a]);
            return o;
          }(),
          [&](const Dims& p) {
            Dims src = Dims::filled(n, 0);
            for (std::size_t i = 0; i < n; ++i) src[order[i]] = p[i];
            return std::optional<Dims>(src);
          });
      return;
    }
    case 2: {  // expand the size-1 dims
      Dims w = s;
      bool any = false;
      for (i64& d : w)
        if (d == 1 && r.chance(50)) d = r.in(0, 3), any = true;
      if (r.chance(10)) {
        bool wrong = false;
        for (std::size_t i = 0; i < n; ++i) {
          bool grow = s[i] != 1 && r.chance(30);
          w[i] = s[i] == 1 ? kBig : s[i] + grow;
          wrong = wrong || grow;
        }
        if (wrong || !View::fits(w)) bad([&](ShapeTracker& t) { t.expand(w); });
        return;
      }
      if (!any) return;
      st.expand(w);
      ref = gather(ref, w, [&](const Dims& p) {
        Dims src = p;
        for (std::size_t i = 0; i < n; ++i)
          if (s[i] == 1) src[i] = 0;
        return std::optional<Dims>(src);
      });
      return;
    }
    case 3: {  // pad
      Pairs arg;
      for (std::size_t i = 0; i < n; ++i) arg.push_back({r.in(0, 2), r.in(0, 2)});
      if (r.chance(10) && n > 0) {
        arg[0] = r.chance(50) ? Pair{-1, 0} : Pair{kMax, 1};
        bad([&](ShapeTracker& t) { t.pad(arg); });
        return;
      }
      i64 total = 1;
      Dims w;
      for (std::size_t i = 0; i < n; ++i) w.push_back(s[i] + arg[i].first + arg[i].second), total *= w.back();
      if (total > 400) return;
      st.pad(arg);
      ref = gather(ref, w, [&](const Dims& p) {
        Dims src = p;
        for (std::size_t i = 0; i < n; ++i) {
          src[i] = p[i] - arg[i].first;
          if (src[i] < 0 || src[i] >= s[i]) return std::optional<Dims>();
        }
        return std::optional<Dims>(src);
      });
      return;
    }
    case 4: {  // shrink
      Pairs arg;
      for (std::size_t i = 0; i < n; ++i) {
        i64 b = r.in(0, s[i]), e = r.in(b, s[i]);
        arg.push_back({b, e});
      }
      if (r.chance(10) && n > 0) {
        arg[0] = Pair{0, s[0] + 1};
        bad([&](ShapeTracker& t) { t.shrink(arg); });
        return;
      }
      st.shrink(arg);
      Dims w;
      for (std::size_t i = 0; i < n; ++i) w.push_back(arg[i].second - arg[i].first);
      ref = gather(ref, w, [&](const Dims& p) {
        Dims src = p;
        for (std::size_t i = 0; i < n; ++i) src[i] += arg[i].first;
        return std::optional<Dims>(src);
      });
      return;
    }
    case 5: {  // stride, negative steps flip
      Dims mul;
      for (std::size_t i = 0; i < n; ++i) mul.push_back(r.pick(std::vector<i64>{1, 1, -1, 2, -2, 3}));
      if (r.chance(10) && n > 0) {
        mul[0] = r.pick(std::vector<i64>{0, std::numeric_limits<i64>::min()});
        bad([&](ShapeTracker& t) { t.stride(mul); });
        return;
      }
      if (r.chance(5) && n > 0) mul[0] = kMax;  // a huge step: one element
      st.stride(mul);
      Dims w;
      for (std::size_t i = 0; i < n; ++i) {
        i64 a = mul[i] < 0 ? -mul[i] : mul[i];
        w.push_back(s[i] / a + (s[i] % a != 0));
      }
      ref = gather(ref, w, [&](const Dims& p) {
        Dims src = p;
        for (std::size_t i = 0; i < n; ++i) {
          i64 a = mul[i] < 0 ? -mul[i] : mul[i];
          src[i] = mul[i] > 0 ? p[i] * a : s[i] - 1 - p[i] * a;
        }
        return std::optional<Dims>(src);
      });
      return;
    }
    default:
      st.simplify();
  }
}

std::string compare(const ShapeTracker& st, const Dense& ref) {
  if (st.shape() != ref.shape) return "shape " + to_string(st.shape()) + " vs " + to_string(ref.shape);
  auto [idx, valid] = st.expr_node("i");
  for (std::size_t f = 0; f < ref.data.size(); ++f) {
    std::map<std::string, i64> at{{"i", static_cast<i64>(f)}};
    i64 want = ref.data[f];
    bool ok = valid.evaluate(at) != 0;
    if (ok != (want != -1) || (ok && idx.evaluate(at) != want))
      return "position " + std::to_string(f) + ": reads " +
             (ok ? std::to_string(idx.evaluate(at)) : "padding") + ", want " +
             (want == -1 ? "padding" : std::to_string(want)) + "; index " + idx.render() + " valid " +
             valid.render();
  }
  return "";
}

}  // namespace

TEST_CASE("fuzz: ShapeTracker movement sequences against a dense reference", "[fuzz_shapetracker]") {
  const std::uint64_t seed = fuzz::seed(0x57ac4e);
  const long n = fuzz::inputs(100000);
  fuzz::Rng r(seed);
  long rejected = 0, multi = 0;
  for (long i = 0; i < n; ++i) {
    Dims start;
    for (i64 d = r.in(0, 3); d-- > 0;) start.push_back(r.in(1, 4));
    ShapeTracker st(start);
    Dense ref{start, std::vector<i64>(static_cast<std::size_t>(prod(start)))};
    std::iota(ref.data.begin(), ref.data.end(), 0);
    INFO("seed " << seed << ", input " << i << ", start " << to_string(start));
    for (i64 k = r.in(1, 4); k-- > 0;) {
      step(r, st, ref, rejected);
      INFO("tracker " << to_string(st));
    }
    multi += st.views().size() > 1;
    // every ~4th sequence is checked position by position (the symbolic evaluation is the cost)
    if (i % 4 == 0 || st.views().size() > 1) {
      INFO("tracker " << to_string(st));
      REQUIRE(compare(st, ref) == "");
      ShapeTracker simple = st;
      simple.simplify();
      INFO("simplified " << to_string(simple));
      REQUIRE(compare(simple, ref) == "");
    }
  }
  CAPTURE(n, rejected, multi);
  REQUIRE(rejected >= n / 20);
  REQUIRE(multi >= n / 100);
}
