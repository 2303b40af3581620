#pragma once
// Tensor (the seed's tensor.py): the familiar class, lazy through LazyBuffer, differentiable
// through mlops. A Tensor is a handle: copies share one state (data, grad, autograd context), the
// way Python references do, so an optimizer and a model see the same parameters.
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <variant>
#include <vector>

#include "metagrad/detail/cat.hpp"
#include "metagrad/detail/tensor.hpp"
#include "metagrad/device.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/mlops.hpp"
#include "metagrad/ops.hpp"

namespace metagrad {

// Creation options, for designated initializers: Tensor::ones({2, 3}, {.requires_grad = true}).
struct TensorOptions {
  std::string device = "";          // "" is Device::DEFAULT
  std::optional<DType> dtype = {};  // default: float32 (or the data's type)
  std::optional<bool> requires_grad = {};
};

// The axes a reduction or flip acts on: one axis, a list, or every axis. Negative axes count from
// the end. A list means exactly its axes, so an empty one is no axis, as numpy's and tinygrad's
// axis=(): x.flip({}) is x and x.sum({}) reduces nothing. Every axis (Python's axis=None) has its
// own spelling, AllAxes: x.sum(AllAxes), which is also the reductions' default (x.sum()).
struct AllAxesT {};
inline constexpr AllAxesT AllAxes{};
struct Axes {
  std::vector<std::int64_t> axes;
  bool all = false;
  Axes() = default;                                    // no axes
  Axes(AllAxesT) : all(true) {}                        // NOLINT: every axis
  Axes(std::int64_t a) : axes{a} {}                    // NOLINT
  Axes(int a) : Axes(static_cast<std::int64_t>(a)) {}  // NOLINT
  Axes(std::initializer_list<std::int64_t> a) : axes(a) {}
  Axes(std::vector<std::int64_t> a) : axes(std::move(a)) {}  // NOLINT
};

// One entry of a subscript, numpy style: an integer (removes the axis), a Slice, NewAxis, Ellipsis.
struct Slice {
  std::optional<std::int64_t> start = {}, stop = {}, step = {};
};
struct LossOptions;  // below Tensor, whose handles it holds
namespace cpu {
enum class QuantType : std::uint8_t;  // cpu/quant.hpp
}
namespace nn {
struct QuantizedTensor;  // nn/quantized.hpp
}

struct NewAxisT {};
struct EllipsisT {};
inline constexpr NewAxisT NewAxis{};
inline constexpr EllipsisT Ellipsis{};
class Tensor;
// The variant's alternatives are numpy's basic indexing. A Tensor entry (`tensor` set) is PyTorch's
// advanced indexing (see operator[]): an integer tensor picks elements, a bool one is a mask over as many
// axes as it has. The tensor is held beside the variant, not in it, so that the variant stays trivially
// copyable (a non-trivial alternative makes GCC 12 warn, maybe-uninitialized, at every copy of an Index).
struct Index : std::variant<std::int64_t, Slice, NewAxisT, EllipsisT> {
  using Basic = std::variant<std::int64_t, Slice, NewAxisT, EllipsisT>;
  std::shared_ptr<const Tensor> tensor;  // a Tensor entry; null for the basic ones
  template <std::integral I>
  Index(I i) : Basic(static_cast<std::int64_t>(i)) {}  // NOLINT: implicit, as the entries of t[{...}]
  Index(Slice s) : Basic(s) {}                         // NOLINT
  Index(NewAxisT n) : Basic(n) {}                      // NOLINT
  Index(EllipsisT e) : Basic(e) {}                     // NOLINT
  Index(const Tensor& t);                              // NOLINT
};

class Tensor {
 public:
  // ---- state (shared by copies) ----
  detail::Field<std::shared_ptr<LazyBuffer>, &detail::TensorState::lazydata> lazydata;
  // The gradient, once backward() has reached this tensor: `if (w.grad) w.grad->to_vector<float>()`.
  class GradField {
   public:
    explicit GradField(detail::TensorState* s) : s_(s) {}
    GradField(const GradField&) = delete;
    GradField& operator=(const GradField& o);
    GradField& operator=(const Tensor& t);
    GradField& operator=(std::nullopt_t);
    explicit operator bool() const { return s_->grad != nullptr; }
    Tensor operator*() const;
    struct Arrow {
      std::shared_ptr<Tensor> t;
      Tensor* operator->() const { return t.get(); }
    };
    Arrow operator->() const;
    void rebind(detail::TensorState* s) { s_ = s; }

   private:
    detail::TensorState* s_;
  } grad;
  detail::Field<std::optional<bool>, &detail::TensorState::requires_grad> requires_grad;
  detail::Field<std::shared_ptr<Function>, &detail::TensorState::ctx> _ctx;

  // ---- global modes ----
  static inline thread_local bool no_grad = false;   // forward builds no graph
  static inline thread_local bool training = false;  // dropout and batchnorm statistics
  struct NoGradGuard {
    bool prev = no_grad;
    NoGradGuard() { no_grad = true; }
    ~NoGradGuard() { no_grad = prev; }
  };
  struct TrainingGuard {
    bool prev = training;
    explicit TrainingGuard(bool on = true) { training = on; }
    ~TrainingGuard() { training = prev; }
  };

  // ---- construction ----
  // An undefined tensor, libtorch's: a place for a tensor assigned later (`Tensor t;`, `Tensor t{}`,
  // std::vector<Tensor>(n), a struct's members). Assigning a tensor to it defines it; every op and
  // method given one throws std::invalid_argument naming the operation (to_string and printing
  // say "undefined"); nn::get_state_dict skips it.
  Tensor();
  Tensor(std::initializer_list<float> data, TensorOptions opts = {});
  Tensor(std::initializer_list<std::initializer_list<float>> data, TensorOptions opts = {});
  Tensor(std::initializer_list<std::initializer_list<std::initializer_list<float>>> data,
         TensorOptions opts = {});
  template <class T>
  Tensor(const std::vector<T>& data, const Dims& shape, TensorOptions opts = {});
  explicit Tensor(std::shared_ptr<LazyBuffer> data, std::optional<bool> requires_grad = {});
  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept : Tensor(static_cast<const Tensor&>(o)) {}
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept { return *this = static_cast<const Tensor&>(o); }
  ~Tensor();

  static Tensor empty(const Dims& shape, TensorOptions opts = {});
  static Tensor zeros(const Dims& shape, TensorOptions opts = {});
  static Tensor ones(const Dims& shape, TensorOptions opts = {});
  // An integer value (or arange's integer arguments) makes an int32 tensor, a bool one a bool tensor,
  // any floating one float32, as tinygrad's literals (and PyTorch's, int64 there); a named dtype wins.
  static Tensor full(const Dims& shape, double value, TensorOptions opts = {});
  template <std::integral I>
  static Tensor full(const Dims& shape, I value, TensorOptions opts = {}) {
    if (!opts.dtype) opts.dtype = std::same_as<I, bool> ? dtypes::bool_ : dtypes::int32;
    return full(shape, static_cast<double>(value), opts);
  }
  static Tensor zeros_like(const Tensor& t, TensorOptions opts = {});
  static Tensor ones_like(const Tensor& t, TensorOptions opts = {});
  static Tensor full_like(const Tensor& t, double value, TensorOptions opts = {});
  static Tensor arange(double stop, TensorOptions opts = {});
  static Tensor arange(double start, double stop, double step = 1, TensorOptions opts = {});
  template <std::integral I>
  static Tensor arange(I stop, TensorOptions opts = {}) {
    return arange(I{0}, stop, 1, opts);
  }
  template <std::integral A, std::integral B, std::integral C = int>
  static Tensor arange(A start, B stop, C step = 1, TensorOptions opts = {}) {
    if (!opts.dtype) opts.dtype = dtypes::int32;
    return arange(static_cast<double>(start), static_cast<double>(stop), static_cast<double>(step), opts);
  }
  static Tensor eye(std::int64_t n, TensorOptions opts = {});
  static Tensor eye(std::int64_t n, std::int64_t m, TensorOptions opts = {});  // n rows, m columns
  // steps values from start to end, both included (float32 unless told)
  static Tensor linspace(double start, double end, std::int64_t steps, TensorOptions opts = {});
  // Grids from 1-D tensors: indexing "ij" (the first varies along axis 0) or "xy" (numpy's default)
  static std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, std::string_view indexing = "ij");
  // Random tensors come from one global generator: manual_seed makes runs repeatable.
  static void manual_seed(std::uint64_t seed);
  static Tensor rand(const Dims& shape, TensorOptions opts = {});   // uniform [0, 1)
  static Tensor randn(const Dims& shape, TensorOptions opts = {});  // standard normal
  static Tensor uniform(const Dims& shape, double low = -1, double high = 1, TensorOptions opts = {});
  static Tensor scaled_uniform(const Dims& shape, TensorOptions opts = {});  // uniform(-1, 1) / sqrt(numel)
  static Tensor glorot_uniform(const Dims& shape, TensorOptions opts = {});
  static Tensor kaiming_uniform(const Dims& shape, double a = 0.01, TensorOptions opts = {});

  // ---- properties and data ----
  bool defined() const noexcept { return state_->lazydata != nullptr; }
  // `op` is the function asking, the operation an undefined tensor's error names; callers leave it out.
  const Dims& shape(const char* op = __builtin_FUNCTION()) const;
  DType dtype(const char* op = __builtin_FUNCTION()) const;
  const std::string& device(const char* op = __builtin_FUNCTION()) const;
  std::int64_t numel(const char* op = __builtin_FUNCTION()) const;
  std::int64_t ndim(const char* op = __builtin_FUNCTION()) const;
  Tensor& realize();
  template <class T>
  std::vector<T> to_vector() const;  // realizes; the seed's .numpy(), row-major
  template <class T = float>
  T item() const;  // the single element of a one-element tensor
  Tensor to(const std::string& device) const;
  Tensor detach() const;  // same data, no graph
  Tensor& requires_grad_(bool on = true);
  Tensor& assign(const Tensor& x);  // replaces the data in place (shape and dtype must match)
  // Gradients of this scalar with respect to every tensor it depends on that requires grad.
  void backward();

  // ---- movement (views: nothing is copied) ----
  Tensor reshape(const std::vector<std::int64_t>& shape) const;  // one entry may be -1
  Tensor expand(const std::vector<std::int64_t>& shape) const;   // -1 keeps a size
  Tensor permute(const std::vector<std::int64_t>& order) const;
  Tensor flip(const Axes& axes) const;  // flip({}) flips nothing, flip(AllAxes) every axis
  Tensor pad(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg, double value = 0) const;
  // Padding by mode, PyTorch's: "constant" (zeros), "reflect" (mirrored, the edge not repeated; each pad
  // smaller than its axis), "replicate" (the edge repeated), "circular" (wrapping; each pad at most its
  // axis).
  Tensor pad(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg, std::string_view mode) const;
  Tensor pad2d(const std::vector<std::int64_t>& padding,
               double value = 0) const;  // (left, right, top, bottom)
  Tensor shrink(const std::vector<std::pair<std::int64_t, std::int64_t>>& arg) const;
  // numpy's basic indexing (integers, Slice, NewAxis, Ellipsis) gives a view. With Tensor entries it is
  // PyTorch's advanced indexing, a copy: the integer tensors broadcast together (shape B), negative values
  // count from the end, a value out of range throws (naming the value, the dimension and the shape); a bool
  // tensor is a mask over as many axes, the same as theirs (its nonzero() coordinates, a realize). B
  // replaces the indexed axes where they are adjacent, else goes first. Integers are basic, applied first
  // (PyTorch's rule, not numpy's: x[{0, Slice{}, i}] keeps B last). An index_select of the offsets, so
  // O(result) host loops (a realize of the indices) and a scatter-add gradient.
  Tensor operator[](const std::vector<Index>& index) const;
  // Writes through a subscript (advanced or basic): a copy of this with values (broadcast to this[index]'s
  // shape, cast to this dtype) at the elements this[index] reads, added with accumulate (repeated elements
  // summing), else written (the last of repeated ones stays). Gradients: to values from the elements
  // written (that stayed), to this from the elements not overwritten (all with accumulate).
  Tensor index_put(const std::vector<Index>& index, const Tensor& values, bool accumulate = false) const;
  // In place (Python's x[index] = values): this becomes index_put's result for every copy of the handle
  // (as PyTorch, a leaf that requires grad cannot be written in place: use index_put).
  Tensor& index_put_(const std::vector<Index>& index, const Tensor& values, bool accumulate = false);
  template <std::integral I>  // a template, so that t[{}] is the empty subscript, not t[0]
  Tensor operator[](I i) const {
    return (*this)[std::vector<Index>{static_cast<std::int64_t>(i)}];
  }
  Tensor cat(const std::vector<Tensor>& others, std::int64_t dim = 0) const;
  static Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
  Tensor repeat(const std::vector<std::int64_t>& repeats) const;
  std::vector<Tensor> chunk(std::int64_t n, std::int64_t dim = 0) const;
  std::vector<Tensor> split(std::int64_t size,
                            std::int64_t dim = 0) const;  // pieces of size (the last may be smaller)
  std::vector<Tensor> split(const std::vector<std::int64_t>& sizes,
                            std::int64_t dim = 0) const;    // they sum to the dim
  Tensor roll(std::int64_t shift, std::int64_t dim) const;  // elements move shift places along dim, wrapping
  // Empty dims (or none) roll the flattened tensor and reshape it back, PyTorch's roll(x, shift).
  Tensor roll(const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims) const;
  Tensor roll(std::int64_t shift) const;
  Tensor unflatten(std::int64_t dim, const std::vector<std::int64_t>& sizes) const;  // one size may be -1
  // The diagonal of the (dim1, dim2) planes, offset above (> 0) or below (< 0) the main one, as the last
  // axis.
  Tensor diagonal(std::int64_t offset = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1) const;
  // PyTorch's diag: a vector becomes the square matrix with it on the offset diagonal (zeros elsewhere),
  // a matrix gives its offset diagonal (diagonal(offset)).
  Tensor diag(std::int64_t offset = 0) const;
  // PyTorch's Tensor.unfold: the windows of size elements, step apart, along dim, as a new last axis
  // (dim's size becomes the number of windows, (n - size) / step + 1). A view.
  Tensor unfold(std::int64_t dim, std::int64_t size, std::int64_t step) const;
  Tensor repeat_interleave(std::int64_t repeats, std::optional<std::int64_t> dim = {}) const;
  // int64 of this integer tensor's shape plus (num_classes): 1 at each value's index (values in range)
  Tensor one_hot(std::int64_t num_classes) const;
  Tensor squeeze(std::optional<std::int64_t> dim = {}) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor transpose(std::int64_t dim0 = 1, std::int64_t dim1 = 0) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor triu(std::int64_t k = 0) const;
  Tensor tril(std::int64_t k = 0) const;
  // PyTorch's gather: out[i][j] = this[index[i][j]][j] for dim 0. index is integer, of this rank, no
  // larger than this on the other axes; the result has index's shape. index_select: a 1-D index picks
  // whole slices along dim. Both realize the index to check its range (an exception names the op, the
  // shapes and the value). Forward and backward cost O(result): a host loop (LoadOps::CUSTOM) copies the
  // picked elements, and the gradient is a scatter-add of the result's gradient into zeros. A TinyJit
  // step replays both loops, each checking the indices it is given.
  Tensor gather(std::int64_t dim, const Tensor& index) const;
  Tensor index_select(std::int64_t dim, const Tensor& index) const;
  // PyTorch's scatter family, gather's inverses: for dim 0, out[index[i][j]][j] = src[i][j] (scatter: the
  // last write wins where indices repeat), += (scatter_add), or reduced with "sum", "prod", "mean",
  // "amax" or "amin" (scatter_reduce; include_self = false leaves this out of the slots that receive). index
  // is integer, of this rank, no larger than src (or this, off dim). Host loops (LoadOps::CUSTOM), as
  // gather, so not inside a TinyJit step. Gradients to this and src: for scatter to the write that stays,
  // for scatter_add and the sum and mean reductions to every term, for amax and amin to the elements
  // equal to the result (ties split, as PyTorch); "prod" has none.
  Tensor scatter(std::int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(std::int64_t dim, const Tensor& index, double value) const;
  // scatter's reduce argument: "add" (scatter_reduce "sum") or "multiply" ("prod"), this included.
  Tensor scatter(std::int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce) const;
  Tensor scatter(std::int64_t dim, const Tensor& index, double value, std::string_view reduce) const;
  Tensor scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter_reduce(std::int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                        bool include_self = true) const;
  // Data-dependent shapes, so realized on the host: the elements where mask (bool, broadcast with this)
  // holds, in order, 1-D and differentiable; the int64 (count, ndim) coordinates of non-zero elements.
  Tensor masked_select(const Tensor& mask) const;
  Tensor nonzero() const;

  // ---- reductions (over AllAxes unless told; see Axes) ----
  // dtype: the input cast to it first, and the result's (sum otherwise accumulates integers in int64).
  Tensor sum(const Axes& axis = AllAxes, bool keepdim = false, std::optional<DType> dtype = {}) const;
  Tensor max(const Axes& axis = AllAxes, bool keepdim = false) const;
  Tensor min(const Axes& axis = AllAxes, bool keepdim = false) const;
  Tensor mean(const Axes& axis = AllAxes, bool keepdim = false,
              std::optional<DType> dtype = {}) const;  // dtype floating
  Tensor std(const Axes& axis = AllAxes, bool keepdim = false, std::int64_t correction = 1) const;
  Tensor var(const Axes& axis = AllAxes, bool keepdim = false, std::int64_t correction = 1) const;
  // PyTorch's torch.var_mean and torch.std_mean: (var, mean) and (std, mean) over the same axes, from one
  // mean.
  std::pair<Tensor, Tensor> var_mean(const Axes& axis = AllAxes, bool keepdim = false,
                                     std::int64_t correction = 1) const;
  std::pair<Tensor, Tensor> std_mean(const Axes& axis = AllAxes, bool keepdim = false,
                                     std::int64_t correction = 1) const;
  Tensor logsumexp(const Axes& axis = AllAxes, bool keepdim = false) const;  // finite for large inputs
  Tensor softmin(std::int64_t axis = -1) const;                              // softmax(-this)
  Tensor any(const Axes& axis = AllAxes, bool keepdim = false) const;        // bool: some element != 0
  Tensor all(const Axes& axis = AllAxes, bool keepdim = false) const;        // bool: every element != 0
  Tensor argmin(std::optional<std::int64_t> axis = {}, bool keepdim = false) const;  // int64
  Tensor softmax(std::int64_t axis = -1) const;
  Tensor log_softmax(std::int64_t axis = -1) const;
  Tensor argmax(std::optional<std::int64_t> axis = {}, bool keepdim = false) const;  // int64
  Tensor cumsum(std::int64_t axis = 0) const;
  Tensor cumprod(std::int64_t axis = 0) const;       // differentiable through zeros
  Tensor logcumsumexp(std::int64_t axis = 0) const;  // log(cumsum(exp(this))) without overflow
  // Running max (min) along axis and its int64 index: the last of equal values, NaN once seen, as PyTorch;
  // the values are a gather of this (the gradient goes to the chosen element). Chosen on the host.
  std::pair<Tensor, Tensor> cummax(std::int64_t axis = 0) const;
  std::pair<Tensor, Tensor> cummin(std::int64_t axis = 0) const;
  Tensor prod(const Axes& axis = AllAxes, bool keepdim = false) const;  // integers in int64, as sum
  // The k largest (or smallest) along dim, sorted, and their int64 indices; ties keep the lower index.
  // Chosen on the host (a realize), so not inside a TinyJit step; the values are a gather of this,
  // differentiable.
  std::pair<Tensor, Tensor> topk(std::int64_t k, std::int64_t dim = -1, bool largest = true) const;
  // Sorted along dim and the int64 indices, stable (equal values keep their order), NaN counted largest;
  // on the host, as topk; the values are differentiable.
  std::pair<Tensor, Tensor> sort(std::int64_t dim = -1, bool descending = false) const;
  Tensor argsort(std::int64_t dim = -1, bool descending = false) const;
  // num_samples draws from each row of non-negative weights (1-D or 2-D, not normalised), int64 indices
  // (rows, num_samples) or (num_samples). With replacement: inverse CDF of uniform numbers, on the
  // device; without: the Gumbel top-k trick. Negative, infinite or NaN weights, and rows summing to 0,
  // are errors (a realize checks them).
  Tensor multinomial(std::int64_t num_samples = 1, bool replacement = false) const;

  // ---- elementwise math (broadcasting; scalars on either side via the free operators) ----
  Tensor add(const Tensor& y) const;
  Tensor sub(const Tensor& y) const;
  Tensor mul(const Tensor& y) const;
  Tensor div(const Tensor& y) const;  // true division: integer inputs give float32
  // rounding_mode "trunc" (toward 0) or "floor" (Python's //): integers stay integers (a 0 divisor is an
  // error), floats round the true quotient (x / 0 is inf or NaN).
  Tensor div(const Tensor& y, std::string_view rounding_mode) const;
  Tensor floor_divide(const Tensor& y) const;  // div(y, "floor"), Python's //
  Tensor fmod(const Tensor& y) const;          // C's fmod: the remainder has this's sign
  Tensor remainder(const Tensor& y) const;     // Python's %: the remainder has y's sign
  // Bitwise ops of integer and bool tensors (floats are an error), broadcasting, on the host; a shift by a
  // negative count or by the width or more is an error. rshift is arithmetic (the sign repeats).
  Tensor bitwise_and(const Tensor& y) const;
  Tensor bitwise_or(const Tensor& y) const;
  Tensor bitwise_xor(const Tensor& y) const;
  Tensor bitwise_not() const;
  Tensor lshift(const Tensor& y) const;
  Tensor rshift(const Tensor& y) const;
  Tensor pow(const Tensor& y) const;
  // A floating exponent (or base) makes an integer tensor float32, an integral one keeps its dtype
  // (PyTorch's rule: int ** 2 is int, int ** 2.0 and int ** 2.5 are float).
  Tensor pow(double y) const;
  Tensor rpow(double base) const;  // base ** this (Python's 2 ** x); also pow(2, x)
  template <std::integral I>
  Tensor pow(I y) const {
    return pow_integral(static_cast<double>(y));
  }
  template <std::integral I>
  Tensor rpow(I base) const {
    return rpow_integral(static_cast<double>(base));
  }
  Tensor maximum(const Tensor& y) const;
  Tensor minimum(const Tensor& y) const;
  Tensor maximum(double y) const;
  Tensor minimum(double y) const;
  Tensor eq(const Tensor& y) const;  // comparisons give bool
  Tensor ne(const Tensor& y) const;
  Tensor lt(const Tensor& y) const;
  Tensor le(const Tensor& y) const;
  Tensor gt(const Tensor& y) const;
  Tensor ge(const Tensor& y) const;
  Tensor where(const Tensor& x, const Tensor& y) const;  // this is the condition
  Tensor where(double x, double y) const;
  Tensor where(const Tensor& x, double y) const;  // a scalar branch takes the other branch's dtype
  Tensor where(double x, const Tensor& y) const;
  // value where mask (bool, broadcastable to this shape) holds, this elsewhere; differentiable in this.
  Tensor masked_fill(const Tensor& mask, double value) const;

  Tensor neg() const;
  Tensor log() const;
  Tensor log2() const;
  Tensor exp() const;
  Tensor exp2() const;
  Tensor relu() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor ceil() const;
  Tensor floor() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor square() const;
  Tensor clip(double min, double max) const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor reciprocal() const;
  Tensor sigmoid() const;
  Tensor erf() const;  // the Gauss error function (exact GELU), within 1e-7 of it in float32
  Tensor elu(double alpha = 1.0) const;
  Tensor celu(double alpha = 1.0) const;
  Tensor swish() const;
  Tensor silu() const;
  Tensor relu6() const;
  Tensor hardswish() const;
  Tensor tanh() const;
  Tensor hardtanh(double min_val = -1, double max_val = 1) const;
  // approximate "tanh" (the default, tinygrad's formula) or "none" (the exact x * Phi(x) through erf,
  // PyTorch's default).
  Tensor gelu(std::string_view approximate = "tanh") const;
  Tensor quick_gelu() const;
  Tensor leakyrelu(double neg_slope = 0.01) const;
  Tensor mish() const;
  Tensor softplus(double beta = 1) const;
  Tensor softsign() const;
  Tensor hardsigmoid() const;  // clip(x / 6 + 1/2, 0, 1), PyTorch's
  Tensor logsigmoid() const;   // -softplus(-x), finite for large |x|
  Tensor selu() const;
  Tensor log10() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;  // NaN below 1
  Tensor atanh() const;  // NaN outside [-1, 1], +-inf at +-1
  Tensor asin() const;   // NaN outside [-1, 1]
  Tensor acos() const;   // NaN outside [-1, 1]
  Tensor atan() const;
  Tensor trunc() const;                    // toward 0
  Tensor round() const;                    // to the nearest integer, halves to even (PyTorch's, numpy's)
  Tensor copysign(const Tensor& y) const;  // |this| with y's sign bit (-0 counts as negative)
  Tensor lerp(const Tensor& end, double weight) const;  // this + weight * (end - this)
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  Tensor logaddexp(const Tensor& y) const;  // log(exp(this) + exp(y)) without overflow
  // Elementwise tests, bool results; integer tensors are never NaN or inf.
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor logical_not() const;  // this == 0
  // |this - other| <= atol + rtol |other| where finite, equal values (infinities), and NaN against NaN with
  // equal_nan: bool, broadcasting (integers compared in float32, as PyTorch's default dtype). allclose:
  // whether every element is (a realize).
  Tensor isclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  Tensor cast(DType dtype) const;
  // The same bytes read as dtype, of the same itemsize (float32 <-> int32 ...; sizes that differ are an
  // error naming both dtypes). A copy on the host (LoadOps::CUSTOM, not inside a TinyJit step); no gradient.
  Tensor bitcast(DType dtype) const;
  // A 2-D float weight (rows, cols), cols a multiple of 32, in GGUF's Q8_0 or Q4_0 blocks, for the
  // quantised products of nn/quantized.hpp (include it to use the result); bf16 is cast(dtypes::bfloat16).
  nn::QuantizedTensor quantize(cpu::QuantType type) const;
  Tensor contiguous() const;

  // ---- processing ----
  Tensor matmul(const Tensor& w) const;
  Tensor dot(const Tensor& w) const { return matmul(w); }
  // numpy's einsum: "ij,jk->ik", an implicit output (the letters seen once, alphabetically, after the "..."
  // axes), repeated letters in one operand (diagonals, traces), "..." for broadcast axes. Each pair of
  // operands contracts in one batched matmul (the GEMM); differentiable.
  static Tensor einsum(std::string_view subscripts, const std::vector<Tensor>& operands);
  Tensor linear(const Tensor& weight, const std::optional<Tensor>& bias = {}) const;  // x @ weight + bias
  // conv2d and conv_transpose2d take any number of spatial axes (the weight's rank - 2: conv1d,
  // conv3d). Padding is one value, one per spatial axis, or one per side, last axis first
  // (left, right, top, bottom, front, back), as torch's F.pad.
  Tensor conv2d(const Tensor& weight, const std::optional<Tensor>& bias = {}, std::int64_t groups = 1,
                std::vector<std::int64_t> stride = {1}, std::vector<std::int64_t> dilation = {1},
                std::vector<std::int64_t> padding = {0}) const;
  Tensor conv_transpose2d(const Tensor& weight, const std::optional<Tensor>& bias = {},
                          std::int64_t groups = 1, std::vector<std::int64_t> stride = {1},
                          std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                          std::vector<std::int64_t> output_padding = {0}) const;
  // Pooling over the last one, two or three axes (any axes before them are batch axes), PyTorch's
  // options in tinygrad's order. Each size is one value or one per axis; stride {} is the kernel size.
  // padding (per axis, both sides, at most half the kernel) is -inf for max and zeros for avg, whose
  // divisor counts it with count_include_pad (never the ceil_mode overhang). ceil_mode adds a last,
  // partial window where one starts inside the input or its left padding.
  Tensor avg_pool2d(std::vector<std::int64_t> kernel_size = {2, 2}, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false, bool count_include_pad = true) const;
  Tensor max_pool2d(std::vector<std::int64_t> kernel_size = {2, 2}, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false) const;
  Tensor avg_pool1d(std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false, bool count_include_pad = true) const;
  Tensor max_pool1d(std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false) const;
  Tensor avg_pool3d(std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false, bool count_include_pad = true) const;
  Tensor max_pool3d(std::vector<std::int64_t> kernel_size, std::vector<std::int64_t> stride = {},
                    std::vector<std::int64_t> dilation = {1}, std::vector<std::int64_t> padding = {0},
                    bool ceil_mode = false) const;
  // Max pooling's values and, as PyTorch's return_indices, the int64 flat index of each maximum in its
  // (unpadded) input plane (h * W + w in 2-D); the first of equal maxima. The values are differentiable.
  std::pair<Tensor, Tensor> max_pool1d_with_indices(std::vector<std::int64_t> kernel_size,
                                                    std::vector<std::int64_t> stride = {},
                                                    std::vector<std::int64_t> dilation = {1},
                                                    std::vector<std::int64_t> padding = {0},
                                                    bool ceil_mode = false) const;
  std::pair<Tensor, Tensor> max_pool2d_with_indices(std::vector<std::int64_t> kernel_size = {2, 2},
                                                    std::vector<std::int64_t> stride = {},
                                                    std::vector<std::int64_t> dilation = {1},
                                                    std::vector<std::int64_t> padding = {0},
                                                    bool ceil_mode = false) const;
  std::pair<Tensor, Tensor> max_pool3d_with_indices(std::vector<std::int64_t> kernel_size,
                                                    std::vector<std::int64_t> stride = {},
                                                    std::vector<std::int64_t> dilation = {1},
                                                    std::vector<std::int64_t> padding = {0},
                                                    bool ceil_mode = false) const;
  // The inverse of max pooling with indices: zeros of the pooling's input size (or output_size: the
  // spatial sizes), each value of this written at its index. A scatter (host loop, not inside a TinyJit
  // step), differentiable in this.
  Tensor max_unpool1d(const Tensor& indices, std::vector<std::int64_t> kernel_size,
                      std::vector<std::int64_t> stride = {}, std::vector<std::int64_t> dilation = {1},
                      std::vector<std::int64_t> padding = {0},
                      std::optional<std::vector<std::int64_t>> output_size = {}) const;
  Tensor max_unpool2d(const Tensor& indices, std::vector<std::int64_t> kernel_size = {2, 2},
                      std::vector<std::int64_t> stride = {}, std::vector<std::int64_t> dilation = {1},
                      std::vector<std::int64_t> padding = {0},
                      std::optional<std::vector<std::int64_t>> output_size = {}) const;
  Tensor max_unpool3d(const Tensor& indices, std::vector<std::int64_t> kernel_size,
                      std::vector<std::int64_t> stride = {}, std::vector<std::int64_t> dilation = {1},
                      std::vector<std::int64_t> padding = {0},
                      std::optional<std::vector<std::int64_t>> output_size = {}) const;
  // Resizes the spatial axes (all but the first two, N and C) to size, PyTorch's F.interpolate: "nearest"
  // (floor(i * in / out)), or "linear" ("bilinear", "trilinear": the same, along every spatial axis),
  // align_corners mapping the corner pixels' centres onto each other.
  Tensor interpolate(const std::vector<std::int64_t>& size, std::string_view mode = "nearest",
                     bool align_corners = false) const;
  Tensor layernorm(const Axes& axis = -1, double eps = 1e-5) const;
  // this / max(norm_p(this along dim), eps), PyTorch's F.normalize: p > 0 or INFINITY (the max of |x|).
  Tensor normalize(double p = 2, std::int64_t dim = 1, double eps = 1e-12) const;
  Tensor batchnorm(const std::optional<Tensor>& weight, const std::optional<Tensor>& bias, const Tensor& mean,
                   const Tensor& invstd) const;
  Tensor dropout(double p = 0.5) const;  // only while Tensor::training
  // softmax(this @ key^T / sqrt(E) + mask) @ value over the last two axes (this: (..., L, E), key (..., S,
  // E), value (..., S, Ev)), as PyTorch 2's F.scaled_dot_product_attention: a bool attn_mask is true where a
  // query may attend, a float one is added; is_causal masks j > i (not with attn_mask). dropout_p applies to
  // the weights while Tensor::training.
  Tensor scaled_dot_product_attention(const Tensor& key, const Tensor& value,
                                      const std::optional<Tensor>& attn_mask = {}, double dropout_p = 0,
                                      bool is_causal = false) const;
  Tensor sequential(const std::vector<std::function<Tensor(const Tensor&)>>& layers) const;

  // ---- losses ----
  // Mean negative log-likelihood of integer class labels Y (shape: this shape without the last axis).
  // tinygrad's label_smoothing e: (1 - e) times that plus e times minus the mean log-probability of the
  // row; reduction "mean" (over the labels not ignored), "sum" or "none" (this shape less its last axis).
  Tensor sparse_categorical_crossentropy(const Tensor& Y, std::int64_t ignore_index = -1,
                                         double label_smoothing = 0,
                                         std::string_view reduction = "mean") const;
  // PyTorch's F.cross_entropy and F.nll_loss (LossOptions: weight, ignore_index, reduction,
  // label_smoothing). The class axis is 1: this is (N, C), (N, C, d...) or (C). A target of this shape
  // holds class probabilities (cross_entropy only); any other is class indices of this shape without the
  // class axis, each in [0, C) or ignore_index (checked on the host, a realize). A "mean" over indices
  // divides by the summed weights of the targets not ignored (their count without a weight); over
  // probabilities by the number of rows (N x d...).
  Tensor cross_entropy(const Tensor& target) const;  // this holds logits
  Tensor cross_entropy(const Tensor& target, const LossOptions& opts) const;
  Tensor nll_loss(const Tensor& Y) const;  // this holds log-probabilities
  Tensor nll_loss(const Tensor& Y, const LossOptions& opts) const;
  // Elementwise against a target of this shape; LossOptions' weight broadcasts to this, pos_weight (logits
  // only) weighs the positive term and broadcasts with the target (one per class on the last axis).
  Tensor binary_crossentropy(const Tensor& Y) const;  // this holds probabilities
  Tensor binary_crossentropy(const Tensor& Y, const LossOptions& opts) const;
  Tensor binary_crossentropy_logits(const Tensor& Y) const;  // this holds logits
  Tensor binary_crossentropy_logits(const Tensor& Y, const LossOptions& opts) const;

  // Broadcast this and y to one shape and dtype (numpy rules, PyTorch promotion).
  std::pair<Tensor, Tensor> broadcasted(const Tensor& y) const;
  // A constant of this tensor's device and dtype, broadcastable to it.
  Tensor scalar_like(double value) const;

 private:
  std::shared_ptr<detail::TensorState> state_;
  explicit Tensor(std::shared_ptr<detail::TensorState> s);
  // The data of a defined tensor; an undefined one throws, naming op. Every accessor of the data goes
  // through it (and apply checks its inputs first), so no op reaches an undefined tensor's null data.
  const std::shared_ptr<LazyBuffer>& defined_data(const char* op = __builtin_FUNCTION()) const {
    if (!state_->lazydata) [[unlikely]]
      detail::undefined_tensor(op);
    return state_->lazydata;
  }
  void rebind();
  Tensor pow_integral(double y) const;
  Tensor rpow_integral(double base) const;
  std::int64_t resolve_axis(std::int64_t axis) const;
  Dims reduced_shape(const Axes& axis) const;
  friend class GradField;
};

// The options of the losses, as PyTorch's keywords: x.cross_entropy(y, {.weight = w, .reduction = "sum"}).
// Each loss rejects the options it does not take.
struct LossOptions {
  std::optional<Tensor> weight = {};  // cross_entropy, nll_loss: one per class (C,); BCE: broadcast to input
  std::int64_t ignore_index = -100;   // a class-index target equal to it adds nothing, weighs nothing
  std::string_view reduction = "mean";    // "none", "mean" or "sum"
  double label_smoothing = 0;             // cross_entropy: the target mixed with uniform, in [0, 1]
  std::optional<Tensor> pos_weight = {};  // binary_crossentropy_logits: the positive term's weight
};

// Scalars on either side. An integral scalar keeps an integer tensor's dtype; a floating one
// makes integer tensors float32 (as PyTorch does).
Tensor operator+(const Tensor& x, const Tensor& y);
Tensor operator-(const Tensor& x, const Tensor& y);
Tensor operator*(const Tensor& x, const Tensor& y);
Tensor operator/(const Tensor& x, const Tensor& y);
Tensor operator-(const Tensor& x);
Tensor operator<(const Tensor& x, const Tensor& y);
Tensor operator<=(const Tensor& x, const Tensor& y);
Tensor operator>(const Tensor& x, const Tensor& y);
Tensor operator>=(const Tensor& x, const Tensor& y);
// Elementwise equality, as PyTorch's and tinygrad's ==: a bool tensor, never a bool, so a use as
// handle identity (if, std::find) does not compile instead of comparing silently. Two handles
// are one tensor when they share state: copies of one Tensor.
Tensor operator==(const Tensor& x, const Tensor& y);
Tensor operator!=(const Tensor& x, const Tensor& y);
Tensor operator%(const Tensor& x, const Tensor& y);  // x.remainder(y)
Tensor operator&(const Tensor& x, const Tensor& y);
Tensor operator|(const Tensor& x, const Tensor& y);
Tensor operator^(const Tensor& x, const Tensor& y);
Tensor operator~(const Tensor& x);
Tensor operator<<(const Tensor& x, const Tensor& y);
Tensor operator>>(const Tensor& x, const Tensor& y);
Tensor pow(const Tensor& x, const Tensor& y);  // x.pow(y)
Tensor pow(const Tensor& x, double y);
Tensor pow(double x, const Tensor& y);  // y.rpow(x)
template <std::integral I>
Tensor pow(const Tensor& x, I y) {
  return x.pow(y);
}
template <std::integral I>
Tensor pow(I x, const Tensor& y) {
  return y.rpow(x);
}
Tensor scalar_for(const Tensor& like, double value, bool integral);
template <class S>
concept Scalar = std::is_arithmetic_v<S>;
#define METAGRAD_SCALAR_OP(op)                                                \
  template <Scalar S>                                                         \
  Tensor operator op(const Tensor& x, S s) {                                  \
    return x op scalar_for(x, static_cast<double>(s), std::is_integral_v<S>); \
  }                                                                           \
  template <Scalar S>                                                         \
  Tensor operator op(S s, const Tensor& x) {                                  \
    return scalar_for(x, static_cast<double>(s), std::is_integral_v<S>) op x; \
  }
METAGRAD_SCALAR_OP(+)
METAGRAD_SCALAR_OP(-)
METAGRAD_SCALAR_OP(*)
METAGRAD_SCALAR_OP(/)
METAGRAD_SCALAR_OP(<)
METAGRAD_SCALAR_OP(<=)
METAGRAD_SCALAR_OP(>)
METAGRAD_SCALAR_OP(>=)
METAGRAD_SCALAR_OP(==)
METAGRAD_SCALAR_OP(!=)
METAGRAD_SCALAR_OP(%)
METAGRAD_SCALAR_OP(&)
METAGRAD_SCALAR_OP(|)
METAGRAD_SCALAR_OP(^)
METAGRAD_SCALAR_OP(<<)
METAGRAD_SCALAR_OP(>>)
#undef METAGRAD_SCALAR_OP

std::string to_string(const Tensor& t);  // "<Tensor shape=(2, 3) dtype=float32 device=CPU>"
// Realizes and prints the values as PyTorch does: "tensor([[1.0000, 2.5000], ...], dtype=int32)",
// summarised with "..." past 1000 elements; dtype and device follow where not float32 and DEFAULT.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions ----

template <class T>
Tensor::Tensor(const std::vector<T>& data, const Dims& shape, TensorOptions opts)
    : Tensor(std::make_shared<detail::TensorState>()) {
  if (static_cast<std::int64_t>(data.size()) != check_shape("Tensor", shape))
    throw std::invalid_argument(
        detail::cat("Tensor: ", std::to_string(data.size()), " values cannot have shape ", to_string(shape)));
  auto host =
      LazyBuffer::from_raw(std::make_shared<RawMallocBuffer>(RawMallocBuffer::fromCPU(data)), shape, "CPU");
  std::string device = opts.device.empty() ? Device::DEFAULT : opts.device;
  auto lb = LazyBuffer::loadop(LoadOps::FROM, shape, dtype_of<T>, device, {}, {host});
  state_->lazydata = opts.dtype ? lb->cast(*opts.dtype) : lb;
  state_->requires_grad = opts.requires_grad;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  return defined_data("Tensor.to_vector")->to_vector<T>();
}

template <class T>
T Tensor::item() const {
  if (numel("Tensor.item") != 1)
    throw std::invalid_argument(
        detail::cat("Tensor.item: needs exactly one element, the shape is ", to_string(shape())));
  return to_vector<T>()[0];
}

template <class Derived, std::size_t Arity>
template <class... Args>
detail::dependent<Tensor, Args...> FunctionImpl<Derived, Arity>::apply(const Args&... args) {
  using T = detail::dependent<Tensor, Args...>;
  auto all = std::forward_as_tuple(args...);
  auto ctx = std::make_shared<Derived>();
  return [&]<std::size_t... I, std::size_t... R>(std::index_sequence<I...>, std::index_sequence<R...>) {
    const T* inputs[] = {&std::get<I>(all)...};
    for (const T* t : inputs)
      if (!t->defined()) [[unlikely]]
        detail::undefined_input(ctx->name());
    ctx->device = inputs[0]->device();
    bool unset = false;  // tinygrad's three states: True if an input needs grad, else None if one is unset
    for (const T* t : inputs) {
      std::optional<bool> r = t->requires_grad.get();
      ctx->needs_input_grad.push_back(r.value_or(false));
      unset = unset || !r;
    }
    for (bool b : ctx->needs_input_grad) ctx->requires_grad = ctx->requires_grad || b;
    // An expression of unset tensors stays unset (Tensor::randn(s) * 0.02 is a parameter to be), so an
    // optimizer makes it trainable; only inputs that are all false make it false (a buffer).
    std::optional<bool> rg = ctx->requires_grad ? std::optional<bool>(true)
                             : unset            ? std::nullopt
                                                : std::optional<bool>(false);
    T ret(ctx->forward(std::get<I>(all).lazydata.get()..., std::get<Arity + R>(all)...), rg);
    if (ctx->requires_grad && !T::no_grad) {
      ctx->parents = {std::get<I>(all)...};
      ret._ctx = ctx;
    }
    return ret;
  }
  (std::make_index_sequence<Arity>{}, std::make_index_sequence<sizeof...(Args) - Arity>{});
}

template <class Derived, std::size_t Arity>
const char* FunctionImpl<Derived, Arity>::name() const {
  static const std::string n = detail::demangle(typeid(Derived).name());
  return n.c_str();
}

}  // namespace metagrad
