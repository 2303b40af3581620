#pragma once
// The operator table: op type -> a `Prepare` that reads and checks the node's attributes once, at load,
// and returns the `Run` that computes the node on each call. Each op family registers its entries
// (ops_elementwise.cpp, ops_shape.cpp, ops_reduce.cpp, ops_nn.cpp, ops_resize.cpp, ops_string.cpp ...).
#include <onnx/onnx_pb.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "value.hpp"

namespace metagrad::onnx::detail {

struct Graph;  // a checked graph or subgraph (model.cpp)

// A graph's values while it runs; a subgraph's scope sees its parent's.
struct Env {
  std::unordered_map<std::string, Value> vals;
  Env* parent = nullptr;
  Value* find(const std::string& name);
};

// A node as its Prepare sees it: attributes with defaults, its opset, its subgraphs, and errors that name
// what is missing (the loader adds the node's index, name and op type).
class NodeInfo {
 public:
  using Subgraphs = std::function<std::shared_ptr<const Graph>(const ::onnx::GraphProto&)>;
  NodeInfo(const ::onnx::NodeProto& proto, std::int64_t opset, std::string folder, Subgraphs sub = {})
      : proto_(proto), opset_(opset), folder_(std::move(folder)), sub_(std::move(sub)) {}
  // The subgraph attribute `name`, checked as a graph whose nodes may read this node's scope.
  std::shared_ptr<const Graph> graph(const std::string& name) const;
  std::int64_t opset() const { return opset_; }
  std::size_t inputs() const { return static_cast<std::size_t>(proto_.input_size()); }
  bool has_input(std::size_t k) const { return k < inputs() && !proto_.input(static_cast<int>(k)).empty(); }
  bool has_output(std::size_t k) const {
    return k < static_cast<std::size_t>(proto_.output_size()) && !proto_.output(static_cast<int>(k)).empty();
  }

  bool has(const std::string& name) const { return find(name) != nullptr; }
  std::int64_t i(const std::string& name, std::int64_t def) const;
  double f(const std::string& name, double def) const;
  std::string s(const std::string& name, const std::string& def) const;
  std::vector<std::int64_t> ints(const std::string& name, std::vector<std::int64_t> def = {}) const;
  std::vector<double> floats(const std::string& name, std::vector<double> def = {}) const;
  std::vector<std::string> strings(const std::string& name) const;  // empty when absent
  Host tensor(const std::string& name) const;
  const ::onnx::AttributeProto* find(const std::string& name) const;
  // Throws Error("<what>"): an attribute value or input form this importer does not support.
  [[noreturn]] void unsupported(const std::string& what) const;

 private:
  const ::onnx::NodeProto& proto_;
  std::int64_t opset_;
  std::string folder_;
  Subgraphs sub_;
};

// A node's inputs while it runs. A missing optional input (an empty name) is `!has(k)`.
class Args {
 public:
  std::vector<Value*> in;
  std::size_t n_out = 1;
  Env* env = nullptr;  // the scope the node runs in (a subgraph's parent)
  std::size_t size() const { return in.size(); }
  bool has(std::size_t k) const { return k < in.size() && in[k] && !in[k]->empty(); }
  bool is_host(std::size_t k) const { return has(k) && in[k]->h != nullptr; }
  bool is_const(std::size_t k) const { return has(k) && in[k]->constant; }  // an initializer or Constant
  bool is_string(std::size_t k) const { return has(k) && in[k]->s != nullptr; }
  const StringTensor& str(std::size_t k) const;  // a STRING input
  const Tensor& t(std::size_t k);                // the Tensor (a host constant is uploaded once)
  const Host& h(std::size_t k);                  // the host copy (a Tensor is read back: a realize)
  Dims shape(std::size_t k) const { return need(k).shape(); }
  DType dtype(std::size_t k) const { return need(k).dtype(); }
  std::vector<std::int64_t> ints(std::size_t k) { return h(k).ints(); }
  double scalar(std::size_t k) { return h(k).at(0); }
  const std::vector<Value>& seq(std::size_t k) const;  // a sequence input
  // Every input from `from` on is on the host (shape arithmetic can stay there).
  bool all_host(std::size_t from = 0) const;

 private:
  Value& need(std::size_t k) const;
};

// Runs a subgraph in a scope under `outer`, its inputs bound in order: its outputs.
std::vector<Value> run_graph(const Graph& g, const std::vector<Value>& inputs, Env& outer);

using Run = std::function<std::vector<Value>(Args&)>;
using Prepare = std::function<Run(const NodeInfo&)>;
using OpTable = std::unordered_map<std::string, Prepare>;

const OpTable& op_table();
void add_elementwise_ops(OpTable& t);
void add_shape_ops(OpTable& t);
void add_reduce_ops(OpTable& t);
void add_nn_ops(OpTable& t);
void add_resize_ops(OpTable& t);
void add_index_ops(OpTable& t);
void add_quantize_ops(OpTable& t);
void add_sequence_ops(OpTable& t);
void add_misc_ops(OpTable& t);
void add_rnn_ops(OpTable& t);
void add_signal_ops(OpTable& t);
void add_control_ops(OpTable& t);
void add_string_ops(OpTable& t);  // after the others: it extends Equal to strings

// Helpers the families share.
std::int64_t norm_axis(std::int64_t axis, std::int64_t rank, const char* what);
Host host_from_proto(const ::onnx::TensorProto& p, const std::string& folder);
Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& folder);  // on CPU, no copy
StringTensor strings_from_proto(const ::onnx::TensorProto& p);                      // a STRING TensorProto
// An initializer or Constant value: the Tensor (on CPU, no copy) with a host copy when small, or strings.
Value constant_from_proto(const ::onnx::TensorProto& p, const std::string& folder);
Dims broadcast_shapes(const Dims& a, const Dims& b);
// The row-major offset in an input of shape `in` of element `flat` of the broadcast shape `out`.
std::int64_t broadcast_offset(const Dims& out, const Dims& in, std::int64_t flat);
// Casts to and from STRING (ops_string.cpp): numbers as their shortest round-trip text, text parsed back.
StringTensor to_strings(const Host& h);
Host from_strings(const StringTensor& s, DType to);
std::string shape_str(const Dims& d);

}  // namespace metagrad::onnx::detail
