// View and ShapeTracker (docs/walkthrough.md §5): the walk's printed strings step by step, views computed
// in constant expressions, random movement-op sequences checked position by position against a
// naive dense reference, bad input, and view merging.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <metagrad/shape/inverse.hpp>
#include <metagrad/shape/shapetracker.hpp>
#include <metagrad/shape/symbolic.hpp>
#include <metagrad/shape/view.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Named one by one: the rest of metagrad (Op, Tensor, ...) stays out of this file's names.
using metagrad::Dims;
using metagrad::merge_views;
using metagrad::Pair;
using metagrad::Pairs;
using metagrad::ShapeTracker;
using metagrad::to_string;
using metagrad::View;
using metagrad::symbolic::Node;
using i64 = std::int64_t;
using Catch::Matchers::Contains;

// ---- 1. the walkthrough ----------------------------------------------------------------------------

TEST_CASE("ShapeTracker: the walkthrough's section 5, step by step", "[shapetracker]") {
  ShapeTracker a({10, 10});
  REQUIRE(to_string(a) == "ShapeTracker(shape=(10, 10), views=[View((10, 10), (10, 1), 0)])");
  REQUIRE(a.contiguous());

  ShapeTracker& same = a.permute({1, 0});
  REQUIRE(&same == &a);  // movement methods mutate and return *this
  REQUIRE(to_string(a) == "ShapeTracker(shape=(10, 10), views=[View((10, 10), (1, 10), 0)])");
  REQUIRE_FALSE(a.contiguous());

  REQUIRE(&a.reshape({5, 2, 5, 2}) == &a);
  REQUIRE(to_string(a) == "ShapeTracker(shape=(5, 2, 5, 2), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0)])");

  a.reshape({100});
  REQUIRE(a.views().size() == 2);
  REQUIRE(to_string(a) ==
          "ShapeTracker(shape=(100,), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0), View((100,), (1,), 0)])");
  auto [idx, valid] = a.expr_idxs();
  REQUIRE(idx.render() == "(((idx0%10)*10)+(idx0//10))");
  REQUIRE(valid.render() == "1");
  REQUIRE(a.expr_node().first.render() == "(((idx%10)*10)+(idx//10))");
  REQUIRE(a.expr_node("i").first.render() == "(((i%10)*10)+(i//10))");

  a.reshape({10, 10});
  REQUIRE(a.expr_idxs().first.render() == "((idx1*10)+idx0)");
  REQUIRE(a.views().size() == 2);  // still two views
  REQUIRE(to_string(a) ==
          "ShapeTracker(shape=(10, 10), views=[View((5, 2, 5, 2), (2, 1, 20, 10), 0), "
          "View((10, 10), (10, 1), 0)])");
  REQUIRE(a.real_strides() == std::vector<std::optional<i64>>{1, 10});

  REQUIRE(&a.simplify() == &a);
  REQUIRE(to_string(a) == "ShapeTracker(shape=(10, 10), views=[View((10, 10), (1, 10), 0)])");

  a.permute({1, 0});
  REQUIRE(to_string(a) == "ShapeTracker(shape=(10, 10), views=[View((10, 10), (10, 1), 0)])");
  REQUIRE(a.contiguous());

  std::ostringstream os;
  os << a << " " << a.views()[0];
  REQUIRE(os.str() == to_string(a) + " View((10, 10), (10, 1), 0)");
}

TEST_CASE("ShapeTracker: printed forms use Python tuple syntax", "[shapetracker]") {
  REQUIRE(to_string(Dims{100}) == "(100,)");
  REQUIRE(to_string(Dims{}) == "()");
  REQUIRE(to_string(Dims{10, 10}) == "(10, 10)");
  REQUIRE(to_string(Pairs{{1, 2}}) == "((1, 2),)");
  REQUIRE(to_string(Pairs{{0, 10}, {2, 5}}) == "((0, 10), (2, 5))");
  REQUIRE(to_string(ShapeTracker(Dims{100})) == "ShapeTracker(shape=(100,), views=[View((100,), (1,), 0)])");

  // A mask is the fourth field; one that covers everything is dropped.
  ShapeTracker p({10, 3});
  p.pad({{0, 0}, {2, 2}});
  REQUIRE(to_string(p) ==
          "ShapeTracker(shape=(10, 7), views=[View((10, 7), (3, 1), -2, ((0, 10), (2, 5)))])");
  REQUIRE(p.real_strides() == std::vector<std::optional<i64>>{3, std::nullopt});
  p.shrink({{0, 10}, {2, 5}});
  REQUIRE(to_string(p) == "ShapeTracker(shape=(10, 3), views=[View((10, 3), (3, 1), 0)])");
  REQUIRE(p.contiguous());
  ShapeTracker q(Dims{4});
  q.pad({{1, 0}});
  REQUIRE(to_string(q) == "ShapeTracker(shape=(5,), views=[View((5,), (1,), -1, ((1, 5),))])");
  auto [idx, valid] = q.expr_idxs();
  REQUIRE(idx.render() == "(-1+idx0)");
  REQUIRE(valid.render() == "((idx0*-1)<0)");
}

TEST_CASE("ShapeTracker: a rank-0 tracker addresses its single element", "[shapetracker]") {
  ShapeTracker s(Dims{});
  REQUIRE(to_string(s) == "ShapeTracker(shape=(), views=[View((), (), 0)])");
  REQUIRE(s.size() == 1);
  REQUIRE(s.contiguous());
  REQUIRE(s.expr_idxs().first.render() == "0");
  REQUIRE(s.expr_node().second.render() == "1");
  s.reshape({1, 1}).expand({3, 2});
  REQUIRE(to_string(s) == "ShapeTracker(shape=(3, 2), views=[View((3, 2), (0, 0), 0)])");
  REQUIRE(s.expr_idxs().first.render() == "0");
}

TEST_CASE("ShapeTracker: no elements, and nothing but padding", "[shapetracker]") {
  ShapeTracker z({2, 3});
  z.shrink({{0, 2}, {1, 1}});  // shape (2, 0)
  REQUIRE(z.size() == 0);
  REQUIRE_NOTHROW(z.expr_node());  // the flat index's extents must not divide by the empty dim
  z.pad({{0, 0}, {1, 2}});         // (2, 3), every position padding
  REQUIRE(z.size() == 6);
  for (i64 i = 0; i < 2; ++i)
    for (i64 j = 0; j < 3; ++j) REQUIRE(z.expr_idxs().second.evaluate({{"idx0", i}, {"idx1", j}}) == 0);
  z.reshape({3, 2}).permute({1, 0});
  for (i64 i = 0; i < 6; ++i) REQUIRE(z.expr_node().second.evaluate({{"idx", i}}) == 0);

  // An empty mask reshaped to rank 0 has no dimension to live on: it stays in a view below.
  static_assert(!View(Dims{1}, {}, 0, Pairs{{1, 1}}).reshape(Dims{}));
  ShapeTracker one(Dims{4});
  one.pad({{1, 0}}).shrink({{0, 1}}).reshape(Dims{});  // reads the padding only
  REQUIRE(one.views().size() == 2);
  REQUIRE(one.expr_idxs().second.evaluate({}) == 0);
  REQUIRE(one.expr_node().second.evaluate({}) == 0);
  one.reshape({1, 1}).expand({2, 3});
  REQUIRE(one.expr_idxs().second.evaluate({{"idx0", 1}, {"idx1", 2}}) == 0);
}

TEST_CASE("ShapeTracker: expr_idxs takes positions as nodes", "[shapetracker]") {
  ShapeTracker a({10, 10});
  a.permute({1, 0}).reshape({100}).reshape({10, 10});
  auto [idx, valid] = a.expr_idxs(std::vector<Node>{3, 4});
  REQUIRE(idx.is_num());
  REQUIRE(idx.b() == 43);
  REQUIRE(valid.b() == 1);
  Node j = metagrad::symbolic::Variable("j", 0, 9);
  REQUIRE(a.expr_idxs(std::vector<Node>{j, 2}).first.render() == "(20+j)");
  REQUIRE_THROWS_AS(a.expr_idxs(std::vector<Node>{1}), std::invalid_argument);
}

// ---- 2. View is a literal type ---------------------------------------------------------------------

namespace constant_views {

constexpr View v10(Dims{10, 10});
static_assert(v10.shape == Dims{10, 10} && v10.strides == Dims{10, 1} && v10.offset == 0);
static_assert(v10.mask.empty() && v10.contiguous && v10.size() == 100 && v10.ndim() == 2);
static_assert(v10.index(Dims{3, 4}) == 34 && v10.valid(Dims{3, 4}));

// permute, then reshapes that split and merge compatible axes stay one view
constexpr View vt = v10.permute(Dims{1, 0});
static_assert(vt.strides == Dims{1, 10} && !vt.contiguous && vt.index(Dims{3, 4}) == 43);
constexpr std::optional<View> split = vt.reshape(Dims{5, 2, 5, 2});
static_assert(split && split->shape == Dims{5, 2, 5, 2} && split->strides == Dims{2, 1, 20, 10});
static_assert(!vt.reshape(Dims{100}));  // needs a second view
static_assert(split->reshape(Dims{10, 10}) == vt);

constexpr View p3 = View(Dims{2, 3, 4}).permute(Dims{2, 0, 1});
static_assert(p3.shape == Dims{4, 2, 3} && p3.strides == Dims{1, 12, 4});
static_assert(p3.reshape(Dims{4, 6})->strides == Dims{1, 4});                          // merge
static_assert(p3.reshape(Dims{4, 1, 6, 1})->strides == Dims{1, 0, 4, 0});              // merge, add 1s
static_assert(p3.reshape(Dims{2, 2, 3, 2})->strides == Dims{2, 1, 8, 4});              // split and regroup
static_assert(p3.reshape(Dims{4, 6})->reshape(Dims{4, 2, 3})->strides == p3.strides);  // and back
static_assert(!p3.reshape(Dims{24}) && !p3.reshape(Dims{8, 3}));
static_assert(View(Dims{1, 4, 1}).reshape(Dims{4})->contiguous);  // removing size-1 axes

// expand: size-1 dims get stride 0
constexpr View ex = View(Dims{1, 3}).expand(Dims{4, 3});
static_assert(ex.shape == Dims{4, 3} && ex.strides == Dims{0, 1} && ex.index(Dims{2, 1}) == 1);

// pad: a mask, and a negative offset
constexpr View pd = View(Dims{2, 3}).pad(Pairs{{1, 0}, {0, 2}});
static_assert(pd.shape == Dims{3, 5} && pd.strides == Dims{3, 1} && pd.offset == -3);
static_assert(pd.mask == Pairs{{1, 3}, {0, 3}} && !pd.contiguous);
static_assert(!pd.valid(Dims{0, 0}) && pd.valid(Dims{1, 0}) && !pd.valid(Dims{1, 3}) && pd.valid(Dims{2, 2}));
static_assert(pd.index(Dims{1, 0}) == 0 && pd.index(Dims{2, 2}) == 5);
constexpr View rows = View(Dims{2, 3}).pad(Pairs{{1, 1}, {0, 0}});  // a padded row above and below
static_assert(rows.reshape(Dims{12})->mask == Pairs{{3, 9}});       // a masked reshape that stays a box
static_assert(rows.reshape(Dims{1, 4, 3, 1})->mask == Pairs{{0, 1}, {1, 3}, {0, 3}, {0, 1}});
// ones whose valid range is not a box of the new shape
static_assert(!rows.reshape(Dims{2, 2, 3}) && !rows.reshape(Dims{2, 6}) && !pd.reshape(Dims{15}));

// shrink moves the offset; shrinking the padding away drops the mask and is contiguous again
constexpr View sh = View(Dims{4, 5}).shrink(Pairs{{1, 3}, {2, 5}});
static_assert(sh.shape == Dims{2, 3} && sh.strides == Dims{5, 1} && sh.offset == 7 &&
              sh.index(Dims{1, 2}) == 14);
static_assert(pd.shrink(Pairs{{1, 3}, {0, 3}}).contiguous);
static_assert(pd.shrink(Pairs{{0, 1}, {0, 5}}).mask == Pairs{{1, 1}, {0, 3}});  // nothing valid left

// stride: negative steps flip
constexpr View st = View(Dims{4, 5}).stride(Dims{-1, 2});
static_assert(st.shape == Dims{4, 3} && st.strides == Dims{-5, 2} && st.offset == 15);
static_assert(st.index(Dims{0, 0}) == 15 && st.index(Dims{3, 2}) == 4);
constexpr View back2 = View(Dims{5}).stride(Dims{-2});
static_assert(back2.shape == Dims{3} && back2.index(Dims{0}) == 4 && back2.index(Dims{2}) == 0);
constexpr View masked_flip = View(Dims{3}).pad(Pairs{{2, 1}}).stride(Dims{-2});  // reads pad, 1, pad
static_assert(masked_flip.shape == Dims{3} && masked_flip.mask == Pairs{{1, 2}});
static_assert(!masked_flip.valid(Dims{0}) && masked_flip.valid(Dims{1}) && masked_flip.index(Dims{1}) == 1);
static_assert(View(Dims{4}).stride(Dims{-1}).stride(Dims{-1}).contiguous);

// contiguous flags and normalisation
static_assert(View(Dims{2, 1, 3}, Dims{3, 7, 1}).contiguous);  // a size-1 dim's stride is irrelevant
static_assert(!View(Dims{10}, {}, 1).contiguous);
static_assert(View(Dims{2, 3}, {}, 0, Pairs{{0, 2}, {0, 3}}).mask.empty());
static_assert(View(Dims{3, 3}).permute(Dims{1, 0}).permute(Dims{1, 0}) == View(Dims{3, 3}));

// structural: usable as a template argument
template <View V>
constexpr i64 elements() {
  return V.size();
}
static_assert(elements<View(Dims{2, 3}).pad(Pairs{{1, 1}, {0, 0}})>() == 12);

}  // namespace constant_views

TEST_CASE("View: the constant-evaluated views match the runtime ones", "[shapetracker]") {
  Dims axes{1, 0};  // a runtime argument, same code path
  REQUIRE(View(Dims{10, 10}).permute(axes) == constant_views::vt);
  REQUIRE(to_string(constant_views::pd) == "View((3, 5), (3, 1), -3, ((1, 3), (0, 3)))");
  REQUIRE(to_string(constant_views::st) == "View((4, 3), (-5, 2), 15)");
}

// ---- 3. random movement-op sequences against a naive reference -----------------------------------

namespace {

i64 numel(const Dims& shape) {
  i64 n = 1;
  for (i64 d : shape) n *= d;
  return n;
}

std::size_t at(i64 i) { return static_cast<std::size_t>(i); }

// Calls f(pos, flat) for every multi-index of shape, in row-major order.
template <class F>
void for_each_position(const Dims& shape, F f) {
  const i64 n = numel(shape);
  Dims pos = Dims::filled(shape.size(), 0);
  for (i64 flat = 0; flat < n; ++flat) {
    f(pos, flat);
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (++pos[i] < shape[i]) break;
      pos[i] = 0;
    }
  }
}

i64 flat_index(const Dims& shape, const Dims& pos) {
  i64 flat = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + pos[i];
  return flat;
}

// The naive reference: a dense row-major array holding at each position the buffer index that
// position reads (it starts as 0..N-1), or -1 where it reads padding. Ops copy element by element.
struct Dense {
  Dims shape;
  std::vector<i64> data;
};

// out[pos] = in[src] when source(pos, src) fills src and says it is inside, else -1 (padding).
template <class F>
Dense gather(const Dense& in, const Dims& out_shape, F source) {
  Dense out{out_shape, {}};
  Dims src = Dims::filled(in.shape.size(), 0);
  for_each_position(out_shape, [&](const Dims& pos, i64) {
    out.data.push_back(source(pos, src) ? in.data[at(flat_index(in.shape, src))] : -1);
  });
  return out;
}

// One movement op (or simplify) with its argument.
struct Move {
  enum class Kind { reshape, permute, expand, pad, shrink, stride, simplify };
  Kind kind;
  Dims dims{};
  Pairs pairs{};
};

std::string describe(const Move& op) {
  switch (op.kind) {
    case Move::Kind::reshape:
      return "reshape(" + to_string(op.dims) + ")";
    case Move::Kind::permute:
      return "permute(" + to_string(op.dims) + ")";
    case Move::Kind::expand:
      return "expand(" + to_string(op.dims) + ")";
    case Move::Kind::pad:
      return "pad(" + to_string(op.pairs) + ")";
    case Move::Kind::shrink:
      return "shrink(" + to_string(op.pairs) + ")";
    case Move::Kind::stride:
      return "stride(" + to_string(op.dims) + ")";
    case Move::Kind::simplify:
      return "simplify()";
  }
  return "?";
}

void apply(ShapeTracker& st, const Move& op) {
  switch (op.kind) {
    case Move::Kind::reshape:
      st.reshape(op.dims);
      break;
    case Move::Kind::permute:
      st.permute(op.dims);
      break;
    case Move::Kind::expand:
      st.expand(op.dims);
      break;
    case Move::Kind::pad:
      st.pad(op.pairs);
      break;
    case Move::Kind::shrink:
      st.shrink(op.pairs);
      break;
    case Move::Kind::stride:
      st.stride(op.dims);
      break;
    case Move::Kind::simplify:
      st.simplify();
      break;
  }
}

Dense apply(const Dense& in, const Move& op) {
  const Dims& s = in.shape;
  Dims out;
  switch (op.kind) {
    case Move::Kind::reshape:
      return Dense{op.dims, in.data};
    case Move::Kind::simplify:
      return in;
    case Move::Kind::permute:
      for (i64 a : op.dims) out.push_back(s[at(a)]);
      return gather(in, out, [&](const Dims& pos, Dims& src) {
        for (std::size_t i = 0; i < pos.size(); ++i) src[at(op.dims[i])] = pos[i];
        return true;
      });
    case Move::Kind::expand:
      return gather(in, op.dims, [&](const Dims& pos, Dims& src) {
        for (std::size_t i = 0; i < pos.size(); ++i) src[i] = s[i] == 1 ? 0 : pos[i];
        return true;
      });
    case Move::Kind::pad:
      for (std::size_t i = 0; i < s.size(); ++i) out.push_back(op.pairs[i].first + s[i] + op.pairs[i].second);
      return gather(in, out, [&](const Dims& pos, Dims& src) {
        for (std::size_t i = 0; i < pos.size(); ++i) {
          src[i] = pos[i] - op.pairs[i].first;
          if (src[i] < 0 || src[i] >= s[i]) return false;
        }
        return true;
      });
    case Move::Kind::shrink:
      for (const Pair& p : op.pairs) out.push_back(p.second - p.first);
      return gather(in, out, [&](const Dims& pos, Dims& src) {
        for (std::size_t i = 0; i < pos.size(); ++i) src[i] = pos[i] + op.pairs[i].first;
        return true;
      });
    case Move::Kind::stride:
      for (std::size_t i = 0; i < s.size(); ++i) {
        const i64 k = op.dims[i] < 0 ? -op.dims[i] : op.dims[i];
        out.push_back((s[i] + k - 1) / k);
      }
      return gather(in, out, [&](const Dims& pos, Dims& src) {
        for (std::size_t i = 0; i < pos.size(); ++i) {
          const i64 k = op.dims[i];
          src[i] = k > 0 ? pos[i] * k : s[i] - 1 + pos[i] * k;  // negative: walk from the end
        }
        return true;
      });
  }
  return in;
}

// pad and expand keep the element count under kMaxElements so that checking every position stays
// fast; reshapes stay under kMaxRank, well inside kMaxDims.
constexpr i64 kMaxElements = 1024;
constexpr std::size_t kMaxRank = 9;

// Draws random shapes and movement ops that are valid for the shape they apply to.
class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  i64 uniform(i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // 1..6 dims of sizes 1..5, shrunk until the element count is small.
  Dims start_shape() {
    Dims s;
    for (i64 n = uniform(1, 6); n-- > 0;) s.push_back(uniform(1, 5));
    while (numel(s) > 360) {
      std::size_t i = at(uniform(0, static_cast<i64>(s.size()) - 1));
      if (s[i] > 1) --s[i];
    }
    return s;
  }

  Move next(const Dims& shape) {
    std::discrete_distribution<int> kinds({4.0, 2.0, 1.5, 1.5, 1.5, 1.5, 0.5});
    for (;;)
      if (std::optional<Move> op = make(static_cast<Move::Kind>(kinds(rng_)), shape)) return *op;
  }

 private:
  std::optional<Move> make(Move::Kind kind, const Dims& shape) {
    const std::size_t n = shape.size();
    Move op{kind};
    switch (kind) {
      case Move::Kind::reshape:
        op.dims = reshape(shape);
        break;
      case Move::Kind::simplify:
        break;
      case Move::Kind::permute:
        for (std::size_t i = 0; i < n; ++i) op.dims.push_back(static_cast<i64>(i));
        std::shuffle(op.dims.begin(), op.dims.end(), rng_);
        break;
      case Move::Kind::expand: {
        op.dims = shape;
        bool any = false;
        for (std::size_t i = 0; i < n; ++i) {
          const i64 k = uniform(2, 4);
          if (shape[i] == 1 && chance(0.7) && numel(op.dims) * k <= kMaxElements) op.dims[i] = k, any = true;
        }
        if (!any) return std::nullopt;
        break;
      }
      case Move::Kind::pad: {
        Dims padded;
        for (std::size_t i = 0; i < n; ++i) {
          Pair p{0, 0};
          if (chance(0.5)) p = {uniform(0, 2), uniform(0, 2)};
          op.pairs.push_back(p);
          padded.push_back(p.first + shape[i] + p.second);
        }
        if (numel(padded) > kMaxElements) return std::nullopt;
        break;
      }
      case Move::Kind::shrink:
        for (std::size_t i = 0; i < n; ++i) {
          Pair p{0, shape[i]};
          if (shape[i] > 0 && chance(0.6)) {
            p.first = uniform(0, shape[i] - 1);
            p.second = uniform(p.first + 1, shape[i]);
          }
          op.pairs.push_back(p);
        }
        if (n > 0 && chance(0.03)) {  // now and then nothing is left: padding then reads only padding
          Pair& p = op.pairs[at(uniform(0, static_cast<i64>(n) - 1))];
          p.first = p.second = uniform(p.first, p.second);
        }
        break;
      case Move::Kind::stride: {
        static constexpr i64 steps[] = {-1, 2, -2, 3, -3};
        for (std::size_t i = 0; i < n; ++i) op.dims.push_back(chance(0.5) ? steps[uniform(0, 4)] : 1);
        break;
      }
    }
    return op;
  }

  // Splits, merges of adjacent dims, added and removed size-1 dims; or a fresh factorisation.
  Dims reshape(const Dims& shape) {
    if (numel(shape) == 0) return empty_shape(shape);
    if (chance(0.4)) return refactor(numel(shape));
    Dims out = shape;
    for (i64 steps = uniform(1, 3); steps-- > 0;) {
      const i64 rank = static_cast<i64>(out.size());
      switch (uniform(0, 3)) {
        case 0:  // merge two adjacent dims
          if (rank >= 2) {
            std::size_t i = at(uniform(0, rank - 2));
            out[i] *= out[i + 1];
            out.erase(i + 1);
          }
          break;
        case 1: {  // split a dim into two factors
          std::vector<std::pair<std::size_t, i64>> splits;
          for (std::size_t i = 0; i < out.size(); ++i)
            for (i64 f = 2; f < out[i]; ++f)
              if (out[i] % f == 0) splits.emplace_back(i, f);
          if (splits.empty() || out.size() >= kMaxRank) break;
          auto [i, f] = splits[at(uniform(0, static_cast<i64>(splits.size()) - 1))];
          out[i] /= f;
          out.insert(i, f);
          break;
        }
        case 2:  // add a size-1 dim
          if (out.size() < kMaxRank) out.insert(at(uniform(0, rank)), 1);
          break;
        default: {  // remove a size-1 dim
          std::vector<std::size_t> ones;
          for (std::size_t i = 0; i < out.size(); ++i)
            if (out[i] == 1) ones.push_back(i);
          if (!ones.empty()) out.erase(ones[at(uniform(0, static_cast<i64>(ones.size()) - 1))]);
          break;
        }
      }
    }
    return out;
  }

  // No elements: keep a 0 somewhere, anything elsewhere.
  Dims empty_shape(const Dims& shape) {
    Dims out;
    for (std::size_t i = 0; i < shape.size() && out.size() + 1 < kMaxRank; ++i)
      if (chance(0.7)) out.push_back(shape[i] == 0 ? 0 : uniform(1, 4));
    out.insert(at(uniform(0, static_cast<i64>(out.size()))), 0);
    return out;
  }

  // The prime factors of n shuffled and grouped at random, with a few size-1 dims sprinkled in.
  Dims refactor(i64 n) {
    std::vector<i64> primes;
    for (i64 p = 2; p * p <= n; ++p)
      for (; n % p == 0; n /= p) primes.push_back(p);
    if (n > 1) primes.push_back(n);
    std::shuffle(primes.begin(), primes.end(), rng_);
    Dims out;
    for (i64 p : primes) {
      if (out.empty() || (chance(0.5) && out.size() + 2 < kMaxRank))
        out.push_back(p);
      else
        out.back() *= p;
    }
    for (i64 k = uniform(0, 2); k-- > 0;) out.insert(at(uniform(0, static_cast<i64>(out.size()))), 1);
    return out;
  }

  std::mt19937_64 rng_;
};

// The stack evaluated position by position with View::index/valid, no symbolic algebra. nullopt
// when a valid position reads outside the view below it.
std::optional<std::pair<i64, bool>> walk_views(const std::vector<View>& views, const Dims& pos) {
  i64 idx = views.back().index(pos);
  bool valid = views.back().valid(pos);
  for (std::size_t v = views.size() - 1; valid && v-- > 0;) {
    const View& below = views[v];
    if (idx < 0 || idx >= below.size()) return std::nullopt;
    Dims p = Dims::filled(below.ndim(), 0);
    for (std::size_t i = below.ndim(); i-- > 0; idx /= below.shape[i]) p[i] = idx % below.shape[i];
    valid = below.valid(p);
    idx = below.index(p);
  }
  return std::pair{idx, valid};
}

bool agrees(i64 want, i64 idx, i64 valid) { return want == -1 ? valid == 0 : (valid != 0 && idx == want); }

std::string show(i64 want, i64 idx, i64 valid) {
  return "reference " + std::to_string(want) + ", got index " + std::to_string(idx) + " valid " +
         std::to_string(valid);
}

// Empty when the tracker agrees with the reference at every position (expr_idxs, expr_node, the
// views walked directly, real_strides); else the first disagreement.
std::string compare(const ShapeTracker& st, const Dense& ref, i64& positions) {
  if (!(st.shape() == ref.shape) || st.size() != numel(ref.shape))
    return "shape " + to_string(st.shape()) + ", reference " + to_string(ref.shape);
  const std::pair<Node, Node> e = st.expr_idxs(), f = st.expr_node("idx");
  std::map<std::string, i64> vars, flat{{"idx", 0}};
  std::vector<i64*> slots;
  for (std::size_t i = 0; i < ref.shape.size(); ++i) slots.push_back(&vars["idx" + std::to_string(i)]);
  i64& flat_slot = flat["idx"];
  std::string error;
  for_each_position(ref.shape, [&](const Dims& pos, i64 i) {
    if (!error.empty()) return;
    const i64 want = ref.data[at(i)];
    for (std::size_t d = 0; d < pos.size(); ++d) *slots[d] = pos[d];
    flat_slot = i;
    const i64 idx = e.first.evaluate(vars), valid = e.second.evaluate(vars);
    const i64 fidx = f.first.evaluate(flat), fvalid = f.second.evaluate(flat);
    const auto walked = walk_views(st.views(), pos);
    auto where = [&] { return " at " + to_string(pos) + " (flat " + std::to_string(i) + "): "; };
    if (!walked)
      error = "views walked directly" + where() + "a valid position reads outside the view below";
    else if (!agrees(want, walked->first, walked->second))
      error = "views walked directly" + where() + show(want, walked->first, walked->second);
    else if (!agrees(want, idx, valid))
      error = "expr_idxs" + where() + show(want, idx, valid) + "\n  index " + e.first.render() +
              "\n  valid " + e.second.render();
    else if (!agrees(want, fidx, fvalid))
      error = "expr_node" + where() + show(want, fidx, fvalid) + "\n  index " + f.first.render() +
              "\n  valid " + f.second.render();
    ++positions;
  });
  if (!error.empty()) return error;
  if (st.contiguous())  // contiguous: position i reads buffer element i
    for (std::size_t i = 0; i < ref.data.size(); ++i)
      if (ref.data[i] != static_cast<i64>(i))
        return "contiguous, but position " + std::to_string(i) + " reads " + std::to_string(ref.data[i]);

  // Where real_strides gives a stride, stepping along that dim changes the index by it and never
  // moves between valid and padding.
  const std::vector<std::optional<i64>> rs = st.real_strides();
  if (rs.size() != ref.shape.size()) return "real_strides has " + std::to_string(rs.size()) + " entries";
  for (std::size_t d = 0; d < rs.size(); ++d) {
    if (!rs[d]) continue;
    i64 step = 1;
    for (std::size_t k = d + 1; k < ref.shape.size(); ++k) step *= ref.shape[k];
    for_each_position(ref.shape, [&](const Dims& pos, i64 i) {
      if (!error.empty() || pos[d] + 1 >= ref.shape[d]) return;
      const i64 a = ref.data[at(i)], b = ref.data[at(i + step)];
      if ((a == -1) != (b == -1) || (a != -1 && b - a != *rs[d]))
        error = "real_strides gives dim " + std::to_string(d) + " stride " + std::to_string(*rs[d]) +
                " but at " + to_string(pos) + " the reference steps from " + std::to_string(a) + " to " +
                std::to_string(b);
    });
  }
  return error;
}

}  // namespace

TEST_CASE("ShapeTracker: random movement-op sequences agree with a naive dense reference", "[shapetracker]") {
  constexpr std::uint64_t kFirstSeed = 0x5EED0000;
  constexpr int kSequences = 5000;
  i64 positions = 0, steps = 0, multi_view = 0, deep = 0, empty = 0, all_padding = 0, masked = 0,
      simplified = 0;
  for (int s = 0; s < kSequences; ++s) {
    const std::uint64_t seed = kFirstSeed + static_cast<std::uint64_t>(s);
    Generator gen(seed);
    const Dims start = gen.start_shape();
    ShapeTracker st(start);
    Dense ref{start, std::vector<i64>(at(numel(start)))};
    std::iota(ref.data.begin(), ref.data.end(), 0);
    std::string history = "ShapeTracker(" + to_string(start) + ")";
    INFO("seed " << seed);
    for (i64 k = gen.uniform(2, 8); k-- > 0;) {
      const Move op = gen.next(st.shape());
      history.append(".").append(describe(op));
      INFO("ops: " << history);
      const std::size_t views_before = st.views().size();
      REQUIRE_NOTHROW(apply(st, op));
      ref = apply(ref, op);
      INFO("tracker: " << to_string(st));
      if (op.kind == Move::Kind::simplify) REQUIRE(st.views().size() <= views_before);
      REQUIRE(compare(st, ref, positions) == "");
      ++steps;
      multi_view += st.views().size() > 1;
      deep += st.views().size() > 2;
      empty += st.size() == 0;
      all_padding += st.size() > 0 && std::count(ref.data.begin(), ref.data.end(), -1) == st.size();
      for (const View& v : st.views()) masked += !v.mask.empty();
    }
    // simplify() at the end changes no result, never adds views, and a second one changes nothing.
    INFO("ops: " << history << ".simplify()");
    ShapeTracker simple = st;
    simple.simplify();
    INFO("simplified: " << to_string(simple));
    simplified += simple.views().size() < st.views().size();
    REQUIRE(simple.views().size() <= st.views().size());
    REQUIRE(compare(simple, ref, positions) == "");
    REQUIRE(ShapeTracker(simple).simplify() == simple);
  }
  // The sequences reach the interesting paths: stacked views, masks, merges, no elements, only padding.
  CAPTURE(steps, positions, multi_view, deep, masked, simplified, empty, all_padding);
  REQUIRE(steps >= 20000);
  REQUIRE(positions >= 2000000);
  REQUIRE(multi_view >= 3000);
  REQUIRE(deep >= 150);
  REQUIRE(masked >= 5000);
  REQUIRE(simplified >= 50);
  REQUIRE(empty >= 150);
  REQUIRE(all_padding >= 400);
}

// ---- 4. bad input ------------------------------------------------------------------------------------

namespace {

// op on a copy of st throws std::invalid_argument naming the op, st's shape and the argument, and
// leaves the copy as it was.
template <class F>
void require_rejects(const ShapeTracker& st, const std::string& name, const std::string& arg, F op) {
  INFO(name << " of " << to_string(st) << " with " << arg);
  ShapeTracker copy = st;
  REQUIRE_THROWS_AS(op(copy), std::invalid_argument);
  REQUIRE_THROWS_WITH(op(copy), Contains(name) && Contains(to_string(st.shape())) && Contains(arg));
  REQUIRE(copy == st);
}

}  // namespace

TEST_CASE("ShapeTracker: bad movement arguments throw std::invalid_argument", "[shapetracker]") {
  const ShapeTracker a({10, 10});
  using S = ShapeTracker;

  require_rejects(a, "reshape", "(7,)", [](S& s) { s.reshape({7}); });
  require_rejects(a, "reshape", "(3, 33)", [](S& s) { s.reshape({3, 33}); });
  require_rejects(a, "reshape", "(-10, -10)", [](S& s) { s.reshape({-10, -10}); });

  require_rejects(a, "permute", "(0, 0)", [](S& s) { s.permute({0, 0}); });
  require_rejects(a, "permute", "(0, 2)", [](S& s) { s.permute({0, 2}); });
  require_rejects(a, "permute", "(-1, 0)", [](S& s) { s.permute({-1, 0}); });
  require_rejects(a, "permute", "(0,)", [](S& s) { s.permute({0}); });
  require_rejects(a, "permute", "(1, 0, 2)", [](S& s) { s.permute({1, 0, 2}); });

  require_rejects(a, "expand", "(20, 10)", [](S& s) { s.expand({20, 10}); });
  require_rejects(a, "expand", "(10,)", [](S& s) { s.expand({10}); });
  require_rejects(a, "expand", "(10, 10, 1)", [](S& s) { s.expand({10, 10, 1}); });

  require_rejects(a, "pad", "((-1, 0), (0, 0))", [](S& s) { s.pad({{-1, 0}, {0, 0}}); });
  require_rejects(a, "pad", "((0, 0), (0, -2))", [](S& s) { s.pad({{0, 0}, {0, -2}}); });
  require_rejects(a, "pad", "((1, 1),)", [](S& s) { s.pad({{1, 1}}); });

  require_rejects(a, "shrink", "((0, 11), (0, 10))", [](S& s) { s.shrink({{0, 11}, {0, 10}}); });
  require_rejects(a, "shrink", "((-1, 5), (0, 10))", [](S& s) { s.shrink({{-1, 5}, {0, 10}}); });
  require_rejects(a, "shrink", "((6, 5), (0, 10))", [](S& s) { s.shrink({{6, 5}, {0, 10}}); });
  require_rejects(a, "shrink", "((0, 10),)", [](S& s) { s.shrink({{0, 10}}); });

  require_rejects(a, "stride", "(0, 1)", [](S& s) { s.stride({0, 1}); });
  require_rejects(a, "stride", "(1,)", [](S& s) { s.stride({1}); });
  require_rejects(a, "stride", "(1, 1, 1)", [](S& s) { s.stride({1, 1, 1}); });

  // The message names the tracker's current shape, also over two views and with a mask.
  ShapeTracker b({10, 10});
  b.permute({1, 0}).reshape({100});
  require_rejects(b, "reshape", "(99,)", [](S& s) { s.reshape({99}); });
  require_rejects(b, "expand", "(100, 2)", [](S& s) { s.expand({100, 2}); });
  b.pad({{1, 1}});
  require_rejects(b, "shrink", "((0, 103),)", [](S& s) { s.shrink({{0, 103}}); });
  require_rejects(b, "permute", "(1,)", [](S& s) { s.permute({1}); });

  // View itself checks the same, and its constructor checks ranks.
  REQUIRE_THROWS_WITH(View(Dims{1, 10}).expand(Dims{-1, 10}), Contains("expand") && Contains("(1, 10)"));
  REQUIRE_THROWS_AS(View(Dims{2, 3}, Dims{1}), std::invalid_argument);
  REQUIRE_THROWS_AS(View(Dims{2, 3}, {}, 0, Pairs{{0, 1}}), std::invalid_argument);
  REQUIRE_THROWS_AS(ShapeTracker(std::vector<View>{}), std::invalid_argument);
}

// ---- 5. merge_views and simplify -------------------------------------------------------------------

TEST_CASE("ShapeTracker: merge_views merges exactly the stacks one view can express", "[shapetracker]") {
  const View walk(Dims{5, 2, 5, 2}, Dims{2, 1, 20, 10});
  // merges
  REQUIRE(merge_views(walk, View(Dims{10, 10})) == View(Dims{10, 10}, Dims{1, 10}));
  const View above = View(Dims{3, 8}).permute(Dims{1, 0});
  REQUIRE(merge_views(View(Dims{4, 6}), above) == above);  // contiguous below: nothing changes
  const View masked(Dims{10, 10}, {}, 0, Pairs{{2, 5}, {0, 10}});
  REQUIRE(merge_views(View(Dims{100}), masked) == masked);  // the mask above is kept
  REQUIRE(merge_views(View(Dims{4, 5}, Dims{1, 4}, 3), View(Dims{2, 2, 5})) ==
          View(Dims{2, 2, 5}, Dims{2, 1, 4}, 3));  // offsets carry through
  const View expanded = View(Dims{1, 10}).expand(Dims{5, 10});
  REQUIRE(merge_views(expanded, View(Dims{5, 2, 5})) == View(Dims{5, 2, 5}, Dims{0, 5, 1}));
  REQUIRE(merge_views(View(Dims{6}).stride(Dims{-1}), View(Dims{2, 3})) == View(Dims{2, 3}, Dims{-3, -1}, 5));

  // does not merge
  REQUIRE_FALSE(merge_views(walk, View(Dims{100})));  // the walk's two views
  REQUIRE_FALSE(merge_views(expanded, View(Dims{50})));
  REQUIRE_FALSE(merge_views(View(Dims{4, 3}).pad(Pairs{{1, 1}, {0, 0}}), View(Dims{18})));  // mask below
  REQUIRE_FALSE(merge_views(View(Dims{2, 2}).pad(Pairs{{0, 0}, {0, 1}}), View(Dims{2, 3})));
  REQUIRE_FALSE(merge_views(View(Dims{3, 4}).permute(Dims{1, 0}), View(Dims{2, 6})));
}

TEST_CASE("ShapeTracker: simplify merges views where it can and only there", "[shapetracker]") {
  SECTION("two views that do not merge stay") {
    ShapeTracker a({10, 10});
    a.permute({1, 0}).reshape({100});
    const std::string before = to_string(a);
    REQUIRE(to_string(a.simplify()) == before);
    REQUIRE(a.views().size() == 2);
  }
  SECTION("a reshape back to a one-view shape merges") {
    ShapeTracker a({2, 3, 4});
    a.permute({2, 0, 1}).reshape({24});
    REQUIRE(a.views().size() == 2);
    a.reshape({4, 6});
    REQUIRE(a.views().size() == 2);
    a.simplify();
    REQUIRE(to_string(a) == "ShapeTracker(shape=(4, 6), views=[View((4, 6), (1, 4), 0)])");
  }
  SECTION("a reshape that one view can express does not stack") {
    ShapeTracker a({2, 3, 4});
    a.permute({2, 0, 1}).reshape({4, 6}).reshape({2, 2, 6});
    REQUIRE(to_string(a) == "ShapeTracker(shape=(2, 2, 6), views=[View((2, 2, 6), (2, 1, 4), 0)])");
  }
  SECTION("a masked reshape that stays a box stays one view") {
    ShapeTracker a({2, 3});
    a.pad({{1, 1}, {0, 0}}).reshape({12});
    REQUIRE(to_string(a) == "ShapeTracker(shape=(12,), views=[View((12,), (1,), -3, ((3, 9),))])");
    a.reshape({2, 6});  // (3, 9) is not a box of (2, 6): a second view
    REQUIRE(a.views().size() == 2);
    REQUIRE(to_string(a.simplify()) ==
            "ShapeTracker(shape=(2, 6), views=[View((12,), (1,), -3, ((3, 9),)), View((2, 6), (6, 1), 0)])");
  }
  SECTION("a stack of three mergeable views collapses to one") {
    ShapeTracker a({View(Dims{100}), View(Dims{10, 10}), View(Dims{10, 10}).permute(Dims{1, 0})});
    REQUIRE(a.views().size() == 3);
    a.simplify();
    REQUIRE(to_string(a) == "ShapeTracker(shape=(10, 10), views=[View((10, 10), (1, 10), 0)])");
  }
  SECTION("a mask below stops merging") {
    ShapeTracker a({10, 10});
    a.permute({1, 0}).reshape({100}).pad({{1, 1}}).reshape({2, 51});
    REQUIRE(a.views().size() == 3);
    const std::string before = to_string(a);
    a.simplify();
    REQUIRE(to_string(a) == before);
    auto [idx, valid] = a.expr_idxs();
    // position (0, 0) is padding, (0, 1) reads element 0, (1, 50) is padding again
    REQUIRE(valid.evaluate({{"idx0", 0}, {"idx1", 0}}) == 0);
    REQUIRE(valid.evaluate({{"idx0", 0}, {"idx1", 1}}) == 1);
    REQUIRE(idx.evaluate({{"idx0", 0}, {"idx1", 1}}) == 0);
    REQUIRE(idx.evaluate({{"idx0", 0}, {"idx1", 2}}) == 10);
    REQUIRE(valid.evaluate({{"idx0", 1}, {"idx1", 50}}) == 0);
  }
}

// The inverses the backward rules move a gradient back with (metagrad/shape/inverse.hpp): on random
// shapes and arguments, each movement followed by its inverse is the view it started from (a shrink
// undone by a pad: the slice in place, every other position masked).
static_assert(metagrad::inverse_permutation(Dims{2, 0, 1}) == Dims{1, 2, 0});
static_assert(metagrad::broadcast_axes(Dims{3, 1, 5, 1}, Dims{3, 4, 5, 2}) == Dims{1, 3});
TEST_CASE("View: each movement's inverse (shape/inverse.hpp) undoes it", "[shapetracker][rules]") {
  std::mt19937 rng(0x1A7E);
  auto uniform = [&](i64 lo, i64 hi) { return std::uniform_int_distribution<i64>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    Dims shape;
    for (i64 r = uniform(1, 4); r-- > 0;) shape.push_back(uniform(1, 5));
    const View v(shape);
    Dims order;
    for (std::size_t i = 0; i < shape.size(); ++i) order.push_back(static_cast<i64>(i));
    std::shuffle(order.begin(), order.end(), rng);
    Pairs pad, slice;
    Dims flipped;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      pad.push_back({uniform(0, 3), uniform(0, 3)});
      const i64 begin = uniform(0, shape[i] - 1);
      slice.push_back({begin, uniform(begin + 1, shape[i])});
      if (uniform(0, 1)) flipped.push_back(static_cast<i64>(i));
    }
    INFO("shape " << to_string(shape) << ", order " << to_string(order) << ", pad " << to_string(pad)
                  << ", slice " << to_string(slice) << ", flipped " << to_string(flipped));
    REQUIRE(v.permute(order).permute(metagrad::inverse_permutation(order)) == v);
    REQUIRE(v.pad(pad).shrink(metagrad::shrink_of_pad(pad, shape)) == v);
    const Dims steps = metagrad::flip_steps(flipped, shape.size());
    REQUIRE(v.stride(steps).stride(steps) == v);
    const View back = v.shrink(slice).pad(metagrad::pad_of_shrink(slice, shape));
    REQUIRE(back.shape == shape);
    for (i64 flat = 0; flat < v.size(); ++flat) {
      Dims pos = Dims::filled(shape.size(), 0);
      bool inside = true;
      for (std::size_t i = shape.size(), rest = static_cast<std::size_t>(flat); i-- > 0;) {
        pos[i] = static_cast<i64>(rest % static_cast<std::size_t>(shape[i]));
        rest /= static_cast<std::size_t>(shape[i]);
        inside = inside && slice[i].first <= pos[i] && pos[i] < slice[i].second;
      }
      REQUIRE(back.valid(pos) == inside);
      if (inside) REQUIRE(back.index(pos) == v.index(pos));
    }
  }
}
