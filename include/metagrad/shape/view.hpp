#pragma once
// View: one strided, offset, optionally masked window onto a flat buffer (the seed's shape/view).
// It is a literal, structural type and every movement op is constexpr, so the static-shape path
// computes views in constant expressions with exactly the code the dynamic path runs.
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/shape/view.hpp"
#include "metagrad/detail/small_vector.hpp"

namespace metagrad {

// The most dimensions a shape has: Dims' inline capacity (no heap, so shapes stay literal types).
// A build may set METAGRAD_MAX_DIMS, the same for the library and every unit that includes it.
#ifndef METAGRAD_MAX_DIMS
#define METAGRAD_MAX_DIMS 16
#endif
inline constexpr std::size_t kMaxDims = METAGRAD_MAX_DIMS;
static_assert(kMaxDims >= 4, "METAGRAD_MAX_DIMS: the library needs at least 4 dimensions");

// An integer pair: a mask's valid range [first, second), a pad's (before, after), a shrink's
// [begin, end). Plain public members keep View structural.
struct Pair {
  std::int64_t first = 0, second = 0;
  friend constexpr bool operator==(const Pair&, const Pair&) = default;
};

using Dims = detail::small_vector<std::int64_t, kMaxDims>;
using Pairs = detail::small_vector<Pair, kMaxDims>;

// Python tuple syntax, as the seed prints: (10, 10), (100,), ((0, 10), (2, 5)).
inline std::string to_string(const Dims& dims) { return detail::dims_string(dims); }
inline std::string to_string(const Pairs& pairs) {
  return detail::tuple_string(pairs, [](Pair p) {
    return detail::cat("(", std::to_string(p.first), ", ", std::to_string(p.second), ")");
  });
}

// The element count. Shapes are checked where they enter (check_shape), so this cannot overflow
// for them; a product past int64 still throws rather than wrap.
constexpr std::int64_t prod(const Dims& dims) {
  std::int64_t p = 1;
  for (std::int64_t d : dims)
    if (__builtin_mul_overflow(p, d, &p))
      detail::shape_error("prod", dims, "has more elements than int64 holds");
  return p;
}

// Every shape that enters the library (a creation, a reshape, expand or pad, a loaded file) is
// checked here once: each size non-negative, and the product of the non-zero sizes within int64,
// so the element count and every stride and flat index derived from the shape are exact. Returns
// the element count; otherwise throws std::invalid_argument naming `op` and the shape.
constexpr std::int64_t check_shape(const char* op, const Dims& shape) {
  std::int64_t nonzero = 1;
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d < 0) detail::shape_error(op, shape, "has a negative size");
    if (d == 0)
      empty = true;
    else if (__builtin_mul_overflow(nonzero, d, &nonzero))
      detail::shape_error(op, shape, "has more elements than int64 holds");
  }
  return empty ? 0 : nonzero;
}

// Row-major strides; a size-1 dimension gets stride 0 (it is never stepped along).
constexpr Dims strides_for_shape(const Dims& shape) {
  Dims strides = Dims::filled(shape.size(), 0);
  std::int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = shape[i] == 1 ? 0 : acc;
    acc *= shape[i];
  }
  return strides;
}

struct View {
  Dims shape, strides;
  std::int64_t offset = 0;
  Pairs mask;  // empty: every position is valid; else one [first, second) range per dimension
  bool contiguous = false;

  // Empty strides mean row-major. Strides of size-1 dimensions are normalised to 0 and a mask
  // that covers everything is dropped, so equal views compare equal.
  constexpr View(const Dims& shape_, const Dims& strides_ = {}, std::int64_t offset_ = 0,
                 const Pairs& mask_ = {})
      : shape(shape_),
        strides(strides_.empty() ? strides_for_shape(shape_) : strides_),
        offset(offset_),
        mask(mask_) {
    if (strides.size() != shape.size())
      detail::movement_error("View", shape, to_string(strides), "strides must match the shape's rank");
    if (!mask.empty() && mask.size() != shape.size())
      detail::movement_error("View", shape, to_string(mask), "mask must match the shape's rank");
    bool full = true;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1) strides[i] = 0;
      if (!mask.empty()) full = full && mask[i] == Pair{0, shape[i]};
    }
    if (full) mask.clear();
    contiguous = offset == 0 && mask.empty() && strides == strides_for_shape(shape);
  }

  constexpr std::size_t ndim() const { return shape.size(); }
  // Whether the product of the non-zero sizes fits in int64 (check_shape's rule, without throwing).
  static constexpr bool fits(const Dims& s) {
    std::int64_t p = 1;
    for (std::int64_t d : s)
      if (d > 0 && __builtin_mul_overflow(p, d, &p)) return false;
    return true;
  }
  constexpr std::int64_t size() const { return prod(shape); }

  // Flat buffer index and validity of one position (for evaluators that run without symbolic).
  constexpr std::int64_t index(const Dims& pos) const {
    std::int64_t idx = offset;
    for (std::size_t i = 0; i < pos.size(); ++i) idx += pos[i] * strides[i];
    return idx;
  }
  constexpr bool valid(const Dims& pos) const {
    for (std::size_t i = 0; i < mask.size(); ++i)
      if (pos[i] < mask[i].first || pos[i] >= mask[i].second) return false;
    return true;
  }

  constexpr View permute(const Dims& axes) const {
    Dims seen = Dims::filled(ndim(), 0), s, st;
    Pairs m;
    if (axes.size() != ndim())
      detail::movement_error("permute", shape, to_string(axes), "wrong number of axes");
    for (std::int64_t a : axes) {
      if (a < 0 || a >= static_cast<std::int64_t>(ndim()) || seen[a]++)
        detail::movement_error("permute", shape, to_string(axes), "not a permutation of the axes");
      s.push_back(shape[a]);
      st.push_back(strides[a]);
      if (!mask.empty()) m.push_back(mask[a]);
    }
    return View(s, st, offset, m);
  }

  constexpr View expand(const Dims& new_shape) const {
    if (new_shape.size() != ndim())
      detail::movement_error("expand", shape, to_string(new_shape), "rank must stay the same");
    Dims st = strides;
    Pairs m = mask;
    for (std::size_t i = 0; i < ndim(); ++i) {
      if (new_shape[i] == shape[i]) continue;
      if (shape[i] != 1 || new_shape[i] < 0)
        detail::movement_error("expand", shape, to_string(new_shape), "only size-1 dimensions can expand");
      st[i] = 0;
      if (!m.empty()) m[i] = m[i] == Pair{0, 1} ? Pair{0, new_shape[i]} : Pair{0, 0};
    }
    if (!fits(new_shape))
      detail::movement_error("expand", shape, to_string(new_shape), "more elements than int64 holds");
    return View(new_shape, st, offset, m);
  }

  // arg[i] = (before, after): zeros on each side, marked invalid by the mask.
  constexpr View pad(const Pairs& arg) const {
    if (arg.size() != ndim())
      detail::movement_error("pad", shape, to_string(arg), "one (before, after) per dimension");
    Dims s;
    Pairs m;
    std::int64_t off = offset;
    for (std::size_t i = 0; i < ndim(); ++i) {
      auto [b, e] = arg[i];
      if (b < 0 || e < 0)
        detail::movement_error("pad", shape, to_string(arg), "padding must be non-negative");
      std::int64_t size = 0;
      if (__builtin_add_overflow(shape[i], b, &size) || __builtin_add_overflow(size, e, &size))
        detail::movement_error("pad", shape, to_string(arg), "a size leaves int64");
      s.push_back(size);
      off -= b * strides[i];
      Pair old = mask.empty() ? Pair{0, shape[i]} : mask[i];
      m.push_back({old.first + b, old.second + b});
    }
    return View(s, strides, off, m);
  }

  // arg[i] = [begin, end) kept along dimension i.
  constexpr View shrink(const Pairs& arg) const {
    if (arg.size() != ndim())
      detail::movement_error("shrink", shape, to_string(arg), "one (begin, end) per dimension");
    Dims s;
    Pairs m;
    std::int64_t off = offset;
    for (std::size_t i = 0; i < ndim(); ++i) {
      std::int64_t b = arg[i].first,
                   e = arg[i].second;  // not a structured binding: clang 14 cannot capture those
      if (b < 0 || e < b || e > shape[i])
        detail::movement_error("shrink", shape, to_string(arg), "need 0 <= begin <= end <= size");
      s.push_back(e - b);
      off += b * strides[i];
      if (!mask.empty()) {
        auto clamp = [&](std::int64_t x) { return x < 0 ? 0 : (x > e - b ? e - b : x); };
        std::int64_t lo = clamp(mask[i].first - b), hi = clamp(mask[i].second - b);
        m.push_back({lo, hi < lo ? lo : hi});
      }
    }
    return View(s, strides, off, m);
  }

  // Every mul[i]-th element; a negative step walks the dimension backwards (flip is stride -1).
  constexpr View stride(const Dims& mul) const {
    if (mul.size() != ndim())
      detail::movement_error("stride", shape, to_string(mul), "one step per dimension");
    Dims s, st;
    Pairs m;
    std::int64_t off = offset;
    for (std::size_t i = 0; i < ndim(); ++i) {
      std::int64_t k = mul[i], n = shape[i];
      if (k == 0 || k == std::numeric_limits<std::int64_t>::min())
        detail::movement_error("stride", shape, to_string(mul), "a step cannot be 0 or -2^63");
      std::int64_t a = k < 0 ? -k : k;
      s.push_back(n / a + (n % a != 0));
      std::int64_t step = 0;  // a dimension of one element never steps: its stride is 0 anyway
      if (s.back() > 1 && __builtin_mul_overflow(strides[i], k, &step))
        detail::movement_error("stride", shape, to_string(mul), "a stride leaves int64");
      st.push_back(step);
      if (k < 0 && n > 0) off += (n - 1) * strides[i];
      if (!mask.empty()) {
        auto [lo, hi] = mask[i];
        auto up = [a](std::int64_t x) { return x / a + (x % a > 0); };  // ceil(x / a), x >= 0, no overflow
        m.push_back({up(k > 0 ? lo : n - hi), up(k > 0 ? hi : n - lo)});
      }
    }
    return View(s, st, off, m);
  }

#if defined(__GNUC__) && !defined(__clang__)
// (g++ 12 at -O3 takes the axis lists' reads for reads of unset elements: they are zeroed, and each
// index read is below the list's count)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  // A reshape this view can express by itself (splitting and merging compatible axes, adding or
  // removing size-1 axes, masks that stay boxes); nullopt when a second view is needed.
  constexpr std::optional<View> reshape(const Dims& new_shape) const {
    for (std::int64_t d : new_shape)
      if (d < 0) detail::movement_error("reshape", shape, to_string(new_shape), "sizes must be non-negative");
    if (!fits(new_shape))
      detail::movement_error("reshape", shape, to_string(new_shape), "more elements than int64 holds");
    if (prod(new_shape) != size())
      detail::movement_error("reshape", shape, to_string(new_shape), "element counts differ");
    if (new_shape == shape) return *this;
    bool empty_mask = false;
    for (const Pair& p : mask) empty_mask = empty_mask || p.first >= p.second;
    if (size() == 0 || empty_mask) {  // nothing valid to address: any strides will do
      // A rank-0 view has no dimension to carry the empty mask: keep it in a view below.
      if (empty_mask && new_shape.empty()) return std::nullopt;
      Pairs m;
      if (empty_mask) m = Pairs::filled(new_shape.size(), Pair{0, 0});
      return View(new_shape, {}, 0, m);
    }
    // Old and new axes without the size-1 ones, grouped where their running products meet.
    Dims old_axes, new_axes;
    for (std::size_t i = 0; i < ndim(); ++i)
      if (shape[i] != 1) old_axes.push_back(static_cast<std::int64_t>(i));
    for (std::size_t i = 0; i < new_shape.size(); ++i)
      if (new_shape[i] != 1) new_axes.push_back(static_cast<std::int64_t>(i));
    Dims st = Dims::filled(new_shape.size(), 0);
    Pairs m;
    if (!mask.empty()) m = Pairs::filled(new_shape.size(), Pair{0, 1});
    for (std::size_t oi = 0, ni = 0; oi < old_axes.size();) {
      std::size_t oj = oi + 1, nj = ni + 1;
      std::int64_t op = shape[old_axes[oi]], np = new_shape[new_axes[ni]];
      while (op != np) (op < np) ? void(op *= shape[old_axes[oj++]]) : void(np *= new_shape[new_axes[nj++]]);
      for (std::size_t k = oi; k + 1 < oj; ++k)
        if (strides[old_axes[k]] != shape[old_axes[k + 1]] * strides[old_axes[k + 1]]) return std::nullopt;
      std::int64_t acc = strides[old_axes[oj - 1]];
      for (std::size_t k = nj; k-- > ni;) {
        st[new_axes[k]] = acc;
        acc *= new_shape[new_axes[k]];
      }
      if (!mask.empty()) {
        // The group's valid range must be a box: inner old axes full, bounds aligned to new axes.
        std::int64_t inner_old = 1, inner_new = 1;
        for (std::size_t k = oi + 1; k < oj; ++k) {
          if (mask[old_axes[k]] != Pair{0, shape[old_axes[k]]}) return std::nullopt;
          inner_old *= shape[old_axes[k]];
        }
        for (std::size_t k = ni; k < nj; ++k) m[new_axes[k]] = {0, new_shape[new_axes[k]]};
        for (std::size_t k = ni + 1; k < nj; ++k) inner_new *= new_shape[new_axes[k]];
        std::int64_t lo = mask[old_axes[oi]].first * inner_old, hi = mask[old_axes[oi]].second * inner_old;
        if (lo % inner_new || hi % inner_new) return std::nullopt;
        m[new_axes[ni]] = {lo / inner_new, hi / inner_new};
      }
      oi = oj;
      ni = nj;
    }
    return View(new_shape, st, offset, m);
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  friend constexpr bool operator==(const View&, const View&) = default;
};

inline std::string to_string(const View& v) {
  return detail::cat("View(", to_string(v.shape), ", ", to_string(v.strides), ", ", std::to_string(v.offset),
                     v.mask.empty() ? "" : ", ", v.mask.empty() ? "" : to_string(v.mask), ")");
}

}  // namespace metagrad
