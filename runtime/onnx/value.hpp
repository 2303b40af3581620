#pragma once
// What flows along the graph's edges while a model runs: a Tensor, a host copy of a small constant
// (initializers, Constant nodes, shapes and the arithmetic on them), or both. Operators that only
// shuffle shapes compute on the host copies, so shape arithmetic never becomes kernels and its results
// are at hand where an operator needs plain numbers (Reshape's shape, Slice's starts). A tensor of
// strings lives on the host alone: Tensors are numeric.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "metagrad/onnx.hpp"
#include "metagrad/tensor.hpp"

namespace metagrad::onnx::detail {

// A host tensor: integers (and bools) in `i`, floating values in `f`, row-major.
struct Host {
  DType dtype = dtypes::float32;
  Dims shape;
  std::vector<std::int64_t> i;
  std::vector<double> f;

  bool is_float() const { return dtypes::is_float(dtype); }
  std::int64_t numel() const { return static_cast<std::int64_t>(is_float() ? f.size() : i.size()); }
  double at(std::int64_t k) const {
    return is_float() ? f[static_cast<std::size_t>(k)] : static_cast<double>(i[static_cast<std::size_t>(k)]);
  }
  std::int64_t int_at(std::int64_t k) const;  // floats truncated, clamped to int64's range
  std::vector<std::int64_t> ints() const;
  std::vector<double> doubles() const;
  void push(double v);  // appends, converting to this dtype's kind
  static Host ints_of(std::vector<std::int64_t> v, DType dt = dtypes::int64);  // 1-D
  static Host scalar(double v, DType dt);
  Tensor tensor() const;  // on Device::DEFAULT
  Host cast(DType to) const;
};

// A host tensor of at most this many elements is kept beside an initializer's Tensor.
inline constexpr std::int64_t kHostLimit = 4096;

struct Value {
  std::optional<Tensor> t;
  std::shared_ptr<const Host> h;
  std::shared_ptr<const std::vector<Value>> seq;  // a sequence (SequenceConstruct ...), inside the graph only
  std::shared_ptr<const StringTensor> s;          // a STRING tensor: never a Tensor, never a Host
  bool constant = false;  // an initializer or a Constant: the same Tensor on every call (on one device)
  Value() = default;
  Value(Tensor x) : t(std::move(x)) {}                                              // NOLINT
  Value(Host x) : h(std::make_shared<const Host>(std::move(x))) {}                  // NOLINT
  Value(StringTensor x) : s(std::make_shared<const StringTensor>(std::move(x))) {}  // NOLINT
  static Value sequence(std::vector<Value> items) {
    Value v;
    v.seq = std::make_shared<const std::vector<Value>>(std::move(items));
    return v;
  }
  bool empty() const { return !t && !h && !seq && !s; }
  Dims shape() const { return s ? s->shape : h ? h->shape : tensor().shape(); }
  DType dtype() const { return s ? string_dtype : h ? h->dtype : tensor().dtype(); }
  const Tensor& tensor() const {
    if (s) throw std::invalid_argument("a tensor of strings where a numeric tensor is expected");
    if (!t) throw std::invalid_argument("a sequence where a tensor is expected");
    return *t;
  }
};

// ONNX's TensorProto.DataType to metagrad's dtype; std::nullopt for the types metagrad lacks.
std::optional<DType> dtype_of_onnx(int elem_type);
const char* onnx_type_name(int elem_type);

}  // namespace metagrad::onnx::detail
