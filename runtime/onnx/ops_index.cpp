// Indexing operators whose indices are read on the host: GatherND, ScatterND, Compress, OneHot,
// ReverseSequence, Unique. Each turns its index tuples into rows of the data seen as (rows, slice) and
// does one index_select, gather or scatter on them.
#include <algorithm>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using I64s = std::vector<std::int64_t>;

std::int64_t prod(const Dims& d, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t k = from; k < std::min(to, d.size()); ++k) n *= d[k];
  return n;
}

// The rows of data viewed as (prod(shape[:b+k]), prod(shape[b+k:])) that the index tuples (the last
// axis of `idx`, k long) pick, batch_dims b leading axes shared by data and idx.
I64s rows_of(const Dims& data, const Host& idx, std::int64_t b, const char* op) {
  auto k = static_cast<std::size_t>(idx.shape.back());
  auto ub = static_cast<std::size_t>(b);
  std::int64_t tuples = idx.numel() / static_cast<std::int64_t>(std::max<std::size_t>(k, 1));
  std::int64_t per_batch = tuples / prod(idx.shape, 0, ub), rows_per_batch = prod(data, ub, ub + k);
  I64s rows;
  for (std::int64_t t = 0; t < tuples; ++t) {
    std::int64_t row = 0;
    for (std::size_t j = 0; j < k; ++j) {
      std::int64_t d = data[ub + j],
                   i = idx.int_at(t * static_cast<std::int64_t>(k) + static_cast<std::int64_t>(j));
      if (i < 0) i += d;
      if (i < 0 || i >= d)
        throw Error(std::string(op) + ": index " + std::to_string(i) + " is out of range for size " +
                    std::to_string(d));
      row = row * d + i;
    }
    rows.push_back((t / per_batch) * rows_per_batch + row);
  }
  return rows;
}

Tensor ints(const I64s& v) { return Tensor(v, Dims{static_cast<std::int64_t>(v.size())}); }

// Unique's four outputs from the slices along axis (each slice's values, in order).
struct Uniques {
  I64s first, inverse, counts;
};
Uniques unique_slices(const std::vector<std::vector<double>>& slices, bool sorted) {
  std::vector<std::size_t> order;  // one slice index per distinct value, by first occurrence
  std::vector<std::int64_t> slot(slices.size());
  for (std::size_t k = 0; k < slices.size(); ++k) {
    auto it = std::find_if(order.begin(), order.end(), [&](std::size_t o) { return slices[o] == slices[k]; });
    slot[k] = it - order.begin();
    if (it == order.end()) order.push_back(k);
  }
  std::vector<std::size_t> rank(order.size());
  for (std::size_t k = 0; k < rank.size(); ++k) rank[k] = k;
  if (sorted)
    std::stable_sort(rank.begin(), rank.end(),
                     [&](auto x, auto y) { return slices[order[x]] < slices[order[y]]; });
  std::vector<std::int64_t> pos(rank.size());
  for (std::size_t k = 0; k < rank.size(); ++k) pos[rank[k]] = static_cast<std::int64_t>(k);
  Uniques u{I64s(rank.size()), I64s(slices.size()), I64s(rank.size(), 0)};
  for (std::size_t k = 0; k < rank.size(); ++k) u.first[k] = static_cast<std::int64_t>(order[rank[k]]);
  for (std::size_t k = 0; k < slices.size(); ++k) {
    u.inverse[k] = pos[static_cast<std::size_t>(slot[k])];
    ++u.counts[static_cast<std::size_t>(u.inverse[k])];
  }
  return u;
}

}  // namespace

void add_index_ops(OpTable& t) {
  t["ReverseSequence"] = [](const NodeInfo& n) -> Run {
    std::int64_t batch_axis = n.i("batch_axis", 1), time_axis = n.i("time_axis", 0);
    return [batch_axis, time_axis](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      I64s lens = a.ints(1);
      auto T = x.shape()[static_cast<std::size_t>(time_axis)],
           B = x.shape()[static_cast<std::size_t>(batch_axis)];
      I64s src;  // (T, B) or (B, T) as the axes lie: where each element along time comes from
      for (std::int64_t i = 0; i < (time_axis < batch_axis ? T : B); ++i)
        for (std::int64_t j = 0; j < (time_axis < batch_axis ? B : T); ++j) {
          std::int64_t t = time_axis < batch_axis ? i : j, b = time_axis < batch_axis ? j : i;
          src.push_back(t < lens[static_cast<std::size_t>(b)] ? lens[static_cast<std::size_t>(b)] - 1 - t
                                                              : t);
        }
      I64s s(static_cast<std::size_t>(x.ndim()), 1);
      s[static_cast<std::size_t>(time_axis)] = T, s[static_cast<std::size_t>(batch_axis)] = B;
      Tensor idx = ints(src).reshape(s).expand(I64s(x.shape().begin(), x.shape().end()));
      return {x.gather(time_axis, idx)};
    };
  };
  t["Unique"] = [](const NodeInfo& n) -> Run {
    bool has_axis = n.has("axis"), sorted = n.i("sorted", 1);
    std::int64_t axis = n.i("axis", 0);
    return [=](Args& a) -> std::vector<Value> {
      Tensor x = has_axis ? a.t(0) : a.t(0).reshape({-1});
      std::int64_t ax = has_axis ? norm_axis(axis, x.ndim(), "Unique: axis") : 0;
      I64s perm{ax};  // the slices along axis, one per row, their other axes in order
      for (std::int64_t k = 0; k < x.ndim(); ++k)
        if (k != ax) perm.push_back(k);
      Tensor moved = x.permute(perm);
      std::int64_t rows = moved.shape()[0], per = rows ? moved.numel() / rows : 0;
      auto v = moved.to_vector<double>();
      std::vector<std::vector<double>> slices;
      for (std::int64_t r = 0; r < rows; ++r)
        slices.emplace_back(v.begin() + r * per, v.begin() + (r + 1) * per);
      Uniques u = unique_slices(slices, sorted);
      return {x.index_select(ax, ints(u.first)), ints(u.first), ints(u.inverse), ints(u.counts)};
    };
  };
  t["GatherND"] = [](const NodeInfo& n) -> Run {
    std::int64_t b = n.i("batch_dims", 0);
    return [b](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      const Host& idx = a.h(1);
      auto k = static_cast<std::size_t>(idx.shape.back()), ub = static_cast<std::size_t>(b);
      Dims s = x.shape();
      Tensor rows = x.reshape({prod(s, 0, ub + k), -1}).index_select(0, ints(rows_of(s, idx, b, "GatherND")));
      I64s out(idx.shape.begin(), idx.shape.end() - 1);
      for (std::size_t j = ub + k; j < s.size(); ++j) out.push_back(s[j]);
      return {rows.reshape(out)};
    };
  };
  t["ScatterND"] = [](const NodeInfo& n) -> Run {
    std::string red = n.s("reduction", "none");
    static const std::pair<const char*, const char*> names[] = {
        {"none", ""}, {"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
    std::string mg = "?";
    for (auto [o, m] : names)
      if (red == o) mg = m;
    if (mg == "?") n.unsupported("reduction '" + red + "'");
    return [mg](Args& a) -> std::vector<Value> {
      const Tensor& x = a.t(0);
      const Host& idx = a.h(1);
      auto k = static_cast<std::size_t>(idx.shape.back());
      Dims s = x.shape();
      std::int64_t slice = prod(s, k, s.size());
      I64s rows = rows_of(s, idx, 0, "ScatterND");
      auto nrows = static_cast<std::int64_t>(rows.size());
      Tensor where = ints(rows).reshape({nrows, 1}).expand({nrows, slice});
      Tensor flat = x.reshape({-1, slice}), upd = a.t(2).reshape({nrows, slice});
      Tensor r = mg.empty() ? flat.scatter(0, where, upd) : flat.scatter_reduce(0, where, upd, mg);
      return {r.reshape(I64s(s.begin(), s.end()))};
    };
  };
  t["Compress"] = [](const NodeInfo& n) -> Run {
    bool has_axis = n.has("axis");
    std::int64_t axis = n.i("axis", 0);
    return [has_axis, axis](Args& a) -> std::vector<Value> {
      Tensor x = has_axis ? a.t(0) : a.t(0).reshape({-1});
      std::int64_t ax = has_axis ? norm_axis(axis, x.ndim(), "Compress: axis") : 0;
      const Host& c = a.h(1);
      I64s keep;
      for (std::int64_t k = 0; k < std::min(c.numel(), x.shape()[static_cast<std::size_t>(ax)]); ++k)
        if (c.at(k) != 0) keep.push_back(k);
      return {x.index_select(ax, ints(keep))};
    };
  };
  t["OneHot"] = [](const NodeInfo& n) -> Run {
    std::int64_t axis = n.i("axis", -1);
    return [axis](Args& a) -> std::vector<Value> {
      Tensor idx = a.t(0).cast(dtypes::int64);
      auto depth = static_cast<std::int64_t>(a.scalar(1));
      const Host& v = a.h(2);
      std::int64_t ax = norm_axis(axis, idx.ndim() + 1, "OneHot: axis");
      idx = (idx < 0).where(idx + depth, idx).unsqueeze(ax);
      I64s s(static_cast<std::size_t>(idx.ndim()), 1);
      s[static_cast<std::size_t>(ax)] = depth;
      Tensor pos = Tensor::arange(static_cast<double>(depth), {.dtype = dtypes::int64}).reshape(s);
      return {(pos == idx).where(v.at(1), v.at(0)).cast(v.dtype)};
    };
  };
}

}  // namespace metagrad::onnx::detail
