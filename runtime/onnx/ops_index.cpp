// Indexing operators whose indices are read on the host: GatherND, ScatterND, Compress, OneHot. Each
// turns its index tuples into rows of the data seen as (rows, slice) and does one index_select or
// scatter on them.
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

}  // namespace

void add_index_ops(OpTable& t) {
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
