#include "metagrad/shape/shapetracker.hpp"
#include "metagrad/detail/cat.hpp"

#include <algorithm>
#include <unordered_map>

namespace metagrad {

using symbolic::Node;

namespace {

// offset + sum(idx_i * stride_i), for positions given per dimension.
Node view_index(const View& v, const std::vector<Node>& idxs) {
  std::vector<Node> terms{v.offset};
  for (std::size_t i = 0; i < v.ndim(); ++i)
    if (v.strides[i] != 0) terms.push_back(idxs[i] * v.strides[i]);
  return Node::sum(terms);
}

// The mask as `lo <= idx_i < hi` for every dimension; bounds make the trivial ones vanish.
Node view_valid(const View& v, const std::vector<Node>& idxs) {
  std::vector<Node> conds;
  for (std::size_t i = 0; i < v.mask.size(); ++i) {
    conds.push_back(idxs[i] >= v.mask[i].first);
    conds.push_back(idxs[i] < v.mask[i].second);
  }
  return Node::ands(conds);
}

// Per-dimension positions of a flat row-major index into v's shape.
std::vector<Node> unflatten(const View& v, const Node& flat) {
  std::vector<Node> idxs(v.ndim(), Node(0));
  if (v.size() == 0) return idxs;  // no positions to name, and the extents below would divide by 0
  std::int64_t acc = 1;
  for (std::size_t i = v.ndim(); i-- > 0;) {
    idxs[i] = (flat / acc) % std::max<std::int64_t>(v.shape[i], 1);
    acc *= v.shape[i];
  }
  return idxs;
}

// view_index of a flat index, with runs of axes that address memory contiguously merged first:
// fewer div/mod pairs, so simpler expressions.
Node view_flat_index(const View& v, const Node& flat) {
  if (v.size() == 0) return v.offset;  // no positions to read, and the extents below would divide by 0
  std::vector<std::pair<std::int64_t, std::int64_t>> merged;  // (size, stride)
  for (std::size_t i = 0; i < v.ndim(); ++i) {
    std::int64_t s = v.shape[i], st = v.strides[i];
    if (!merged.empty() && (merged.back().first == 1 || (st != 0 && merged.back().second == s * st) ||
                            (st == 0 && merged.back().second == 0)))
      merged.back() = {merged.back().first * s, st};
    else
      merged.emplace_back(s, st);
  }
  std::vector<Node> terms{v.offset};
  std::int64_t acc = 1;
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) {
    if (it->second != 0) terms.push_back(((flat / acc) % std::max<std::int64_t>(it->first, 1)) * it->second);
    acc *= it->first;
  }
  return Node::sum(terms);
}

std::pair<Node, Node> through_lower_views(const std::vector<View>& views, Node idx, Node valid) {
  for (std::size_t i = views.size() - 1; i-- > 0;) {
    valid = Node::ands({valid, view_valid(views[i], unflatten(views[i], idx))});
    idx = view_flat_index(views[i], idx);
  }
  return {idx, valid};
}

std::vector<Node> index_variables(const Dims& shape) {
  std::vector<Node> idxs;
  for (std::size_t i = 0; i < shape.size(); ++i)
    idxs.push_back(symbolic::Variable("idx" + std::to_string(i), 0, std::max<std::int64_t>(shape[i] - 1, 0)));
  return idxs;
}

// Reads idx as offset + sum(var_i * stride_i). A variable inside any other kind of term, or in
// two terms, has no plain stride (nullopt); a variable that does not appear has stride 0.
struct LinearForm {
  std::vector<std::optional<std::int64_t>> strides;
  std::int64_t offset = 0;
};
LinearForm linear_form(const Node& idx, const std::vector<Node>& vars) {
  LinearForm out{std::vector<std::optional<std::int64_t>>(vars.size(), 0), 0};
  std::vector<int> uses(vars.size(), 0);
  auto var_index = [&](const Node& v) { return std::find(vars.begin(), vars.end(), v) - vars.begin(); };
  const std::vector<Node> terms = idx.is<symbolic::SumNode>() ? idx.nodes() : std::vector<Node>{idx};
  for (const Node& t : terms) {
    if (t.is_num()) {
      out.offset += t.b();
    } else if (t.is<symbolic::Variable>() || (t.is<symbolic::MulNode>() && t.a().is<symbolic::Variable>())) {
      bool mul = t.is<symbolic::MulNode>();
      auto i = static_cast<std::size_t>(var_index(mul ? t.a() : t));
      if (i < vars.size())
        out.strides[i] = uses[i]++ ? std::nullopt : std::optional<std::int64_t>(mul ? t.b() : 1);
    } else {
      for (const Node& v : t.vars()) {
        auto i = static_cast<std::size_t>(var_index(v));
        if (i < vars.size()) out.strides[i] = std::nullopt, uses[i]++;
      }
    }
  }
  return out;
}

}  // namespace

ShapeTracker::ShapeTracker(std::vector<View> views) : views_(std::move(views)) {
  if (views_.empty()) throw std::invalid_argument("ShapeTracker: needs at least one view");
}

ShapeTracker& ShapeTracker::reshape(const Dims& new_shape) {
  if (auto v = views_.back().reshape(new_shape)) {
    views_.back() = *v;
  } else {
    View top(new_shape);
    if (auto merged = views_.back().mask.empty() ? merge_views(views_.back(), top) : std::nullopt)
      views_.back() = *merged;
    else
      views_.push_back(top);
  }
  return *this;
}

ShapeTracker& ShapeTracker::permute(const Dims& axes) {
  return views_.back() = views_.back().permute(axes), *this;
}
ShapeTracker& ShapeTracker::expand(const Dims& s) { return views_.back() = views_.back().expand(s), *this; }
ShapeTracker& ShapeTracker::pad(const Pairs& arg) { return views_.back() = views_.back().pad(arg), *this; }
ShapeTracker& ShapeTracker::shrink(const Pairs& arg) {
  return views_.back() = views_.back().shrink(arg), *this;
}
ShapeTracker& ShapeTracker::stride(const Dims& mul) {
  return views_.back() = views_.back().stride(mul), *this;
}

ShapeTracker& ShapeTracker::simplify() {
  while (views_.size() >= 2) {
    auto merged = merge_views(views_[views_.size() - 2], views_.back());
    if (!merged) break;
    views_.pop_back();
    views_.back() = *merged;
  }
  return *this;
}

std::pair<Node, Node> ShapeTracker::expr_idxs(std::optional<std::vector<Node>> idxs) const {
  if (!idxs) idxs = index_variables(shape());
  if (idxs->size() != shape().size())
    throw std::invalid_argument(detail::cat("ShapeTracker.expr_idxs: ", std::to_string(idxs->size()),
                                            " indices for shape ", to_string(shape())));
  return through_lower_views(views_, view_index(views_.back(), *idxs), view_valid(views_.back(), *idxs));
}

std::pair<Node, Node> ShapeTracker::expr_node(const std::string& name) const {
  const View& top = views_.back();
  Node flat = symbolic::Variable(name, 0, std::max<std::int64_t>(size() - 1, 0));
  return through_lower_views(views_, view_flat_index(top, flat), view_valid(top, unflatten(top, flat)));
}

std::vector<std::optional<std::int64_t>> ShapeTracker::real_strides() const {
  if (views_.size() == 1 && views_[0].mask.empty())
    return {views_[0].strides.begin(), views_[0].strides.end()};
  std::vector<Node> idxs = index_variables(shape());
  auto [idx, valid] = expr_idxs(idxs);
  LinearForm form = linear_form(idx, idxs);
  for (const Node& v : valid.vars()) {
    auto it = std::find(idxs.begin(), idxs.end(), v);
    if (it != idxs.end()) form.strides[it - idxs.begin()] = std::nullopt;
  }
  return form.strides;
}

namespace {

std::optional<View> merge_views_symbolic(const View& below, const View& above) {
  std::vector<Node> idxs = index_variables(above.shape);
  auto [idx, valid] = ShapeTracker({below, above}).expr_idxs(idxs);
  LinearForm form = linear_form(idx, idxs);
  Dims strides;
  for (const auto& s : form.strides) {
    if (!s) return std::nullopt;
    strides.push_back(*s);
  }
  return View(above.shape, strides, form.offset, above.mask);
}

// The numbers that determine a pair of views (shapes, strides, offsets, masks), as a map key.
std::string pair_key(const View& below, const View& above) {
  std::vector<std::int64_t> k;
  for (const View* v : {&below, &above}) {
    k.push_back(static_cast<std::int64_t>(v->shape.size()));
    k.insert(k.end(), v->shape.begin(), v->shape.end());
    k.insert(k.end(), v->strides.begin(), v->strides.end());
    k.push_back(v->offset);
    k.push_back(static_cast<std::int64_t>(v->mask.size()));
    for (const Pair& m : v->mask) k.push_back(m.first), k.push_back(m.second);
  }
  return {reinterpret_cast<const char*>(k.data()), k.size() * sizeof(std::int64_t)};
}

}  // namespace

std::optional<View> merge_views(const View& below, const View& above) {
  if (!below.mask.empty()) return std::nullopt;
  // The symbolic merge costs tens of microseconds, and an eager training step schedules the same
  // views every call: merges are remembered (per thread, so no lock), forgotten past a bound.
  thread_local std::unordered_map<std::string, std::optional<View>> memo;
  std::string key = pair_key(below, above);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  std::optional<View> merged = merge_views_symbolic(below, above);
  if (memo.size() >= 16384) memo.clear();
  memo.emplace(std::move(key), merged);
  return merged;
}

std::string to_string(const ShapeTracker& st) {
  std::string out = detail::cat("ShapeTracker(shape=", to_string(st.shape()), ", views=[");
  for (std::size_t i = 0; i < st.views().size(); ++i) {
    if (i) out += ", ";
    out += to_string(st.views()[i]);
  }
  return out + "])";
}

}  // namespace metagrad
