#pragma once
// ONNX models on Tensors (the optional library metagrad::onnx, docs/onnx.md):
//
//   auto m = metagrad::onnx::load("model.onnx");
//   std::vector<metagrad::Tensor> outs = m({x});  // lazy, on Device::DEFAULT; works inside a TinyJit step
//
// load reads the file with ONNX's own protobuf classes, turns the initializers into Tensors and checks
// every node against the operator table: an operator, or an attribute value, that is not supported is an
// error at load, naming the node. A call runs the graph on the inputs' shapes (dynamic dimensions are
// resolved then); shape arithmetic (Shape, Gather of shapes, Concat, Range ...) is folded on the host.
// Models with STRING inputs or outputs (StringNormalizer, Cast to and from strings) run through
// m.run({...}), which takes and returns AnyTensor: a Tensor or a StringTensor.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "metagrad/tensor.hpp"

namespace metagrad::onnx {

// Every error of this library: a bad file, an unsupported node, inputs that do not fit the graph.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One dimension of a declared input or output: a size, or a symbolic name ("batch"; "" when unnamed).
using Dim = std::variant<std::int64_t, std::string>;

// A tensor of ONNX's STRING element type, row-major. Tensors are numeric, so strings stay on the host.
struct StringTensor {
  Dims shape;
  std::vector<std::string> data;  // prod(shape) elements
};

// A model's input or output: a Tensor or a tensor of strings.
using AnyTensor = std::variant<Tensor, StringTensor>;

// What input_dtypes() and output_dtypes() report for a STRING input or output (no Tensor has it).
inline constexpr DType string_dtype{-1, 0, "string", 's'};

class Model {
 public:
  // Runs the graph: one Tensor per graph input (those without an initializer), in input_names() order.
  // An output that is a tensor of strings is an error naming it: use run().
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;
  // Runs the graph on Tensors and StringTensors alike (STRING inputs are StringTensors); one output each.
  std::vector<AnyTensor> run(const std::vector<AnyTensor>& inputs) const;

  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  const std::vector<std::vector<Dim>>& input_shapes() const;
  const std::vector<std::vector<Dim>>& output_shapes() const;
  const std::vector<DType>& input_dtypes() const;
  const std::vector<DType>& output_dtypes() const;
  std::int64_t opset() const;  // the default domain's version in opset_import
  const std::string& path() const;

  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

// Loads a model file; external data files are read relative to its folder.
Model load(const std::string& path);
// Parses a serialized ModelProto; `name` is what errors call it, `folder` where external data lies.
Model parse(const std::string& bytes, const std::string& name = "<memory>", const std::string& folder = ".");
// A serialized TensorProto (a backend test's input_0.pb) as a Tensor on Device::DEFAULT.
Tensor read_tensor(const std::string& path);
// A serialized TensorProto of any element type: STRING as a StringTensor, the others as read_tensor does.
AnyTensor read_any(const std::string& path);

}  // namespace metagrad::onnx
