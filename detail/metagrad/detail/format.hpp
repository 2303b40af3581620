#pragma once
// Values as PyTorch prints them, for both paths' `operator<<`: nested brackets, one column width for
// every element, floats fixed with 4 decimals (or scientific when the magnitudes span too much),
// whole floats as "1.", and past 1000 elements only the first and last 3 entries of each dimension
// around "...". Header-only: the static path uses it without the runtime library.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace metagrad::detail {

enum class ValueKind { floating, integer, boolean };

struct ValueFormat {
  static constexpr std::int64_t threshold = 1000;  // PyTorch's: summarise past this many elements
  static constexpr std::int64_t edge = 3;          // entries kept at each end of a summarised dimension
};
inline constexpr std::size_t kLineWidth = 80;  // a row longer than this wraps

namespace format_impl {

inline std::string number(double v, ValueKind kind, bool sci, bool whole) {
  if (kind == ValueKind::boolean) return v != 0 ? "True" : "False";
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (kind == ValueKind::integer)
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (sci)
    std::snprintf(buf, sizeof buf, "%.4e", v);
  else if (whole)
    std::snprintf(buf, sizeof buf, "%.0f.", v);
  else
    std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// The indices shown along a dimension of size n: all, or the first and last `edge` (-1: the "...").
inline std::vector<std::int64_t> shown(std::int64_t n, bool summarise) {
  std::vector<std::int64_t> out;
  if (!summarise || n <= 2 * ValueFormat::edge) {
    for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  for (std::int64_t i = 0; i < ValueFormat::edge; ++i) out.push_back(i);
  out.push_back(-1);
  for (std::int64_t i = n - ValueFormat::edge; i < n; ++i) out.push_back(i);
  return out;
}

}  // namespace format_impl

// `values` row-major over `shape`; `prefix` opens the text ("tensor(") and sets the continuation
// lines' indent; the caller closes it.
inline std::string format_values(std::span<const double> values, std::span<const std::int64_t> shape,
                                 ValueKind kind, const std::string& prefix) {
  using namespace format_impl;
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  const bool summarise = n > ValueFormat::threshold;
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> strides(rank, 1);
  for (std::size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * shape[d];

  // The elements shown, to choose one notation and one width for all of them.
  std::vector<double> seen;
  auto collect = [&](auto&& self, std::size_t d, std::int64_t base) -> void {
    if (d == rank) return seen.push_back(values[static_cast<std::size_t>(base)]);
    for (std::int64_t i : shown(shape[d], summarise))
      if (i >= 0) self(self, d + 1, base + i * strides[d]);
  };
  if (n > 0) collect(collect, 0, 0);
  bool whole = true, sci = false;
  double lo = INFINITY, hi = 0;
  for (double v : seen) {
    if (!std::isfinite(v)) continue;
    whole = whole && v == std::nearbyint(v);
    if (v != 0) lo = std::min(lo, std::fabs(v)), hi = std::max(hi, std::fabs(v));
  }
  if (kind == ValueKind::floating && hi > 0) sci = whole ? hi > 1e8 : hi / lo > 1000 || hi > 1e8 || lo < 1e-4;
  if (sci) whole = false;
  // Floats are padded to the widest finite value (nan and inf keep their own width), as PyTorch does.
  std::size_t width = 0;
  for (double v : seen)
    if (kind != ValueKind::floating || std::isfinite(v))
      width = std::max(width, number(v, kind, sci, whole).size());
  auto padded = [&](double v) {
    std::string s = number(v, kind, sci, whole);
    return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
  };

  std::string out = prefix;
  auto emit = [&](auto&& self, std::size_t d, std::int64_t base) -> void {
    const std::size_t indent = prefix.size() + d;  // the column of this dimension's '['
    std::vector<std::int64_t> idx = shown(shape[d], summarise);
    out += '[';
    if (d + 1 == rank) {  // one row: elements wrapped at 80 columns
      const std::size_t per_line =
          std::max<std::size_t>(1, (kLineWidth - std::min(indent, kLineWidth)) / (width + 2));
      for (std::size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) out += k % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        out += idx[k] < 0 ? " ..." : padded(values[static_cast<std::size_t>(base + idx[k] * strides[d])]);
      }
    } else {  // rows break the line, with a blank line per dimension above them
      for (std::size_t k = 0; k < idx.size(); ++k) {
        if (k > 0) out += "," + std::string(rank - d - 1, '\n') + std::string(indent + 1, ' ');
        if (idx[k] < 0)
          out += "...";
        else
          self(self, d + 1, base + idx[k] * strides[d]);
      }
    }
    out += ']';
  };
  if (rank == 0)
    out += number(n ? values[0] : 0, kind, sci, whole);
  else
    emit(emit, 0, 0);
  return out;
}

}  // namespace metagrad::detail
