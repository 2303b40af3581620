// Losses (tinygrad's and PyTorch's), built from elementwise ops and reductions. The class axis is
// the last one for sparse_categorical_crossentropy (tinygrad's), axis 1 for cross_entropy and
// nll_loss (PyTorch's: (N, C, d...), or (C) alone).
#include <cmath>
#include <optional>
#include <sstream>

#include "metagrad/detail/cat.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad {

namespace {
using V = std::vector<std::int64_t>;

// A label as written: 4, -1, 1.5.
std::string num(double v) {
  if (std::floor(v) == v && std::abs(v) < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  std::ostringstream o;
  o << v;
  return o.str();
}

// (op: the caller, named in an undefined tensor's error)
Tensor floating(const Tensor& x, const char* op = __builtin_FUNCTION()) {
  return dtypes::is_float(x.dtype(op)) ? x : x.cast(dtypes::float32);
}

// Stable log_softmax along axis. The shift is detached: log-softmax does not depend on it, so its
// gradient is exactly zero and the graph stays smaller.
Tensor log_softmax_at(const Tensor& x, std::int64_t axis) {
  Tensor m = x - x.max(axis, true).detach();
  return m - m.exp().sum(axis, true).log();
}

// Checks that the labels fit the input with its class axis removed and reads them once on the
// host, so a label out of [0, C) is an error naming it instead of silently contributing nothing.
// Labels are small and usually host data, so this costs one copy of Y.
void check_labels(const char* op, const Tensor& x, const Tensor& Y, std::int64_t axis,
                  std::optional<std::int64_t> ignore_index) {
  Dims want = x.shape();
  want.erase(static_cast<std::size_t>(axis));
  if (Y.shape() != want)
    throw std::invalid_argument(detail::cat(op, ": the input ", to_string(x.shape()),
                                            " needs labels of shape ", to_string(want), ", got ",
                                            to_string(Y.shape())));
  auto classes = x.shape()[static_cast<std::size_t>(axis)];
  std::vector<double> labels = Y.to_vector<double>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    double y = labels[i];
    if (ignore_index && y == static_cast<double>(*ignore_index)) continue;
    if (!(y >= 0 && y < static_cast<double>(classes) && std::floor(y) == y))
      throw std::invalid_argument(detail::cat(op, ": label ", num(y), " at flat index ", std::to_string(i),
                                              " is not a class of the input ", to_string(x.shape()),
                                              " (0 to ", std::to_string(classes - 1), ")"));
  }
}

// The class axis of a PyTorch-style loss input: 1 of (N, C, d...), 0 of (C).
std::int64_t class_axis(const char* op, const Tensor& x) {
  if (x.ndim() == 0)
    throw std::invalid_argument(
        detail::cat(op, ": the input ", to_string(x.shape()), " needs a class axis ((N, C, d...) or (C))"));
  return x.ndim() == 1 ? 0 : 1;
}

// A per-class weight (C,), shaped to broadcast along the class axis.
std::optional<Tensor> class_weight(const char* op, const Tensor& x, std::int64_t axis,
                                   const std::optional<Tensor>& w) {
  if (!w) return std::nullopt;
  std::int64_t c = x.shape()[static_cast<std::size_t>(axis)];
  if (w->ndim() != 1 || w->shape()[0] != c)
    throw std::invalid_argument(detail::cat(op, ": the weight ", to_string(w->shape()),
                                            " needs one value per class (", std::to_string(c),
                                            ",) of the input ", to_string(x.shape())));
  V shape(static_cast<std::size_t>(x.ndim()), 1);
  shape[static_cast<std::size_t>(axis)] = c;
  return w->cast(x.dtype()).reshape(shape);
}

void check_reduction(const char* op, std::string_view r) {
  if (r != "none" && r != "mean" && r != "sum")
    throw std::invalid_argument(
        detail::cat(op, ": reduction must be \"none\", \"mean\" or \"sum\", got \"", std::string(r), "\""));
}

// Losses per element, reduced: "mean" divides the sum by `denominator`.
Tensor reduce(const Tensor& loss, std::string_view reduction, const Tensor& denominator) {
  if (reduction == "none") return loss;
  Tensor s = loss.sum();
  return reduction == "sum" ? s : s / denominator;
}
Tensor count_of(const Tensor& like, std::int64_t n) {
  return Tensor::full({}, static_cast<double>(n), {.device = like.device(), .dtype = like.dtype()});
}

// The class-index terms of nll_loss and cross_entropy from log-probabilities logp, at the class
// axis: per element -w[y] logp[y] (0 where y is ignored), the weight w[y] each contributes (0 where
// ignored: the "mean" divides by their sum), and whether it is kept.
struct IndexTerms {
  Tensor loss, weight, kept;
};
IndexTerms index_terms(const Tensor& logp, const Tensor& Y, std::int64_t axis, const std::optional<Tensor>& w,
                       std::int64_t ignore_index) {
  std::int64_t classes = logp.shape()[static_cast<std::size_t>(axis)];
  V cshape(static_cast<std::size_t>(logp.ndim()), 1);
  cshape[static_cast<std::size_t>(axis)] = classes;
  Tensor labels = Y.detach().unsqueeze(axis);
  Tensor counter = Tensor::arange(static_cast<double>(classes), {.device = Y.device(), .dtype = Y.dtype()});
  Tensor one_hot = labels.eq(counter.reshape(cshape));
  // An ignore_index outside [0, C) matches no class, so its rows are already empty.
  if (ignore_index >= 0 && ignore_index < classes) {
    Tensor keep = labels.ne(scalar_for(labels, static_cast<double>(ignore_index), true));
    one_hot = keep.where(one_hot, keep);
  }
  // A select, not a product: a -inf log-probability in another class (a masked logit) is not read.
  Tensor picked = one_hot.where(logp, logp.scalar_like(0));
  Tensor weight = one_hot.cast(logp.dtype());
  if (w) picked = picked * *w, weight = weight * *w;
  return {-picked.sum(axis), weight.sum(axis), one_hot.any(axis)};
}

void check_smoothing(const char* op, double e) {
  if (!(e >= 0 && e <= 1))
    throw std::invalid_argument(detail::cat(op, ": label_smoothing must be in [0, 1], got ", num(e)));
}

// With label smoothing e: (1 - e) nll + e / C times the smoothing term -sum_c w[c] logp[c] (0 where
// ignored), each reduced the same way (its "mean" also divides by sum(w[y])).
Tensor smoothed(const Tensor& logp, const IndexTerms& t, std::int64_t axis, const std::optional<Tensor>& w,
                double e, std::string_view reduction) {
  Tensor denominator = t.weight.sum();
  Tensor nll = reduce(t.loss, reduction, denominator);
  if (e == 0) return nll;
  std::int64_t classes = logp.shape()[static_cast<std::size_t>(axis)];
  Tensor smooth = -(w ? logp * *w : logp).sum(axis);
  smooth = t.kept.where(smooth, smooth.scalar_like(0));
  return nll * (1 - e) + reduce(smooth, reduction, denominator) * (e / static_cast<double>(classes));
}
}  // namespace

// Mean cross-entropy of logits (..., C) against integer labels (...); labels equal to
// ignore_index are left out of both the sum and the count (all ignored gives NaN, as PyTorch).
Tensor Tensor::sparse_categorical_crossentropy(const Tensor& Y, std::int64_t ignore_index,
                                               double label_smoothing, std::string_view reduction) const {
  const char* op = "sparse_categorical_crossentropy";
  check_reduction(op, reduction);
  check_smoothing(op, label_smoothing);
  std::int64_t axis = ndim() - 1;
  if (axis < 0)
    throw std::invalid_argument(
        detail::cat(op, ": the input ", to_string(shape()), " needs a class axis (..., C)"));
  check_labels(op, *this, Y, axis, ignore_index);
  Tensor logp = log_softmax_at(floating(*this), axis);
  return smoothed(logp, index_terms(logp, Y, axis, std::nullopt, ignore_index), axis, std::nullopt,
                  label_smoothing, reduction);
}

Tensor Tensor::nll_loss(const Tensor& Y) const { return nll_loss(Y, {}); }

// -w[y] x[y] per element, x holding log-probabilities along axis 1; "mean" divides by sum(w[y]).
Tensor Tensor::nll_loss(const Tensor& Y, const LossOptions& o) const {
  const char* op = "nll_loss";
  check_reduction(op, o.reduction);
  if (o.label_smoothing != 0 || o.pos_weight)
    throw std::invalid_argument("nll_loss: label_smoothing and pos_weight are other losses' options");
  std::int64_t axis = class_axis(op, *this);
  check_labels(op, *this, Y, axis, o.ignore_index);
  Tensor x = floating(*this);
  IndexTerms t = index_terms(x, Y, axis, class_weight(op, x, axis, o.weight), o.ignore_index);
  return reduce(t.loss, o.reduction, t.weight.sum());
}

Tensor Tensor::cross_entropy(const Tensor& target) const { return cross_entropy(target, {}); }

// PyTorch's F.cross_entropy. With class indices and label smoothing e it is (1 - e) nll + e / C
// times the smoothing term -sum_c w[c] logp[c] (0 where ignored), each reduced the same way (its
// "mean" also divides by sum(w[y])). With probabilities p it is -sum_c w[c] p'[c] logp[c], p'
// = (1 - e) p + e / C, and "mean" divides by the number of rows.
Tensor Tensor::cross_entropy(const Tensor& target, const LossOptions& o) const {
  const char* op = "cross_entropy";
  check_reduction(op, o.reduction);
  if (o.pos_weight) throw std::invalid_argument("cross_entropy: pos_weight is binary_crossentropy_logits'");
  check_smoothing(op, o.label_smoothing);
  std::int64_t axis = class_axis(op, *this);
  Tensor x = floating(*this);
  std::int64_t classes = x.shape()[static_cast<std::size_t>(axis)];
  std::optional<Tensor> w = class_weight(op, x, axis, o.weight);
  Tensor logp = log_softmax_at(x, axis);
  double e = o.label_smoothing;
  if (target.shape() == shape()) {  // class probabilities
    if (!dtypes::is_float(target.dtype()))
      throw std::invalid_argument(
          detail::cat("cross_entropy: a target of the input's shape ", to_string(shape()),
                      " holds probabilities and must be floating, got ", target.dtype().name));
    if (o.ignore_index >= 0)
      throw std::invalid_argument(
          "cross_entropy: ignore_index is for class-index targets, not probabilities");
    Tensor p = target.cast(x.dtype());
    if (e > 0) p = p * (1 - e) + e / static_cast<double>(classes);
    Tensor term = logp * p;
    if (w) term = term * *w;
    return reduce(-term.sum(axis), o.reduction, count_of(x, classes == 0 ? 0 : x.numel() / classes));
  }
  check_labels(op, *this, target, axis, o.ignore_index);
  return smoothed(logp, index_terms(logp, target, axis, w, o.ignore_index), axis, w, e, o.reduction);
}

namespace {
void check_same_shape(const char* op, const Tensor& x, const Tensor& Y) {
  // Broadcasting (N, 1) against (N,) would silently give (N, N): require the same shape.
  if (x.shape() != Y.shape())
    throw std::invalid_argument(detail::cat(op, ": the input ", to_string(x.shape()), " and the target ",
                                            to_string(Y.shape()), " must have the same shape"));
}

// A weight that broadcasts to x without enlarging it.
Tensor elementwise_weight(const char* op, const char* what, const Tensor& x, const Tensor& w) {
  bool fits = w.ndim() <= x.ndim();
  for (std::size_t i = 1; fits && i <= w.shape().size(); ++i) {
    std::int64_t a = w.shape()[w.shape().size() - i], b = x.shape()[x.shape().size() - i];
    fits = a == b || a == 1;
  }
  if (!fits)
    throw std::invalid_argument(detail::cat(op, ": the ", what, " ", to_string(w.shape()),
                                            " does not broadcast to the input ", to_string(x.shape())));
  return w.cast(x.dtype());
}

void check_bce_options(const char* op, const LossOptions& o, bool logits) {
  check_reduction(op, o.reduction);
  if (o.label_smoothing != 0)
    throw std::invalid_argument(detail::cat(op, ": label_smoothing is cross_entropy's"));
  if (o.pos_weight && !logits)
    throw std::invalid_argument(detail::cat(op, ": pos_weight is binary_crossentropy_logits'"));
}
}  // namespace

Tensor Tensor::binary_crossentropy(const Tensor& Y) const { return binary_crossentropy(Y, {}); }

// -w (Y log x + (1 - Y) log(1 - x)) for probabilities x. The logs are clamped at -100, as PyTorch
// does, so x = 0 or 1 gives a finite loss (and not 0 * -inf = NaN).
Tensor Tensor::binary_crossentropy(const Tensor& Y, const LossOptions& o) const {
  const char* op = "binary_crossentropy";
  check_same_shape(op, *this, Y);
  check_bce_options(op, o, false);
  Tensor x = floating(*this), y = Y.cast(x.dtype());
  Tensor loss = -(y * x.log().maximum(-100)) - (1 - y) * (1 - x).log().maximum(-100);
  if (o.weight) loss = loss * elementwise_weight(op, "weight", x, *o.weight);
  return reduce(loss, o.reduction, count_of(x, x.numel()));
}

Tensor Tensor::binary_crossentropy_logits(const Tensor& Y) const { return binary_crossentropy_logits(Y, {}); }

// The same from logits, stably: with pos_weight p, (p Y + 1 - Y) softplus(x) - p Y x (PyTorch's
// -(p Y log sigmoid(x) + (1 - Y) log(1 - sigmoid(x)))), softplus(x) = m + log(exp(-m) + exp(x - m))
// and m = max(x, 0) detached (every exp argument is <= 0; without p the gradient is sigmoid(x) - Y
// exactly).
Tensor Tensor::binary_crossentropy_logits(const Tensor& Y, const LossOptions& o) const {
  const char* op = "binary_crossentropy_logits";
  check_same_shape(op, *this, Y);
  check_bce_options(op, o, true);
  Tensor x = floating(*this), y = Y.cast(x.dtype());
  Tensor m = x.relu().detach();
  Tensor softplus = m + ((-m).exp() + (x - m).exp()).log();
  Tensor loss = softplus - y * x;
  if (o.pos_weight) {
    Tensor py = elementwise_weight(op, "pos_weight", x, *o.pos_weight) * y;
    loss = (py + 1 - y) * softplus - py * x;
  }
  if (o.weight) loss = loss * elementwise_weight(op, "weight", x, *o.weight);
  return reduce(loss, o.reduction, count_of(x, x.numel()));
}

}  // namespace metagrad
