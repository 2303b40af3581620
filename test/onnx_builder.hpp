#pragma once
// ONNX models built in code as ModelProtos (the tests of metagrad::onnx and of its AOT path).
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "metagrad/onnx.hpp"

namespace metagrad::test {

using i64 = std::int64_t;

struct Builder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;
  explicit Builder(i64 opset = 17) : g(m.mutable_graph()) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g->set_name("test");
  }
  static void typed(::onnx::ValueInfoProto* v, const std::string& name, int elem,
                    const std::vector<std::variant<i64, std::string>>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* s = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = s->add_dim();
      if (auto* i = std::get_if<i64>(&d))
        dim->set_dim_value(*i);
      else
        dim->set_dim_param(std::get<std::string>(d));
    }
  }
  Builder& input(const std::string& name, const std::vector<std::variant<i64, std::string>>& dims,
                 int elem = ::onnx::TensorProto::FLOAT) {
    typed(g->add_input(), name, elem, dims);
    return *this;
  }
  Builder& output(const std::string& name, int elem = ::onnx::TensorProto::FLOAT) {
    typed(g->add_output(), name, elem, {});
    g->mutable_output(g->output_size() - 1)->mutable_type()->mutable_tensor_type()->clear_shape();
    return *this;
  }
  ::onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                          const std::vector<std::string>& out, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  Builder& init_i64(const std::string& name, const std::vector<i64>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::INT64);
    t->add_dims(static_cast<i64>(v.size()));
    for (auto x : v) t->add_int64_data(x);
    return *this;
  }
  Builder& init_f32(const std::string& name, const std::vector<i64>& dims, const std::vector<double>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_float_data(static_cast<float>(x));
    return *this;
  }
  Builder& init_strings(const std::string& name, const std::vector<i64>& dims,
                        const std::vector<std::string>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::STRING);
    for (auto d : dims) t->add_dims(d);
    for (const auto& x : v) t->add_string_data(x);
    return *this;
  }
  std::string bytes() const { return m.SerializeAsString(); }
  metagrad::onnx::Model parse() const { return metagrad::onnx::parse(bytes(), "built.onnx"); }
};

inline void attr_i(::onnx::NodeProto* n, const std::string& name, i64 v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attr_s(::onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void attr_strings(::onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::STRINGS);
  for (const auto& x : v) a->add_strings(x);
}
inline void attr_f(::onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

}  // namespace metagrad::test
