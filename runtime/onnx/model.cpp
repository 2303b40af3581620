// The model loader: reads a ModelProto, checks every node against the operator table once, and runs the
// graph node by node on each call.
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {

// A checked graph: its steps in order, what each reads and writes, and when a value can be dropped.
struct Graph {
  std::string path;  // the model file, for messages
  std::vector<std::string> in_names, out_names;
  std::unordered_map<std::string, Value> consts;  // initializers and large Constants, on CPU
  std::unordered_set<std::string> grad_of;        // the xs of Gradient nodes: traced for autograd
  struct Step {
    std::string label;  // "node 3 'conv1' (Conv)"
    std::vector<std::string> ins, outs;
    std::vector<std::string> frees;  // values no later node reads
    Run run;
  };
  std::vector<Step> steps;
};

namespace {

// Every name a graph's nodes read, its subgraphs' included: what a node with that subgraph keeps alive.
void names_read(const ::onnx::GraphProto& g, std::unordered_set<std::string>& out) {
  for (const auto& n : g.node()) {
    for (const auto& in : n.input()) out.insert(in);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) names_read(a.g(), out);
      for (const auto& sub : a.graphs()) names_read(sub, out);
    }
  }
}

struct Context {
  std::string path, folder;
  std::int64_t opset;
};

// Checks a graph's nodes against the operator table and fills g; `known` holds the names the outer
// scopes define (empty for the model's graph), `top` whether it is the model's own graph.
void build_graph(Graph& gr, const ::onnx::GraphProto& g, const Context& ctx,
                 std::unordered_set<std::string> known, bool top) {
  gr.path = ctx.path;
  try {
    for (const auto& init : g.initializer()) gr.consts[init.name()] = constant_from_proto(init, ctx.folder);
  } catch (const Error& e) { throw Error(std::string("initializer: ") + e.what()); }
  for (const auto& [name, v] : gr.consts) known.insert(name);
  for (const auto& in : g.input())
    if (!gr.consts.count(in.name())) {  // older files list initializers among the inputs
      gr.in_names.push_back(in.name());
      known.insert(in.name());
    }
  for (const auto& out : g.output()) gr.out_names.push_back(out.name());
  const auto& table = op_table();
  std::vector<std::vector<std::string>> implicit;  // per step: what its subgraphs read
  for (int k = 0; k < g.node_size(); ++k) {
    const auto& n = g.node(k);
    Graph::Step s;
    s.label = "node " + std::to_string(k) + " '" + n.name() + "' (" + n.op_type() + ")";
    std::unordered_set<std::string> inner;
    try {
      bool training = n.domain() == "ai.onnx.preview.training" && n.op_type() == "Gradient";
      if (!n.domain().empty() && n.domain() != "ai.onnx" && !training)
        throw Error("the operator domain '" + n.domain() + "' is not supported");
      auto it = table.find(n.op_type());
      if (it == table.end()) throw Error("the operator " + n.op_type() + " is not supported");
      if (n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() == 1 &&
          n.attribute(0).name() == "value") {  // an initializer by another name: no node to run
        gr.consts[n.output(0)] = constant_from_proto(n.attribute(0).t(), ctx.folder);
        known.insert(n.output(0));
        continue;
      }
      for (const auto& in : n.input()) {
        if (!in.empty() && !known.count(in))
          throw Error("its input '" + in + "' is computed by no earlier node");
        s.ins.push_back(in);
      }
      for (const auto& a : n.attribute()) {
        if (a.type() == ::onnx::AttributeProto::GRAPHS)
          throw Error("attribute '" + a.name() + "': lists of subgraphs are not supported");
        if (a.has_g()) names_read(a.g(), inner);
      }
      auto subgraphs = [&ctx, known](const ::onnx::GraphProto& sub) {
        auto child = std::make_shared<Graph>();
        build_graph(*child, sub, ctx, known, false);
        return std::shared_ptr<const Graph>(child);
      };
      s.run = it->second(NodeInfo(n, ctx.opset, ctx.folder, subgraphs));
      if (training) {  // its y is read as one more input; its xs are traced from where they are set
        if (!top) throw Error("Gradient inside a subgraph is not supported");
        for (const auto& a : n.attribute()) {
          if (a.name() == "xs")
            for (const auto& x : a.strings()) gr.grad_of.insert(x);
          if (a.name() == "y") {
            if (!known.count(a.s())) throw Error("its y '" + a.s() + "' is computed by no earlier node");
            s.ins.push_back(a.s());
          }
        }
        for (const auto& in : s.ins)
          if (gr.consts.count(in))
            throw Error("the gradient with respect to an initializer ('" + in + "') is not supported");
      }
    } catch (const std::exception& e) { throw Error(s.label + ": " + e.what()); }
    for (const auto& o : n.output()) s.outs.push_back(o), known.insert(o);
    implicit.emplace_back(inner.begin(), inner.end());
    gr.steps.push_back(std::move(s));
  }
  for (const auto& o : gr.out_names)
    if (!known.count(o)) throw Error("the graph output '" + o + "' is computed by no node");
  // Each value is dropped after the last node that reads it (a large model keeps only what is live).
  std::unordered_set<std::string> keep(gr.out_names.begin(), gr.out_names.end()), seen;
  for (std::size_t k = gr.steps.size(); k-- > 0;) {
    auto& st = gr.steps[k];
    std::vector<std::string> reads = st.ins;
    reads.insert(reads.end(), implicit[k].begin(), implicit[k].end());
    for (const auto& in : reads)
      if (!in.empty() && !keep.count(in) && !gr.consts.count(in) && seen.insert(in).second)
        st.frees.push_back(in);
  }
}

// Runs the steps of g in env.
void run_steps(const Graph& g, Env& env) {
  for (const auto& s : g.steps) {
    Args args;
    args.n_out = s.outs.size();
    args.env = &env;
    std::vector<Value> outs;
    try {
      for (const auto& in : s.ins) {
        Value* v = in.empty() ? nullptr : env.find(in);
        if (!in.empty() && !v) throw Error("the value '" + in + "' is not set");
        args.in.push_back(v);
      }
      outs = s.run(args);
    } catch (const std::exception& e) { throw Error(g.path + ": " + s.label + ": " + e.what()); }
    for (const auto& f : s.frees) env.vals.erase(f);
    for (std::size_t k = 0; k < s.outs.size() && k < outs.size(); ++k)
      if (!s.outs[k].empty()) {
        Value& v = env.vals[s.outs[k]] = std::move(outs[k]);
        if (g.grad_of.count(s.outs[k]) && v.t) v.t = v.t->detach().requires_grad_(), v.h = nullptr;
      }
  }
}

}  // namespace

Value* Env::find(const std::string& name) {
  for (Env* e = this; e; e = e->parent)
    if (auto it = e->vals.find(name); it != e->vals.end()) return &it->second;
  return nullptr;
}

std::vector<Value> run_graph(const Graph& g, const std::vector<Value>& inputs, Env& outer) {
  Env env{g.consts, &outer};
  for (auto& [name, v] : env.vals)
    if (v.t && v.t->device() != Device::DEFAULT) v.t = v.t->to(Device::DEFAULT);
  if (inputs.size() > g.in_names.size())
    throw Error("the subgraph takes " + std::to_string(g.in_names.size()) + " inputs, " +
                std::to_string(inputs.size()) + " were given");
  for (std::size_t k = 0; k < inputs.size(); ++k) env.vals[g.in_names[k]] = inputs[k];
  run_steps(g, env);
  std::vector<Value> out;
  for (const auto& name : g.out_names) {
    Value* v = env.find(name);
    if (!v) throw Error("the subgraph output '" + name + "' was not computed");
    out.push_back(*v);
  }
  return out;
}

std::shared_ptr<const Graph> NodeInfo::graph(const std::string& name) const {
  const auto* a = find(name);
  if (!a || !a->has_g()) throw Error("the subgraph attribute '" + name + "' is missing");
  try {
    return sub_(a->g());
  } catch (const Error& e) { throw Error("subgraph '" + name + "': " + e.what()); }
}

}  // namespace metagrad::onnx::detail

namespace metagrad::onnx {

using detail::Args;
using detail::Host;
using detail::NodeInfo;
using detail::Value;

struct Model::Impl {
  std::string path;
  ::onnx::ModelProto proto;
  std::int64_t opset = 1;
  std::vector<std::vector<Dim>> in_shapes, out_shapes;
  std::vector<DType> in_dtypes, out_dtypes;
  detail::Graph graph;
  // The initializers on each device a call has run on (moved and realized once, so a TinyJit step reads
  // them).
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::unordered_map<std::string, Value>>>
      on_device;
  std::shared_ptr<const std::unordered_map<std::string, Value>> consts_on(const std::string& device) const;
};

namespace {

// A declared value's element type and dimensions.
void declared(const ::onnx::ValueInfoProto& v, const std::string& what, std::vector<Dim>& shape, DType& dt) {
  const auto& type = v.type();
  if (!type.has_tensor_type())
    throw Error(what + " '" + v.name() +
                "' is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = type.tensor_type();
  auto d =
      tt.elem_type() == ::onnx::TensorProto::STRING ? string_dtype : detail::dtype_of_onnx(tt.elem_type());
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

Model build(std::shared_ptr<Model::Impl> m, const std::string& folder) {
  const auto& g = m->proto.graph();
  try {
    bool found = false;
    for (const auto& o : m->proto.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") m->opset = o.version(), found = true;
    if (!found && m->proto.opset_import_size())
      throw Error("no opset_import for the default domain (ai.onnx)");
    detail::build_graph(m->graph, g, {m->path, folder, m->opset}, {}, true);
    for (const auto& in : g.input())
      if (!m->graph.consts.count(in.name())) {
        std::vector<Dim> shape;
        DType dt;
        declared(in, "input", shape, dt);
        m->in_shapes.push_back(shape), m->in_dtypes.push_back(dt);
      }
    for (const auto& out : g.output()) {
      std::vector<Dim> shape;
      DType dt;
      declared(out, "output", shape, dt);
      m->out_shapes.push_back(shape), m->out_dtypes.push_back(dt);
    }
  } catch (const Error& e) { throw Error(m->path + ": " + e.what()); }
  return Model(std::move(m));
}

}  // namespace

Model parse(const std::string& bytes, const std::string& name, const std::string& folder) {
  auto m = std::make_shared<Model::Impl>();
  m->path = name;
  if (!m->proto.ParseFromString(bytes))
    throw Error(name + ": not a valid ONNX model (the protobuf does not parse)");
  if (!m->proto.has_graph()) throw Error(name + ": the model has no graph");
  return build(std::move(m), folder);
}

Model load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the model file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto slash = path.find_last_of('/');
  return parse(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

std::vector<AnyTensor> Model::run(const std::vector<AnyTensor>& inputs) const {
  const Impl& m = *impl_;
  const auto& names = m.graph.in_names;
  if (inputs.size() != names.size())
    throw Error(m.path + ": the model takes " + std::to_string(names.size()) + " inputs, " +
                std::to_string(inputs.size()) + " were given");
  detail::Env env{*m.consts_on(Device::DEFAULT), nullptr};
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const auto* x = std::get_if<Tensor>(&inputs[k]);
    const auto* xs = std::get_if<StringTensor>(&inputs[k]);
    DType dt = x ? x->dtype() : string_dtype;
    Dims shape = x ? x->shape() : xs->shape;
    const auto& want = m.in_shapes[k];
    std::string what = m.path + ": input '" + names[k] + "' ";
    if (dt != m.in_dtypes[k]) throw Error(what + "must be " + m.in_dtypes[k].name + ", it is " + dt.name);
    bool ok = want.empty() || want.size() == shape.size();
    for (std::size_t d = 0; ok && d < want.size(); ++d)
      if (auto* v = std::get_if<std::int64_t>(&want[d]); v && *v != shape[d]) ok = false;
    if (!ok && !(want.empty() && shape.empty()))
      throw Error(what + "must have shape " + dims_str(want) + ", it has " + detail::shape_str(shape));
    if (xs) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      if (static_cast<std::int64_t>(xs->data.size()) != n)
        throw Error(what + "has shape " + detail::shape_str(shape) + " but " +
                    std::to_string(xs->data.size()) + " strings");
      env.vals[names[k]] = Value(*xs);
    } else {
      env.vals[names[k]] = Value(m.graph.grad_of.count(names[k]) ? x->detach().requires_grad_() : *x);
    }
  }
  detail::run_steps(m.graph, env);
  std::vector<AnyTensor> out;
  for (const auto& name : m.graph.out_names) {
    Value* v = env.find(name);
    if (!v || v->empty()) throw Error(m.path + ": the output '" + name + "' was not computed");
    if (v->seq) throw Error(m.path + ": the output '" + name + "' is a sequence, not a tensor");
    if (v->s)
      out.emplace_back(*v->s);
    else
      out.emplace_back(v->t ? *v->t : v->h->tensor());
  }
  return out;
}

std::vector<Tensor> Model::operator()(const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> out;
  const auto& names = impl_->graph.out_names;
  auto got = run(std::vector<AnyTensor>(inputs.begin(), inputs.end()));
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (!std::holds_alternative<Tensor>(got[k]))
      throw Error(impl_->path + ": the output '" + names[k] +
                  "' is a tensor of strings, which a Tensor cannot hold: call run() for it");
    out.push_back(std::move(std::get<Tensor>(got[k])));
  }
  return out;
}

std::shared_ptr<const std::unordered_map<std::string, Value>> Model::Impl::consts_on(
    const std::string& device) const {
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = on_device[device];
  if (!slot) {
    auto moved = std::make_shared<std::unordered_map<std::string, Value>>(graph.consts);
    for (auto& [name, v] : *moved)
      if (v.t) v.t = v.t->to(device).realize();
    slot = std::move(moved);
  }
  return slot;
}

const std::vector<std::string>& Model::input_names() const { return impl_->graph.in_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->graph.out_names; }
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
std::vector<std::string> NodeInfo::strings(const std::string& name) const {
  const auto* a = typed(*this, name, ::onnx::AttributeProto::STRINGS);
  return a ? std::vector<std::string>(a->strings().begin(), a->strings().end()) : std::vector<std::string>{};
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

Value& Args::need(std::size_t k) const {
  if (!has(k)) throw Error("input " + std::to_string(k) + " is missing");
  return *in[k];
}
const std::vector<Value>& Args::seq(std::size_t k) const {
  Value& v = need(k);
  if (!v.seq) throw Error("input " + std::to_string(k) + " must be a sequence");
  return *v.seq;
}
const StringTensor& Args::str(std::size_t k) const {
  Value& v = need(k);
  if (!v.s) throw Error("input " + std::to_string(k) + " must be a tensor of strings");
  return *v.s;
}
const Tensor& Args::t(std::size_t k) {
  Value& v = need(k);
  if (v.seq) throw Error("input " + std::to_string(k) + " is a sequence, not a tensor");
  if (v.s) throw Error("input " + std::to_string(k) + " is a tensor of strings; this operator takes numbers");
  if (!v.t) v.t = v.h->tensor();
  return *v.t;
}
const Host& Args::h(std::size_t k) {
  Value& v = need(k);
  if (v.seq) throw Error("input " + std::to_string(k) + " is a sequence, not a tensor");
  if (v.s) throw Error("input " + std::to_string(k) + " is a tensor of strings; this operator takes numbers");
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

std::int64_t broadcast_offset(const Dims& out, const Dims& in, std::int64_t flat) {
  std::size_t n = out.size();
  std::int64_t off = 0, stride = 1;
  for (std::size_t k = n; k-- > 0;) {
    std::int64_t c = flat % out[k];
    flat /= out[k];
    std::size_t ik = k + in.size();
    if (ik >= n) {
      std::int64_t d = in[ik - n];
      off += (d == 1 ? 0 : c) * stride;
      stride *= d;
    }
  }
  return off;
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
    add_control_ops(t);
    add_string_ops(t);
    return t;
  }();
  return t;
}

}  // namespace metagrad::onnx::detail
