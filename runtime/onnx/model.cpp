// The model loader: reads a ModelProto, checks every node against the operator table once, and runs the
// graph node by node on each call.
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx {

using detail::Args;
using detail::Host;
using detail::NodeInfo;
using detail::Value;

struct Model::Impl {
  std::string path, folder;
  ::onnx::ModelProto proto;
  std::int64_t opset = 1;
  std::vector<std::string> in_names, out_names;
  std::vector<std::vector<Dim>> in_shapes, out_shapes;
  std::vector<DType> in_dtypes, out_dtypes;
  std::unordered_map<std::string, Value> consts;  // initializers and large Constants, on CPU
  // The same on each device a call has run on (moved and realized once, so a TinyJit step reads them).
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::unordered_map<std::string, Value>>>
      on_device;
  std::shared_ptr<const std::unordered_map<std::string, Value>> consts_on(const std::string& device) const;
  std::unordered_set<std::string> grad_of;  // the xs of Gradient nodes: traced for autograd
  struct Step {
    std::string label;  // "node 3 'conv1' (Conv)"
    std::vector<std::string> ins, outs;
    std::vector<std::string> frees;  // values no later node reads
    detail::Run run;
  };
  std::vector<Step> steps;
};

namespace {

// A declared value's element type and dimensions.
void declared(const ::onnx::ValueInfoProto& v, const std::string& what, std::vector<Dim>& shape, DType& dt) {
  const auto& type = v.type();
  if (!type.has_tensor_type())
    throw Error(what + " '" + v.name() +
                "' is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = type.tensor_type();
  auto d = detail::dtype_of_onnx(tt.elem_type());
  if (!d && tt.elem_type() != 0)
    throw Error(what + " '" + v.name() + "' has element type " + detail::onnx_type_name(tt.elem_type()) +
                ", which metagrad lacks");
  dt = d.value_or(dtypes::float32);
  if (tt.has_shape())
    for (const auto& dim : tt.shape().dim())
      shape.push_back(dim.has_dim_value() ? Dim(dim.dim_value()) : Dim(dim.dim_param()));
}

std::string dims_str(const std::vector<Dim>& s) {
  std::string out = "(";
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k) out += ", ";
    out += std::holds_alternative<std::int64_t>(s[k])
               ? std::to_string(std::get<std::int64_t>(s[k]))
               : (std::get<std::string>(s[k]).empty() ? "?" : std::get<std::string>(s[k]));
  }
  return out + ")";
}

std::shared_ptr<Model::Impl> build(std::shared_ptr<Model::Impl> m) {
  const auto& g = m->proto.graph();
  auto fail = [&](const std::string& what) { throw Error(m->path + ": " + what); };
  bool found = false;
  for (const auto& o : m->proto.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") m->opset = o.version(), found = true;
  if (!found && m->proto.opset_import_size()) fail("no opset_import for the default domain (ai.onnx)");
  try {
    for (const auto& init : g.initializer()) {
      Value v(detail::tensor_from_proto(init, m->folder));
      if (init.data_type() != ::onnx::TensorProto::FLOAT || v.t->numel() <= detail::kHostLimit)
        v.h = std::make_shared<const Host>(detail::host_from_proto(init, m->folder));
      m->consts[init.name()] = std::move(v);
    }
  } catch (const Error& e) { fail(std::string("initializer: ") + e.what()); }
  std::unordered_set<std::string> known;
  for (const auto& [name, v] : m->consts) known.insert(name);
  auto declare = [&](const ::onnx::ValueInfoProto& v, const char* what, std::vector<std::string>& names,
                     std::vector<std::vector<Dim>>& shapes, std::vector<DType>& dts) {
    std::vector<Dim> shape;
    DType dt;
    try {
      declared(v, what, shape, dt);
    } catch (const Error& e) { fail(e.what()); }
    names.push_back(v.name()), shapes.push_back(shape), dts.push_back(dt);
  };
  for (const auto& in : g.input())
    if (!m->consts.count(in.name())) {  // older files list initializers among the inputs
      declare(in, "input", m->in_names, m->in_shapes, m->in_dtypes);
      known.insert(in.name());
    }
  for (const auto& out : g.output()) declare(out, "output", m->out_names, m->out_shapes, m->out_dtypes);
  const auto& table = detail::op_table();
  for (int k = 0; k < g.node_size(); ++k) {
    const auto& n = g.node(k);
    Model::Impl::Step s;
    s.label = "node " + std::to_string(k) + " '" + n.name() + "' (" + n.op_type() + ")";
    try {
      bool training = n.domain() == "ai.onnx.preview.training" && n.op_type() == "Gradient";
      if (!n.domain().empty() && n.domain() != "ai.onnx" && !training)
        throw Error("the operator domain '" + n.domain() + "' is not supported");
      auto it = table.find(n.op_type());
      if (it == table.end()) throw Error("the operator " + n.op_type() + " is not supported");
      if (n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() == 1 &&
          n.attribute(0).name() == "value") {  // an initializer by another name: no node to run
        const auto& t = n.attribute(0).t();
        Value v(detail::tensor_from_proto(t, m->folder));
        if (v.t->numel() <= detail::kHostLimit)
          v.h = std::make_shared<const Host>(detail::host_from_proto(t, m->folder));
        m->consts[n.output(0)] = std::move(v);
        known.insert(n.output(0));
        continue;
      }
      for (const auto& in : n.input()) {
        if (!in.empty() && !known.count(in))
          throw Error("its input '" + in + "' is computed by no earlier node");
        s.ins.push_back(in);
      }
      for (const auto& a : n.attribute())
        if (a.type() == ::onnx::AttributeProto::GRAPH || a.type() == ::onnx::AttributeProto::GRAPHS)
          throw Error("subgraph attributes ('" + a.name() + "') are not supported");
      s.run = it->second(NodeInfo(n, m->opset, m->folder));
      if (training) {  // its y is read as one more input; its xs are traced from where they are set
        for (const auto& a : n.attribute()) {
          if (a.name() == "xs")
            for (const auto& x : a.strings()) m->grad_of.insert(x);
          if (a.name() == "y") {
            if (!known.count(a.s())) throw Error("its y '" + a.s() + "' is computed by no earlier node");
            s.ins.push_back(a.s());
          }
        }
        for (const auto& in : s.ins)
          if (m->consts.count(in))
            throw Error("the gradient with respect to an initializer ('" + in + "') is not supported");
      }
    } catch (const std::exception& e) { fail(s.label + ": " + e.what()); }
    for (const auto& o : n.output()) s.outs.push_back(o), known.insert(o);
    m->steps.push_back(std::move(s));
  }
  for (const auto& o : m->out_names)
    if (!known.count(o)) fail("the graph output '" + o + "' is computed by no node");
  // Each value is dropped after the last node that reads it (a large model keeps only what is live).
  std::unordered_set<std::string> keep(m->out_names.begin(), m->out_names.end()), seen;
  for (auto it = m->steps.rbegin(); it != m->steps.rend(); ++it)
    for (const auto& in : it->ins)
      if (!in.empty() && !keep.count(in) && !m->consts.count(in) && seen.insert(in).second)
        it->frees.push_back(in);
  return m;
}

}  // namespace

Model parse(const std::string& bytes, const std::string& name, const std::string& folder) {
  auto m = std::make_shared<Model::Impl>();
  m->path = name;
  m->folder = folder;
  if (!m->proto.ParseFromString(bytes))
    throw Error(name + ": not a valid ONNX model (the protobuf does not parse)");
  if (!m->proto.has_graph()) throw Error(name + ": the model has no graph");
  return Model(build(std::move(m)));
}

Model load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the model file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto slash = path.find_last_of('/');
  return parse(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs) const {
  const Impl& m = *impl_;
  if (inputs.size() != m.in_names.size())
    throw Error(m.path + ": the model takes " + std::to_string(m.in_names.size()) + " inputs, " +
                std::to_string(inputs.size()) + " were given");
  std::unordered_map<std::string, Value> env = *m.consts_on(Device::DEFAULT);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    const auto& want = m.in_shapes[k];
    std::string what = m.path + ": input '" + m.in_names[k] + "' ";
    if (x.dtype() != m.in_dtypes[k])
      throw Error(what + "must be " + m.in_dtypes[k].name + ", it is " + x.dtype().name);
    bool ok = want.empty() || static_cast<std::int64_t>(want.size()) == x.ndim();
    for (std::size_t d = 0; ok && d < want.size(); ++d)
      if (auto* v = std::get_if<std::int64_t>(&want[d]); v && *v != x.shape()[d]) ok = false;
    if (!ok && !(want.empty() && x.ndim() == 0))
      throw Error(what + "must have shape " + dims_str(want) + ", it has " + detail::shape_str(x.shape()));
    env[m.in_names[k]] = Value(m.grad_of.count(m.in_names[k]) ? x.detach().requires_grad_() : x);
  }
  for (const auto& s : m.steps) {
    Args args;
    args.n_out = s.outs.size();
    for (const auto& in : s.ins) args.in.push_back(in.empty() ? nullptr : &env.at(in));
    std::vector<Value> outs;
    try {
      outs = s.run(args);
    } catch (const std::exception& e) { throw Error(m.path + ": " + s.label + ": " + e.what()); }
    for (const auto& f : s.frees) env.erase(f);
    for (std::size_t k = 0; k < s.outs.size() && k < outs.size(); ++k)
      if (!s.outs[k].empty()) {
        Value& v = env[s.outs[k]] = std::move(outs[k]);
        if (m.grad_of.count(s.outs[k]) && v.t) v.t = v.t->detach().requires_grad_(), v.h = nullptr;
      }
  }
  std::vector<Tensor> out;
  for (const auto& name : m.out_names) {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty())
      throw Error(m.path + ": the output '" + name + "' was not computed");
    if (it->second.seq) throw Error(m.path + ": the output '" + name + "' is a sequence, not a tensor");
    out.push_back(it->second.t ? *it->second.t : it->second.h->tensor());
  }
  return out;
}

std::shared_ptr<const std::unordered_map<std::string, Value>> Model::Impl::consts_on(
    const std::string& device) const {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = on_device[device];
  if (!slot) {
    auto moved = std::make_shared<std::unordered_map<std::string, Value>>(consts);
    for (auto& [name, v] : *moved)
      if (v.t) v.t = v.t->to(device).realize();
    slot = std::move(moved);
  }
  return slot;
}

const std::vector<std::string>& Model::input_names() const { return impl_->in_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->out_names; }
const std::vector<std::vector<Dim>>& Model::input_shapes() const { return impl_->in_shapes; }
const std::vector<std::vector<Dim>>& Model::output_shapes() const { return impl_->out_shapes; }
const std::vector<DType>& Model::input_dtypes() const { return impl_->in_dtypes; }
const std::vector<DType>& Model::output_dtypes() const { return impl_->out_dtypes; }
std::int64_t Model::opset() const { return impl_->opset; }
const std::string& Model::path() const { return impl_->path; }

}  // namespace metagrad::onnx

namespace metagrad::onnx::detail {

const ::onnx::AttributeProto* NodeInfo::find(const std::string& name) const {
  for (const auto& a : proto_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace {
const ::onnx::AttributeProto* typed(const NodeInfo& n, const std::string& name,
                                    ::onnx::AttributeProto::AttributeType t) {
  const auto* a = n.find(name);
  if (a && a->type() != t && a->type() != ::onnx::AttributeProto::UNDEFINED)
    throw Error("attribute '" + name + "' must be " + ::onnx::AttributeProto::AttributeType_Name(t) +
                ", it is " + ::onnx::AttributeProto::AttributeType_Name(a->type()));
  return a;
}
}  // namespace

std::int64_t NodeInfo::i(const std::string& name, std::int64_t def) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::INT);
  return a ? a->i() : def;
}
double NodeInfo::f(const std::string& name, double def) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::FLOAT);
  return a ? a->f() : def;
}
std::string NodeInfo::s(const std::string& name, const std::string& def) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::STRING);
  return a ? a->s() : def;
}
std::vector<std::int64_t> NodeInfo::ints(const std::string& name, std::vector<std::int64_t> def) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::INTS);
  return a ? std::vector<std::int64_t>(a->ints().begin(), a->ints().end()) : def;
}
std::vector<double> NodeInfo::floats(const std::string& name, std::vector<double> def) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::FLOATS);
  return a ? std::vector<double>(a->floats().begin(), a->floats().end()) : def;
}
Host NodeInfo::tensor(const std::string& name) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::TENSOR);
  if (!a) throw Error("attribute '" + name + "' is missing");
  return host_from_proto(a->t(), folder_);
}
void NodeInfo::unsupported(const std::string& what) const { throw Error(what + " is not supported"); }
void NodeInfo::allow(std::initializer_list<const char*> names) const {
  for (const auto& a : proto_.attribute()) {
    bool ok = false;
    for (const char* n : names) ok = ok || a.name() == n;
    if (!ok) unsupported("attribute '" + a.name() + "'");
  }
}

Value& Args::need(std::size_t k) const {
  if (!has(k)) throw Error("input " + std::to_string(k) + " is missing");
  return *in[k];
}
const std::vector<Value>& Args::seq(std::size_t k) const {
  Value& v = need(k);
  if (!v.seq) throw Error("input " + std::to_string(k) + " must be a sequence");
  return *v.seq;
}
const Tensor& Args::t(std::size_t k) {
  Value& v = need(k);
  if (v.seq) throw Error("input " + std::to_string(k) + " is a sequence, not a tensor");
  if (!v.t) v.t = v.h->tensor();
  return *v.t;
}
const Host& Args::h(std::size_t k) {
  Value& v = need(k);
  if (v.seq) throw Error("input " + std::to_string(k) + " is a sequence, not a tensor");
  if (!v.h) {
    Host h;
    h.dtype = v.t->dtype();
    h.shape = v.t->shape();
    if (h.is_float())
      h.f = v.t->to_vector<double>();
    else
      h.i = v.t->to_vector<std::int64_t>();
    v.h = std::make_shared<const Host>(std::move(h));
  }
  return *v.h;
}
bool Args::all_host(std::size_t from) const {
  for (std::size_t k = from; k < in.size(); ++k)
    if (in[k] && !in[k]->empty() && !in[k]->h) return false;
  return true;
}

std::int64_t norm_axis(std::int64_t axis, std::int64_t rank, const char* what) {
  if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1))
    throw Error(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  std::size_t n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (std::size_t k = 0; k < n; ++k) {
    std::int64_t x = k < n - a.size() ? 1 : a[k - (n - a.size())];
    std::int64_t y = k < n - b.size() ? 1 : b[k - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      throw Error("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[k] = x == 1 ? y : x;
  }
  return out;
}

const OpTable& op_table() {
  static const OpTable t = [] {
    OpTable t;
    add_elementwise_ops(t);
    add_shape_ops(t);
    add_reduce_ops(t);
    add_nn_ops(t);
    add_resize_ops(t);
    add_index_ops(t);
    add_quantize_ops(t);
    add_sequence_ops(t);
    add_misc_ops(t);
    add_rnn_ops(t);
    add_signal_ops(t);
    return t;
  }();
  return t;
}

}  // namespace metagrad::onnx::detail
