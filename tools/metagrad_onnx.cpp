// metagrad-onnx: an ONNX model as a header of the static path (docs/onnx.md):
//
//   metagrad-onnx --emit=cpp model.onnx -o model.hpp [-n NAME] [--input NAME=1x3x224x224 ...]
//
// writes model.hpp (namespace NAME): the parameters as one Hana-reflected struct of fx::Tensors, a
// load() that fills them from model.safetensors (written beside the header: the initializers, batch
// norms folded into their convolutions), and forward(): the graph as fx:: expressions of fixed
// shapes, evaluated into a Stages struct allocated once (no allocation per run). The header needs
// metagrad's headers and Boost.Hana only, no protobuf. An operator the static path cannot express is
// an error naming the node and its op type.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_args.hpp"

namespace {

using i64 = std::int64_t;
using Shape = std::vector<i64>;

const char* const kUsage =
    "usage: metagrad-onnx --emit=cpp model.onnx -o model.hpp [-n NAME] [--input NAME=1x3x224x224 ...]\n";

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An ONNX name as a C++ identifier (tools/model_args.hpp); a safetensors header key is reserved too.
std::string identifier(const std::string& onnx, const std::string& role, std::set<std::string>& taken) {
  static const std::set<std::string> reserved{
      "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const",
      "constexpr", "continue", "decltype", "default", "delete", "do", "double", "else", "enum", "explicit",
      "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable",
      "namespace", "new", "noexcept", "not", "nullptr", "operator", "or", "private", "protected", "public",
      "register", "requires", "return", "short", "signed", "sizeof", "static", "struct", "switch", "template",
      "this", "throw", "true", "try", "typedef", "typename", "union", "unsigned", "using", "virtual", "void",
      "volatile", "while", "xor", "p", "s", "fx", "metagrad", "boost", "std", "Params", "Stages", "load",
      "load_into", "forward",
      // the keys of a safetensors entry, which load() searches for by name
      "dtype", "shape", "data_offsets"};
  return metagrad::tools::identifier(onnx, role, taken, reserved);
}

std::string list(const Shape& d, const char* sep = ", ") {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? sep : "") + std::to_string(d[i]);
  return s;
}
std::string shape_text(const Shape& d) { return "(" + list(d) + ")"; }
i64 numel(const Shape& d) {
  i64 n = 1;
  for (i64 v : d) n *= v;
  return n;
}
// A float as C++ text that reads back to the same float.
std::string literal(double v) {
  if (std::isinf(v))
    return v > 0 ? "std::numeric_limits<float>::infinity()" : "-std::numeric_limits<float>::infinity()";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", static_cast<float>(v));
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

// A constant: an initializer or a Constant node's value, as floats (and as integers when it is one).
struct Const {
  Shape shape;
  std::vector<double> v;
  bool integer = false;
};

Const read_tensor(const ::onnx::TensorProto& t, const std::filesystem::path& folder) {
  Const c;
  for (i64 d : t.dims()) c.shape.push_back(d);
  const i64 n = numel(c.shape);
  std::string raw = t.raw_data();
  if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
    std::string file;
    i64 offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") file = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    }
    std::ifstream f(folder / file, std::ios::binary);
    if (!f)
      throw Error("tensor '" + t.name() + "': cannot open its external data " + (folder / file).string());
    f.seekg(0, std::ios::end);
    if (length < 0) length = static_cast<i64>(f.tellg()) - offset;
    raw.resize(static_cast<std::size_t>(length));
    f.seekg(offset);
    if (!f.read(raw.data(), length)) throw Error("tensor '" + t.name() + "': its external data is short");
  }
  auto from_raw = [&](auto zero) {
    using T = decltype(zero);
    if (raw.size() != static_cast<std::size_t>(n) * sizeof(T))
      throw Error("tensor '" + t.name() + "': " + std::to_string(raw.size()) + " bytes for " +
                  std::to_string(n) + " elements");
    for (i64 i = 0; i < n; ++i) {
      T x;
      std::memcpy(&x, raw.data() + i * sizeof(T), sizeof(T));
      c.v.push_back(static_cast<double>(x));
    }
  };
  switch (t.data_type()) {
    case ::onnx::TensorProto::FLOAT:
      if (!raw.empty()) from_raw(float{});
      for (float x : t.float_data()) c.v.push_back(x);
      break;
    case ::onnx::TensorProto::DOUBLE:
      if (!raw.empty()) from_raw(double{});
      for (double x : t.double_data()) c.v.push_back(x);
      break;
    case ::onnx::TensorProto::INT64:
      c.integer = true;
      if (!raw.empty()) from_raw(i64{});
      for (i64 x : t.int64_data()) c.v.push_back(static_cast<double>(x));
      break;
    case ::onnx::TensorProto::INT32:
      c.integer = true;
      if (!raw.empty()) from_raw(std::int32_t{});
      for (std::int32_t x : t.int32_data()) c.v.push_back(x);
      break;
    default:
      throw Error("tensor '" + t.name() + "': element type " + std::to_string(t.data_type()) +
                  " (the static path emits float32 models)");
  }
  if (static_cast<i64>(c.v.size()) != n)
    throw Error("tensor '" + t.name() + "': " + std::to_string(c.v.size()) + " values for the shape " +
                shape_text(c.shape));
  return c;
}

// A value of the graph while it is emitted: C++ text of an fx:: operand and its shape.
struct Val {
  std::string code;  // empty for a constant not yet made a parameter
  Shape shape;
  std::optional<Const> k;  // its values, when known at emit time
  int nodes = 0;           // expression nodes since the last stage (0: a tensor)
  bool nonneg = false;     // every element >= 0 (a ReLU's): zero padding is then max-pool padding
};

struct Param {
  std::string name;
  Shape shape;
  std::vector<float> v;
};

// An expression is evaluated into a stage (a tensor of the Stages struct) when it is read twice or
// when it has grown to this many nodes: each distinct stage is one expression type the compiler sees.
constexpr int kStageNodes = 12;

class Emitter {
 public:
  Emitter(const ::onnx::ModelProto& m, std::filesystem::path folder,
          const std::map<std::string, Shape>& given)
      : m_(m), folder_(std::move(folder)) {
    opset_ = 1;
    for (const auto& o : m.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
    const auto& g = m.graph();
    for (const auto& t : g.initializer()) {
      Val v;
      v.k = read_tensor(t, folder_);
      v.shape = v.k->shape;
      vals_[t.name()] = v;
    }
    for (const auto& n : g.node())
      for (const auto& in : n.input())
        if (!in.empty()) ++uses_[in];
    for (const auto& o : g.output()) ++uses_[o.name()];
    for (const auto& in : g.input()) {
      if (vals_.count(in.name())) continue;  // an initializer listed as an input (old exporters)
      const auto& tt = in.type().tensor_type();
      if (tt.elem_type() != ::onnx::TensorProto::FLOAT)
        throw Error("input '" + in.name() + "': element type " + std::to_string(tt.elem_type()) +
                    " (the static path emits float32 models)");
      Shape d;
      auto it = given.find(in.name());
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto& dim = tt.shape().dim(i);
        if (it == given.end() && (!dim.has_dim_value() || dim.dim_value() <= 0))
          throw Error("input '" + in.name() + "': dimension " + std::to_string(i) +
                      " is not fixed; give every size with --input " + in.name() + "=AxBx...");
        d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
      }
      if (it != given.end()) {
        bool ok = d.size() == it->second.size();
        for (std::size_t i = 0; ok && i < d.size(); ++i) ok = d[i] == -1 || d[i] == it->second[i];
        if (!ok)
          throw Error("--input " + in.name() + ": " + shape_text(it->second) + " does not fit the declared " +
                      shape_text(d));
        d = it->second;
      }
      Val v;
      v.shape = d;
      v.code = identifier(in.name(), "input", names_);
      inputs_.push_back({in.name(), v.code, d});
      vals_[in.name()] = v;
    }
    for (const auto& [name, d] : given)
      if (std::none_of(inputs_.begin(), inputs_.end(), [&](const auto& i) { return i.onnx == name; }))
        throw Error("--input " + name + ": the model has no such input");
  }

  void run() {
    const auto& g = m_.graph();
    for (int i = 0; i < g.node_size(); ++i)
      if (!done_.count(i)) node(i, g.node(i));
    for (const auto& o : g.output()) {
      Val& v = at(o.name());
      if (v.code.empty()) throw Error("output '" + o.name() + "' is a constant: nothing to compute");
      outputs_.push_back({o.name(), identifier(o.name(), "output", names_), v.shape});
      body_ << "  " << outputs_.back().cpp << " = " << v.code << ";\n";
    }
  }

  void write(const std::string& header, const std::string& ns, const std::string& model_path) {
    std::filesystem::path h(header);
    std::string weights = h.stem().string() + ".safetensors";
    write_safetensors((h.parent_path() / weights).string());
    std::ofstream o(header);
    if (!o) throw Error("cannot write " + header);
    o << "#pragma once\n// " << ns << ": " << comment(model_path)
      << " as a static-path model, written by metagrad-onnx --emit=cpp (docs/onnx.md).\n"
      << "//   " << ns << "::Params p;  " << ns << "::load(p, \"" << weights << "\");\n"
      << "//   " << ns << "::Stages s;  // intermediate values, allocated once\n"
      << "//   " << ns << "::forward(p, s, inputs..., outputs...);  // allocates nothing\n"
      << "// Needs metagrad's headers (include/ and detail/) and Boost.Hana; no library, no protobuf.\n"
      << "#include <cstdint>\n#include <cstdlib>\n#include <fstream>\n#include <limits>\n"
      << "#include <stdexcept>\n#include <string>\n#include <type_traits>\n\n"
      << "#include <boost/hana/accessors.hpp>\n#include <boost/hana/concept/struct.hpp>\n"
      << "#include <boost/hana/define_struct.hpp>\n"
      << "#include <boost/hana/for_each.hpp>\n#include <boost/hana/string.hpp>\n\n"
      << "#include \"metagrad/fixed.hpp\"\n\nnamespace " << ns << " {\n\nnamespace fx = metagrad::fixed;\n\n";
    for (std::size_t k = 0; k < inputs_.size(); ++k)
      o << "using Input" << k << " = fx::Tensor<float, " << list(inputs_[k].shape) << ">;  // '"
        << comment(inputs_[k].onnx) << "'\n";
    for (std::size_t k = 0; k < outputs_.size(); ++k)
      o << "using Output" << k << " = fx::Tensor<float, " << list(outputs_[k].shape) << ">;  // '"
        << comment(outputs_[k].onnx) << "'\n";
    // Hana reflects a struct of at most kGroup members: more parameters go to nested structs of that many.
    const std::size_t groups = params_.size() > kGroup ? (params_.size() + kGroup - 1) / kGroup : 0;
    if (groups > kGroup) throw Error("more than " + std::to_string(kGroup * kGroup) + " parameters");
    auto members = [&](const std::string& type, std::size_t from, std::size_t to) {
      o << "struct " << type << " {\n  BOOST_HANA_DEFINE_STRUCT(" << type;
      for (std::size_t k = from; k < to; ++k)
        o << ",\n    (fx::Tensor<float, " << list(params_[k].shape) << ">, " << params_[k].name << ")";
      o << ");\n};\n";
    };
    o << "\n// The initializers (batch norms folded into the convolutions before them)";
    if (!groups) {
      o << ".\n";
      members("Params", 0, params_.size());
    } else {
      o << ", in groups of " << kGroup << ".\n";
      for (std::size_t g = 0; g < groups; ++g)
        members("Params" + std::to_string(g), g * kGroup, std::min(params_.size(), (g + 1) * kGroup));
      o << "struct Params {\n  BOOST_HANA_DEFINE_STRUCT(Params";
      for (std::size_t g = 0; g < groups; ++g) o << ",\n    (Params" << g << ", part" << g << ")";
      o << ");\n};\n";
    }
    o << "\n// The values forward() evaluates between its expressions.\nstruct Stages {\n";
    for (const auto& s : stages_) o << "  fx::Tensor<float, " << list(s.second) << "> " << s.first << ";\n";
    o << "};\n\n" << kLoader;
    o << "\ninline void forward(const Params& p, Stages& s";
    for (std::size_t k = 0; k < inputs_.size(); ++k) o << ", const Input" << k << "& " << inputs_[k].cpp;
    for (std::size_t k = 0; k < outputs_.size(); ++k) o << ", Output" << k << "& " << outputs_[k].cpp;
    o << ") {\n  (void)p;\n  (void)s;\n" << resolve(body_.str()) << "}\n";
    if (outputs_.size() == 1) o << "\n" << cut_forward();
    o << "\n}  // namespace " << ns << "\n";
  }

  // forward() as one expression, its stages fx::cut: what fx::grad differentiates into Params' tensors.
  // A template, so that a program that does not call it compiles none of its backward walks.
  std::string cut_forward() const {
    std::ostringstream o;
    o << "// forward()'s output as an expression whose stages are fx::cut (needs a live fx::Tape): what\n"
      << "// fx::grad differentiates, back into the tensors of Params.\n"
      << "template <class P = Params>\nauto forward_expr(const P& p";
    for (std::size_t k = 0; k < inputs_.size(); ++k) o << ", const Input" << k << "& " << inputs_[k].cpp;
    o << ") {\n  (void)p;\n";
    static const std::regex stage_ref(R"(\bs\.(s[0-9]+)\b)"), member_template(R"(\.([a-z_0-9]+)<)");
    // p's type is a template parameter, so the expressions are dependent: member templates need `template`
    auto cut_code = [&](const std::string& code) {
      return std::regex_replace(std::regex_replace(code, stage_ref, "$1"), member_template, ".template $1<");
    };
    std::istringstream lines(resolve(body_.str()));
    for (std::string line; std::getline(lines, line);) {
      const std::string head = "  " + outputs_[0].cpp + " = ";
      if (line.rfind(head, 0) == 0) {
        o << "  return " << cut_code(line.substr(head.size())) << "\n";
        continue;
      }
      std::size_t eq = line.find(" = ");
      std::string name = line.substr(4, eq - 4), rhs = line.substr(eq + 3);  // "  s.sN = EXPR;"
      rhs.pop_back();
      o << "  auto " << name << " = fx::cut(" << cut_code(rhs) << ");\n";
    }
    o << "}\n";
    return o.str();
  }

 private:
  struct Io {
    std::string onnx, cpp;
    Shape shape;
  };

  static constexpr std::size_t kGroup = 48;
  // A parameter's name in Params (and in the safetensors file): its group's, then its own.
  std::string path(std::size_t k) const {
    return (params_.size() > kGroup ? "part" + std::to_string(k / kGroup) + "." : "") + params_[k].name;
  }
  // The body with the parameters' placeholders ("p.\x01index\x02") as their members.
  std::string resolve(std::string body) const {
    for (std::size_t at; (at = body.find('\x01')) != std::string::npos;) {
      std::size_t end = body.find('\x02', at);
      body.replace(at, end + 1 - at, path(std::stoul(body.substr(at + 1, end - at - 1))));
    }
    return body;
  }

  // The loader every header carries: a safetensors file's float32 tensors, by the members' names.
  static constexpr const char* kLoader =
      R"(// The parameters from a safetensors file (the one metagrad-onnx wrote; fx::load reads it too), by
// name: every member's name, dtype F32 and size are checked, and an error names the file and tensor.
template <class S>
void load_into(S& p, const std::string& prefix, std::istream& f, const std::string& head, const std::string& path) {
  boost::hana::for_each(boost::hana::accessors<S>(), [&](auto member) {
    const std::string name = prefix + boost::hana::to<const char*>(boost::hana::first(member));
    auto& t = boost::hana::second(member)(p);
    if constexpr (boost::hana::Struct<std::remove_cvref_t<decltype(t)>>::value) {  // a group of parameters
      load_into(t, name + ".", f, head, path);
    } else {
      const std::string where = "load: " + path + ": tensor '" + name + "'";
      std::size_t at = head.find("\"" + name + "\":");
      if (at == std::string::npos) throw std::runtime_error(where + " is missing");
      std::size_t end = head.find('}', at), d = head.find("\"data_offsets\":[", at);
      if (head.find("\"dtype\":\"F32\"", at) > end || d > end) throw std::runtime_error(where + " is not F32");
      char* rest = nullptr;
      std::uint64_t b = std::strtoull(head.c_str() + d + 16, &rest, 10), e = std::strtoull(rest + 1, nullptr, 10);
      if (e - b != sizeof(float) * t.size) throw std::runtime_error(where + " has another size");
      f.seekg(static_cast<std::streamoff>(8 + head.size() + b));
      if (!f.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(e - b)))
        throw std::runtime_error(where + ": the file is short");
    }
  });
}
inline void load(Params& p, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char len[8] = {};
  if (!f.read(reinterpret_cast<char*>(len), 8)) throw std::runtime_error("load: cannot read " + path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];  // little-endian
  std::string head(n, '\0');
  if (n > (1u << 30) || !f.read(head.data(), static_cast<std::streamsize>(n)))
    throw std::runtime_error("load: " + path + " is not a safetensors file");
  load_into(p, "", f, head, path);
}
)";

  static std::string comment(std::string t) {
    for (char& c : t)
      if (c == '\n' || c == '\r') c = ' ';
    return t;
  }

  Val& at(const std::string& name) {
    auto it = vals_.find(name);
    if (it == vals_.end()) throw Error("value '" + name + "' is used before it is computed");
    return it->second;
  }
  [[noreturn]] void fail(const ::onnx::NodeProto& n, const std::string& why) const {
    int index = -1;
    for (int i = 0; i < m_.graph().node_size(); ++i)
      if (&m_.graph().node(i) == &n) index = i;
    throw Error("node " + std::to_string(index) + " '" + n.name() + "' (" + n.op_type() + "): " + why);
  }
  const ::onnx::AttributeProto* attr(const ::onnx::NodeProto& n, const std::string& name) const {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  i64 attr_i(const ::onnx::NodeProto& n, const std::string& name, i64 def) const {
    auto* a = attr(n, name);
    return a ? a->i() : def;
  }
  double attr_f(const ::onnx::NodeProto& n, const std::string& name, double def) const {
    auto* a = attr(n, name);
    return a ? a->f() : def;
  }
  std::optional<Shape> attr_ints(const ::onnx::NodeProto& n, const std::string& name) const {
    auto* a = attr(n, name);
    if (!a) return std::nullopt;
    return Shape(a->ints().begin(), a->ints().end());
  }
  std::string attr_s(const ::onnx::NodeProto& n, const std::string& name, const std::string& def) const {
    auto* a = attr(n, name);
    return a ? a->s() : def;
  }
  // Input i of n: a value that must exist.
  Val& in(const ::onnx::NodeProto& n, int i) {
    if (i >= n.input_size() || n.input(i).empty()) fail(n, "input " + std::to_string(i) + " is missing");
    return at(n.input(i));
  }
  bool has_in(const ::onnx::NodeProto& n, int i) const { return i < n.input_size() && !n.input(i).empty(); }
  const Const& constant(const ::onnx::NodeProto& n, int i, const char* what) {
    Val& v = in(n, i);
    if (!v.k) fail(n, std::string(what) + " must be a constant (an initializer or a Constant node)");
    return *v.k;
  }
  // Integers of a constant input or an attribute (axes, shapes, pads).
  std::optional<Shape> ints(const ::onnx::NodeProto& n, int input, const std::string& attribute) {
    if (has_in(n, input)) {
      const Const& c = constant(n, input, attribute.c_str());
      return Shape(c.v.begin(), c.v.end());
    }
    return attr_ints(n, attribute);
  }
  i64 axis(const ::onnx::NodeProto& n, i64 a, std::size_t rank) const {
    if (a < -static_cast<i64>(rank) || a >= static_cast<i64>(rank))
      fail(n, "axis " + std::to_string(a) + " is outside rank " + std::to_string(rank));
    return a < 0 ? a + static_cast<i64>(rank) : a;
  }

  // A constant as a parameter: one member of Params, holding `values` (by default the constant's own).
  std::string param(const std::string& onnx, const Shape& shape, std::vector<float> values) {
    Param p{identifier(onnx, "param", names_), shape, std::move(values)};
    params_.push_back(std::move(p));
    return "p.\x01" + std::to_string(params_.size() - 1) + "\x02";  // resolve() names it
  }
  // The operand text of v: its expression, or a constant as a parameter (or a literal when scalar).
  std::string operand(const std::string& name, Val& v, bool scalar_ok = false) {
    if (!v.code.empty()) return v.code;
    if (scalar_ok && v.k->v.size() == 1) return literal(v.k->v[0]);
    v.code = param(name, v.shape, std::vector<float>(v.k->v.begin(), v.k->v.end()));
    return v.code;
  }
  // v as a tensor (a stage) when it is an expression.
  void stage(Val& v) {
    if (v.code.empty()) throw Error("a constant where a computed value is needed (fold it before emitting)");
    if (v.nodes == 0) return;
    std::string name = "s" + std::to_string(stages_.size());
    stages_.emplace_back(name, v.shape);
    body_ << "  s." << name << " = " << v.code << ";\n";
    v.code = "s." + name;
    v.nodes = 0;
  }
  void set(const ::onnx::NodeProto& n, Val v, int added = 1) { set_output(n.output(0), std::move(v), added); }
  void set_output(const std::string& name, Val v, int added) {
    if (v.k && v.code.empty()) {
      vals_[name] = std::move(v);
      return;
    }
    v.nodes += added;
    if (v.nodes >= kStageNodes || uses_[name] > 1) stage(v);
    vals_[name] = std::move(v);
  }
  Val expr(std::string code, Shape shape, int nodes, bool nonneg = false) {
    Val v;
    v.code = std::move(code);
    v.shape = std::move(shape);
    v.nodes = nodes;
    v.nonneg = nonneg;
    return v;
  }
  static std::string reshape(const std::string& code, const Shape& to) {
    return "(" + code + ").reshape<" + list(to) + ">()";
  }

  // numpy broadcasting of two shapes, or an error naming the node.
  Shape broadcast(const ::onnx::NodeProto& n, const Shape& a, const Shape& b) const {
    std::size_t r = std::max(a.size(), b.size());
    Shape out(r);
    for (std::size_t i = 0; i < r; ++i) {
      i64 x = i + a.size() >= r ? a[i + a.size() - r] : 1, y = i + b.size() >= r ? b[i + b.size() - r] : 1;
      if (x != y && x != 1 && y != 1)
        fail(n, "shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
      out[i] = x == 1 ? y : x;
    }
    return out;
  }

  void node(int index, const ::onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (!n.domain().empty() && n.domain() != "ai.onnx") fail(n, "domain '" + n.domain() + "' is not ONNX's");
    static const std::map<std::string, std::string> unary{
        {"Relu", "relu()"},         {"Sigmoid", "sigmoid()"},
        {"Tanh", "tanh()"},         {"Exp", "exp()"},
        {"Log", "log()"},           {"Sqrt", "sqrt()"},
        {"Neg", "neg()"},           {"Abs", "abs()"},
        {"Erf", "erf()"},           {"Reciprocal", "reciprocal()"},
        {"Softplus", "softplus()"}, {"HardSwish", "hardswish()"},
        {"Sin", "sin()"},           {"Cos", "cos()"},
        {"Floor", "floor()"},       {"Ceil", "ceil()"},
        {"Softsign", "softsign()"}, {"Mish", "mish()"}};
    static const std::map<std::string, std::string> binary{
        {"Add", "+"},       {"Sub", "-"},           {"Mul", "*"},          {"Div", "/"},
        {"Pow", "fx::pow"}, {"Max", "fx::maximum"}, {"Min", "fx::minimum"}};
    if (n.output_size() < 1) fail(n, "no output");
    if (op == "Constant") {
      auto* a = attr(n, "value");
      if (!a || !a->has_t()) fail(n, "only a tensor 'value' is supported");
      Val v;
      v.k = read_tensor(a->t(), folder_);
      v.shape = v.k->shape;
      vals_[n.output(0)] = v;
    } else if (op == "Identity" || op == "Dropout") {
      vals_[n.output(0)] = in(n, 0);
    } else if (auto u = unary.find(op); u != unary.end()) {
      Val& x = in(n, 0);
      set(n, expr("(" + operand(n.input(0), x) + ")." + u->second, x.shape, x.nodes,
                  op == "Relu" || op == "Abs"));
    } else if (op == "LeakyRelu" || op == "Elu" || op == "Celu") {
      Val& x = in(n, 0);
      std::string f = op == "LeakyRelu" ? "leakyrelu" : op == "Elu" ? "elu" : "celu";
      double a = attr_f(n, "alpha", op == "LeakyRelu" ? 0.01 : 1.0);
      set(n, expr("(" + operand(n.input(0), x) + ")." + f + "(" + literal(a) + ")", x.shape, x.nodes));
    } else if (op == "HardSigmoid") {
      Val& x = in(n, 0);
      std::string c = "(" + operand(n.input(0), x) + " * " + literal(attr_f(n, "alpha", 0.2)) + " + " +
                      literal(attr_f(n, "beta", 0.5)) + ").clip(0, 1)";
      set(n, expr(c, x.shape, x.nodes + 2, true), 1);
    } else if (op == "Clip") {
      Val& x = in(n, 0);
      double lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
      if (opset_ < 11) {
        lo = attr_f(n, "min", lo);
        hi = attr_f(n, "max", hi);
      } else {
        if (has_in(n, 1)) lo = constant(n, 1, "min").v.at(0);
        if (has_in(n, 2)) hi = constant(n, 2, "max").v.at(0);
      }
      std::string c = operand(n.input(0), x);
      if (!std::isinf(lo)) c = "fx::maximum(" + c + ", " + literal(lo) + ")";
      if (!std::isinf(hi)) c = "fx::minimum(" + c + ", " + literal(hi) + ")";
      set(n, expr(c, x.shape, x.nodes + 1, lo >= 0));
    } else if (auto b = binary.find(op); b != binary.end()) {
      Val &x = in(n, 0), &y = in(n, 1);
      if (x.k && y.k) fail(n, "both operands are constants (fold them before emitting)");
      Shape s = broadcast(n, x.shape, y.shape);
      if (x.k && numel(x.shape) == 1 && s != y.shape) fail(n, "a scalar operand that changes the shape");
      if (y.k && numel(y.shape) == 1 && s != x.shape) fail(n, "a scalar operand that changes the shape");
      std::string a = operand(n.input(0), x, true), c = operand(n.input(1), y, true);
      std::string code = b->second.size() == 1 ? "(" + a + " " + b->second + " " + c + ")"
                                               : b->second + "(" + a + ", " + c + ")";
      bool nonneg = (op == "Add" || op == "Mul") && x.nonneg && y.nonneg;
      set(n, expr(code, s, x.nodes + y.nodes + 1, nonneg), 0);
    } else if (op == "Conv") {
      conv(index, n);
    } else if (op == "BatchNormalization") {
      Val& x = in(n, 0);
      auto [scale, shift] = batchnorm(n);
      Shape cs(x.shape.size() - 1, 1);
      cs[0] = x.shape.at(1);
      std::string c = "(" + operand(n.input(0), x) + " * " + param(n.input(1), cs, scale) + " + " +
                      param(n.input(2), cs, shift) + ")";
      set(n, expr(c, x.shape, x.nodes + 2));
    } else if (op == "Gemm") {
      gemm(n);
    } else if (op == "MatMul") {
      Val &a = in(n, 0), &b = in(n, 1);
      if (a.shape.size() < 2 || b.shape.size() < 2)
        fail(n, "a 1-D operand (the static matmul needs rank >= 2)");
      bool ok = a.shape.back() == b.shape[b.shape.size() - 2] &&
                (b.shape.size() == 2 ||
                 std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin(), b.shape.end() - 2));
      if (!ok)
        fail(n, shape_text(a.shape) + " @ " + shape_text(b.shape) +
                    ": the static matmul needs (..., m, k) @ (k, n) or equal batch axes");
      Shape s = a.shape;
      s.back() = b.shape.back();
      std::string c = "fx::matmul(" + operand(n.input(0), a) + ", " + operand(n.input(1), b) + ")";
      set(n, expr(c, s, a.nodes + b.nodes));
    } else if (op == "MaxPool" || op == "AveragePool") {
      pool(n);
    } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
      Val& x = in(n, 0);
      if (x.shape.size() != 4) fail(n, "the static path pools (N, C, H, W) only, not " + shape_text(x.shape));
      Shape s = {x.shape[0], x.shape[1], 1, 1};
      std::string c = "(" + operand(n.input(0), x) + ")." + (op == "GlobalAveragePool" ? "mean" : "max") +
                      "<2, 3>(fx::keepdim)";
      set(n, expr(c, s, x.nodes, x.nonneg));
    } else if (op == "Flatten") {
      Val& x = in(n, 0);
      i64 a = axis(n, attr_i(n, "axis", 1), x.shape.size() + 1);
      Shape s = {numel(Shape(x.shape.begin(), x.shape.begin() + a)),
                 numel(Shape(x.shape.begin() + a, x.shape.end()))};
      move(n, x, s);
    } else if (op == "Reshape") {
      Val& x = in(n, 0);
      Shape s = *ints(n, 1, "shape");
      i64 known = 1, infer = -1;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == 0 && !attr_i(n, "allowzero", 0)) s[i] = x.shape.at(i);
        if (s[i] == -1)
          infer = static_cast<i64>(i);
        else
          known *= s[i];
      }
      if (infer >= 0) s[infer] = known ? numel(x.shape) / known : 0;
      if (numel(s) != numel(x.shape)) fail(n, shape_text(x.shape) + " cannot become " + shape_text(s));
      move(n, x, s);
    } else if (op == "Squeeze" || op == "Unsqueeze") {
      Val& x = in(n, 0);
      std::optional<Shape> axes = opset_ >= 13 ? ints(n, 1, "axes") : attr_ints(n, "axes");
      Shape s;
      if (op == "Squeeze") {
        std::set<i64> drop;
        for (i64 a : axes.value_or(Shape{})) drop.insert(axis(n, a, x.shape.size()));
        for (std::size_t i = 0; i < x.shape.size(); ++i)
          if (!(axes ? drop.count(static_cast<i64>(i)) : x.shape[i] == 1)) s.push_back(x.shape[i]);
      } else {
        if (!axes) fail(n, "no axes");
        std::size_t r = x.shape.size() + axes->size();
        std::set<i64> add;
        for (i64 a : *axes) add.insert(axis(n, a, r));
        for (std::size_t i = 0, j = 0; i < r; ++i)
          s.push_back(add.count(static_cast<i64>(i)) ? 1 : x.shape[j++]);
      }
      move(n, x, s);
    } else if (op == "Transpose") {
      Val& x = in(n, 0);
      Shape perm = attr_ints(n, "perm").value_or(Shape{});
      if (perm.empty())
        for (std::size_t i = x.shape.size(); i-- > 0;) perm.push_back(static_cast<i64>(i));
      Shape s;
      for (i64 a : perm) s.push_back(x.shape.at(axis(n, a, x.shape.size())));
      if (x.k && x.code.empty()) {  // folded: the constant's values permuted
        Val v = x;
        v.shape = v.k->shape = s;
        Shape from(x.shape.size()), to(s.size());  // row-major strides
        for (i64 i = static_cast<i64>(s.size()), f = 1, t = 1; i-- > 0;) {
          from[i] = f, f *= x.shape[i];
          to[i] = t, t *= s[i];
        }
        for (i64 flat = 0; flat < numel(s); ++flat) {
          i64 src = 0;
          for (std::size_t d = 0; d < s.size(); ++d) src += (flat / to[d] % s[d]) * from[perm[d]];
          v.k->v[flat] = x.k->v[src];
        }
        vals_[n.output(0)] = v;
        return;
      }
      set(n, expr("(" + operand(n.input(0), x) + ").permute<" + list(perm) + ">()", s, x.nodes));
    } else if (op == "Softmax" || op == "LogSoftmax") {
      softmax(n);
    } else if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
      reduce(n);
    } else if (op == "Concat") {
      concat(n);
    } else if (op == "Selu") {
      Val& x = in(n, 0);
      set(n, expr("(" + operand(n.input(0), x) + ").elu(" +
                      literal(attr_f(n, "alpha", 1.67326319217681884765625)) + ") * " +
                      literal(attr_f(n, "gamma", 1.05070102214813232421875)),
                  x.shape, x.nodes + 1));
    } else if (op == "Sign") {
      Val& x = in(n, 0);
      set(n, expr("(" + operand(n.input(0), x) + ").sign()", x.shape, x.nodes + 3));
    } else if (op == "PRelu") {  // x where x >= 0, else slope * x
      Val& xs = in(n, 0);
      stage(xs);
      Val a = in(n, 1);
      if (a.k && a.code.empty() && a.shape.size() == 1 && xs.shape.size() > 2 && a.shape[0] == xs.shape[1] &&
          a.shape[0] != xs.shape.back()) {  // per channel, as old exporters wrote it
        a.shape = Shape(xs.shape.size() - 1, 1);
        a.shape[0] = xs.shape[1];
        a.k->shape = a.shape;
      }
      Shape sh = broadcast(n, xs.shape, a.shape);
      if (sh != xs.shape)
        fail(n, "a slope " + shape_text(a.shape) + " that changes the shape " + shape_text(xs.shape));
      std::string x = xs.code;
      set(n, expr("fx::where(" + x + " < 0.0f, " + x + " * " + operand(n.input(1), a, true) + ", " + x + ")",
                  sh, a.nodes + 3));
    } else if (op == "Sum") {
      std::string code;
      Shape sh = in(n, 0).shape;
      int nodes = 0;
      for (int i = 0; i < n.input_size(); ++i) {
        Val& v = in(n, i);
        sh = broadcast(n, sh, v.shape);
        code += (i ? " + " : "") + operand(n.input(i), v, n.input_size() > 1);
        nodes += v.nodes + 1;
      }
      set(n, expr("(" + code + ")", sh, nodes));
    } else if (op == "Pad") {
      pad(n);
    } else if (op == "Slice") {
      slice(n);
    } else if (op == "Split") {
      split(n);
    } else {
      fail(n, "the static path (metagrad-onnx --emit=cpp) has no such operator");
    }
  }

  void move(const ::onnx::NodeProto& n, Val& x, const Shape& s) {
    if (x.k && x.code.empty()) {  // a constant stays one
      Val v = x;
      v.shape = v.k->shape = s;
      vals_[n.output(0)] = v;
      return;
    }
    Val v = expr(s == x.shape ? x.code : reshape(operand(n.input(0), x), s), s, x.nodes, x.nonneg);
    set(n, v, s == x.shape ? 0 : 1);
  }

  // BatchNormalization's (scale, shift): y = x * scale + shift per channel.
  std::pair<std::vector<float>, std::vector<float>> batchnorm(const ::onnx::NodeProto& n) {
    const Const &g = constant(n, 1, "scale"), &b = constant(n, 2, "B"), &m = constant(n, 3, "mean"),
                &v = constant(n, 4, "var");
    if (attr_i(n, "training_mode", 0)) fail(n, "training_mode (the static path emits inference)");
    double eps = attr_f(n, "epsilon", 1e-5);
    std::vector<float> scale, shift;
    for (std::size_t c = 0; c < g.v.size(); ++c) {
      double s = g.v[c] / std::sqrt(v.v.at(c) + eps);
      scale.push_back(static_cast<float>(s));
      shift.push_back(static_cast<float>(b.v.at(c) - m.v.at(c) * s));
    }
    return {scale, shift};
  }

  // The node after `index` that reads n's output, when it is the only reader and a BatchNormalization.
  std::optional<int> folded_batchnorm(int index, const ::onnx::NodeProto& n) {
    if (uses_[n.output(0)] != 1) return std::nullopt;
    const auto& g = m_.graph();
    for (int j = index + 1; j < g.node_size(); ++j) {
      const auto& b = g.node(j);
      if (std::find(b.input().begin(), b.input().end(), n.output(0)) == b.input().end()) continue;
      bool constants = b.input_size() >= 5;
      for (int i = 1; constants && i < 5; ++i) constants = vals_.count(b.input(i)) && vals_[b.input(i)].k;
      if (b.op_type() == "BatchNormalization" && b.input(0) == n.output(0) && constants &&
          !attr_i(b, "training_mode", 0))
        return j;
      return std::nullopt;
    }
    return std::nullopt;
  }

  // Tap (i, j) of windows strides (sh, sw) apart over `padded` (N, C, H, W), as (N, C, oh, ow): a
  // shifted view, subsampled by a reshape (`padded` must reach i + sh * oh and j + sw * ow).
  static std::string tap(const std::string& padded, i64 nb, i64 c, i64 oh, i64 ow, i64 sh, i64 sw, i64 i,
                         i64 j) {
    std::string t = padded + ".shrink<" + list({0, nb, 0, c, i, i + sh * oh, j, j + sw * ow}) + ">()";
    if (sh > 1 || sw > 1)
      t += ".reshape<" + list({nb, c, oh, sh, ow, sw}) + ">().shrink<" +
           list({0, nb, 0, c, 0, oh, 0, 1, 0, ow, 0, 1}) + ">().reshape<" + list({nb, c, oh, ow}) + ">()";
    return t;
  }

  void conv(int index, const ::onnx::NodeProto& n) {
    Val x = in(n, 0);
    Const w = constant(n, 1, "the weight");
    // a 1-D convolution is a 2-D one over images of height 1
    const bool one_d = x.shape.size() == 3 && w.shape.size() == 3;
    // an attribute of a 1-D convolution with h for the height axis (-1: the width's value, as a stride)
    auto widen = [&](const char* name, Shape def, i64 h) {
      auto a = attr_ints(n, name);
      if (!a || !one_d) return a.value_or(def);
      if (a->size() == 2) return Shape{h, (*a)[0], h, (*a)[1]};  // pads: (begin, end)
      return Shape{h < 0 ? a->at(0) : h, a->at(0)};
    };
    if (one_d) {
      x.shape.insert(x.shape.begin() + 2, 1);
      w.shape.insert(w.shape.begin() + 2, 1);
    }
    auto as_2d = [&](const std::string& code) { return one_d ? reshape(code, x.shape) : code; };
    if (x.shape.size() != 4 || w.shape.size() != 4)
      fail(n, "the static path convolves (N, C, L) and (N, C, H, W) only, not " + shape_text(in(n, 0).shape));
    const i64 cout = w.shape[0], cin_g = w.shape[1], kh = w.shape[2], kw = w.shape[3], c = x.shape[1];
    const i64 group = attr_i(n, "group", 1);
    if (cin_g * group != c || cout % group)
      fail(n, "the weight " + shape_text(w.shape) + " does not fit " + shape_text(x.shape) + " in " +
                  std::to_string(group) + " groups");
    Shape st = widen("strides", {1, 1}, -1), dil = widen("dilations", {1, 1}, 1),
          pads = widen("pads", {0, 0, 0, 0}, 0);
    if (dil != Shape{1, 1}) fail(n, "dilations " + shape_text(dil) + " (the static conv2d has none)");
    if (st.size() != 2 || st[0] != st[1])
      fail(n, "strides " + shape_text(st) + " (the static conv2d has one stride for both axes)");
    const i64 s = st[0];
    std::string ap = attr_s(n, "auto_pad", "NOTSET");
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      for (int a = 0; a < 2; ++a) {
        i64 in = x.shape[2 + a], k = w.shape[2 + a], o = (in + s - 1) / s,
            total = std::max<i64>(0, (o - 1) * s + k - in);
        pads[a] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
        pads[a + 2] = total - pads[a];
      }
    } else if (ap == "VALID") {
      pads = {0, 0, 0, 0};
    }
    // The weights, folded with the batch norm that alone reads the output.
    std::vector<float> wv(w.v.begin(), w.v.end()), bv(cout, 0.0f);
    bool bias = has_in(n, 2);
    if (bias) {
      const Const& b = constant(n, 2, "the bias");
      std::copy(b.v.begin(), b.v.end(), bv.begin());
    }
    const ::onnx::NodeProto* out = &n;
    if (auto j = folded_batchnorm(index, n)) {
      out = &m_.graph().node(*j);
      done_.insert(*j);
      auto [scale, shift] = batchnorm(*out);
      const i64 per = numel(w.shape) / cout;
      for (i64 o = 0; o < cout; ++o) {
        for (i64 i = 0; i < per; ++i) wv[o * per + i] *= scale[o];
        bv[o] = bv[o] * scale[o] + shift[o];
      }
      bias = true;
    }
    const i64 oh = (x.shape[2] + pads[0] + pads[2] - kh) / s + 1,
              ow = (x.shape[3] + pads[1] + pads[3] - kw) / s + 1;
    if (oh <= 0 || ow <= 0)
      fail(n, "the kernel " + shape_text(w.shape) + " does not fit " + shape_text(x.shape));
    Shape shape = {x.shape[0], cout, oh, ow};
    std::string xc = as_2d(operand(n.input(0), vals_[n.input(0)])), wp = param(n.input(1), w.shape, wv);
    std::string bp = bias ? param(has_in(n, 2) ? n.input(2) : n.input(1) + "_bias", {cout}, bv) : "";
    bool square = pads[0] == pads[2] && pads[1] == pads[3] && pads[0] == pads[1];
    std::string code;
    int nodes = x.nodes + 2;
    if (group == 1) {
      i64 p = square ? pads[0] : 0;
      if (!square) xc = "(" + xc + ").pad<0, 0, 0, 0, " + list({pads[0], pads[2], pads[1], pads[3]}) + ">()";
      code = "fx::conv2d<" + std::to_string(s) + ", " + std::to_string(p) + ">(" + xc + ", " + wp +
             (bias ? ", " + bp : "") + ")";
    } else if (group == c && cout == c) {
      // depthwise: a sum of the kernel's taps, each a shifted (and strided) view of the padded image
      // times one weight per channel (a TensorMap over the weight's tap column)
      Val& xs = vals_[n.input(0)];
      stage(xs);
      xc = as_2d(xs.code);
      // the padded image as a tensor: its taps are then views of it, read in place
      Val pv = expr(
          "(" + xc + ").pad<0, 0, 0, 0, " + list({pads[0], pads[2] + s - 1, pads[1], pads[3] + s - 1}) +
              ">()",
          {x.shape[0], c, x.shape[2] + pads[0] + pads[2] + s - 1, x.shape[3] + pads[1] + pads[3] + s - 1}, 1);
      stage(pv);
      const std::string& padded = pv.code;
      // the weight stored tap-major: (KH * KW, C), so that each tap's C weights are contiguous
      std::vector<float> tw(wv.size());
      for (i64 o = 0; o < c; ++o)
        for (i64 t = 0; t < kh * kw; ++t) tw[t * c + o] = wv[o * kh * kw + t];
      params_[params_.size() - (bias ? 2 : 1)].shape = {kh * kw, c};
      params_[params_.size() - (bias ? 2 : 1)].v = tw;
      const i64 nb = x.shape[0];
      for (i64 i = 0; i < kh; ++i)
        for (i64 j = 0; j < kw; ++j) {
          std::string wt = "fx::TensorMap<const float, " + std::to_string(c) + ", 1, 1>(" + wp +
                           ".data() + " + std::to_string((i * kw + j) * c) + ")";
          code += (code.empty() ? "" : " + ") + tap(padded, nb, c, oh, ow, s, s, i, j) + " * " + wt;
        }
      if (bias)
        code = "(" + code + " + " + bp + ".reshape<" + std::to_string(c) + ", 1, 1>())";
      else
        code = "(" + code + ")";
      nodes = kStageNodes;  // a stage of its own
    } else {
      // grouped: one conv2d per group on its channels, each padded to the output's channels, summed
      Val& xs = vals_[n.input(0)];
      stage(xs);
      xc = as_2d(xs.code);
      const i64 cg = c / group, og = cout / group, per = cin_g * kh * kw;
      i64 p = square ? pads[0] : 0;
      if (!square) xc = "(" + xc + ").pad<0, 0, 0, 0, " + list({pads[0], pads[2], pads[1], pads[3]}) + ">()";
      Shape xs_shape = {x.shape[0], c, x.shape[2] + (square ? 0 : pads[0] + pads[2]),
                        x.shape[3] + (square ? 0 : pads[1] + pads[3])};
      for (i64 gi = 0; gi < group; ++gi) {
        std::string part = "(" + xc + ").shrink<0, " + std::to_string(x.shape[0]) + ", " +
                           std::to_string(gi * cg) + ", " + std::to_string((gi + 1) * cg) + ", 0, " +
                           std::to_string(xs_shape[2]) + ", 0, " + std::to_string(xs_shape[3]) + ">()";
        std::string wt = "fx::TensorMap<const float, " + list({og, cin_g, kh, kw}) + ">(" + wp +
                         ".data() + " + std::to_string(gi * og * per) + ")";
        code += (code.empty() ? "" : " + ") + std::string("fx::conv2d<") + std::to_string(s) + ", " +
                std::to_string(p) + ">(" + part + ", " + wt + ").pad<0, 0, " + std::to_string(gi * og) +
                ", " + std::to_string(cout - (gi + 1) * og) + ", 0, 0, 0, 0>()";
      }
      if (bias) code = "(" + code + " + " + bp + ".reshape<" + std::to_string(cout) + ", 1, 1>())";
      nodes = kStageNodes;
    }
    if (one_d) {
      shape.erase(shape.begin() + 2);
      code = reshape(code, shape);
    }
    set_output(out->output(0), expr(code, shape, nodes), 0);
  }

  void gemm(const ::onnx::NodeProto& n) {
    Val &a = in(n, 0), &b = in(n, 1);
    if (a.shape.size() != 2 || b.shape.size() != 2) fail(n, "Gemm needs 2-D operands");
    const bool ta = attr_i(n, "transA", 0), tb = attr_i(n, "transB", 0);
    const double alpha = attr_f(n, "alpha", 1), beta = attr_f(n, "beta", 1);
    const i64 m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
    const i64 kb = tb ? b.shape[1] : b.shape[0], nn = tb ? b.shape[0] : b.shape[1];
    if (k != kb) fail(n, shape_text(a.shape) + " and " + shape_text(b.shape) + ": the inner sizes differ");
    std::string ac = operand(n.input(0), a);
    if (ta) ac = "(" + ac + ").transpose()";
    std::string bc;
    if (b.k && b.code.empty() && tb) {  // the weight stored (K, N): the product reads it in place
      std::vector<float> t(b.k->v.size());
      for (i64 i = 0; i < nn; ++i)
        for (i64 j = 0; j < k; ++j) t[j * nn + i] = static_cast<float>(b.k->v[i * k + j] * alpha);
      bc = param(n.input(1), {k, nn}, t);
    } else if (b.k && b.code.empty()) {
      std::vector<float> t(b.k->v.begin(), b.k->v.end());
      for (float& v : t) v = static_cast<float>(v * alpha);
      bc = param(n.input(1), {k, nn}, t);
    } else {
      bc = operand(n.input(1), b);
      if (tb) bc = "(" + bc + ").transpose()";
      if (alpha != 1) ac = "(" + ac + " * " + literal(alpha) + ")";
    }
    std::string code = "fx::matmul(" + ac + ", " + bc + ")";
    Shape s = {m, nn};
    if (has_in(n, 2) && beta != 0) {
      Val& c = in(n, 2);
      broadcast(n, s, c.shape);
      std::string cc;
      if (c.k && c.code.empty()) {
        std::vector<float> t(c.k->v.begin(), c.k->v.end());
        for (float& v : t) v = static_cast<float>(v * beta);
        cc = param(n.input(2), c.shape, t);
      } else {
        cc = operand(n.input(2), c);
        if (beta != 1) cc = "(" + cc + " * " + literal(beta) + ")";
      }
      code = "(" + code + " + " + cc + ")";
    }
    set(n, expr(code, s, a.nodes + b.nodes + 2));
  }

  void pool(const ::onnx::NodeProto& n) {
    Val x = in(n, 0);
    // a 1-D pool is a 2-D one over images of height 1
    const bool one_d = x.shape.size() == 3;
    auto widen = [&](const char* name, Shape def, i64 h) {
      auto a = attr_ints(n, name);
      if (!a || !one_d) return a.value_or(def);
      if (a->size() == 2) return Shape{h, (*a)[0], h, (*a)[1]};  // pads: (begin, end)
      return Shape{h, a->at(0)};
    };
    if (one_d) x.shape.insert(x.shape.begin() + 2, 1);
    if (x.shape.size() != 4)
      fail(n, "the static path pools (N, C, L) and (N, C, H, W) only, not " + shape_text(in(n, 0).shape));
    Shape k = widen("kernel_shape", {}, 1), st = widen("strides", {1, 1}, 1),
          pads = widen("pads", {0, 0, 0, 0}, 0);
    if (k.size() != 2) fail(n, "kernel_shape must have one size per spatial axis");
    if (widen("dilations", {1, 1}, 1) != Shape{1, 1}) fail(n, "dilations (the static pools have none)");
    if (attr_s(n, "auto_pad", "NOTSET") != "NOTSET" && attr_s(n, "auto_pad", "NOTSET") != "VALID")
      fail(n, "auto_pad " + attr_s(n, "auto_pad", ""));
    if (n.output_size() > 1 && !n.output(1).empty()) fail(n, "the Indices output");
    const bool max = n.op_type() == "MaxPool";
    const bool padded = pads != Shape{0, 0, 0, 0};
    for (int a = 0; a < 2; ++a) {
      i64 span = x.shape[2 + a] + pads[a] + pads[a + 2] - k[a];
      if (attr_i(n, "ceil_mode", 0) && span % st[a]) fail(n, "ceil_mode with a window past the edge");
    }
    if (!max && padded && !attr_i(n, "count_include_pad", 0))
      fail(n, "padding without count_include_pad (the static avg_pool2d counts the padding)");
    Shape s = {x.shape[0], x.shape[1], (x.shape[2] + pads[0] + pads[2] - k[0]) / st[0] + 1,
               (x.shape[3] + pads[1] + pads[3] - k[1]) / st[1] + 1};
    Shape out = s;
    if (one_d) out.erase(out.begin() + 2);
    if (one_d || k[0] > st[0] || k[1] > st[1]) {  // overlapping windows: KH x KW shifted views, no copy
      Val& xs = vals_[n.input(0)];
      stage(xs);
      std::string xc = one_d ? reshape(xs.code, x.shape) : xs.code;
      std::string pad =
          ".pad<0, 0, 0, 0, " + list({pads[0], pads[2] + st[0] - 1, pads[1], pads[3] + st[1] - 1}) + ">()";
      Val sv = expr("(" + xc + ")" + pad,
                    {s[0], s[1], x.shape[2] + pads[0] + pads[2] + st[0] - 1,
                     x.shape[3] + pads[1] + pads[3] + st[1] - 1},
                    1);
      if (max && padded && !x.nonneg)  // -inf where the padding is: a mask of ones padded with zeros
        sv.code = "fx::where((" + xc + " * 0.0f + 1.0f)" + pad + " > 0.5f, " + sv.code +
                  ", -std::numeric_limits<float>::infinity())";
      stage(sv);  // the padded image as a tensor: the taps are views of it, read in place
      const std::string& src = sv.code;
      std::string code;
      for (i64 i = 0; i < k[0]; ++i)
        for (i64 j = 0; j < k[1]; ++j) {
          std::string t = tap(src, s[0], s[1], s[2], s[3], st[0], st[1], i, j);
          code = code.empty() ? t : max ? "fx::maximum(" + code + ", " + t + ")" : code + " + " + t;
        }
      code = max ? code : "(" + code + ") * " + literal(1.0 / static_cast<double>(k[0] * k[1]));
      set(n, expr(one_d ? reshape(code, out) : code, out, kStageNodes, x.nonneg));
      return;
    }
    std::string xc = operand(n.input(0), vals_[n.input(0)]);
    std::string pad = ".pad<0, 0, 0, 0, " + list({pads[0], pads[2], pads[1], pads[3]}) + ">()";
    if (padded) xc = "(" + xc + ")" + pad;  // zeros: an average's padding, and a max's over values >= 0
    if (padded && max && !x.nonneg) {       // -inf where the padding is: a mask of ones padded with zeros
      Val& xs = vals_[n.input(0)];
      stage(xs);
      xc = "fx::where((" + xs.code + " * 0.0f + 1.0f)" + pad + " > 0.5f, (" + xs.code + ")" + pad +
           ", -std::numeric_limits<float>::infinity())";
    }
    std::string code = std::string(max ? "fx::max_pool2d<" : "fx::avg_pool2d<") +
                       list({k[0], k[1], st[0], st[1]}) + ">(" + xc + ")";
    set(n, expr(code, s, x.nodes + 2, x.nonneg));
  }

  // x (staged) with `p` (before0, after0, before1, ...) zeros, or `value`, around it: pad<...>.
  std::string padded(Val& x, const Shape& p, double value) {
    stage(x);
    std::string pad = ".pad<" + list(p) + ">()";
    if (value == 0) return "(" + x.code + ")" + pad;
    return "fx::where((" + x.code + " * 0.0f + 1.0f)" + pad + " > 0.5f, (" + x.code + ")" + pad + ", " +
           literal(value) + ")";
  }

  // Pad, constant mode: negative pads crop (a shrink), then the rest pads.
  void pad(const ::onnx::NodeProto& n) {
    Val& x = in(n, 0);
    const std::size_t r = x.shape.size();
    if (attr_s(n, "mode", "constant") != "constant")
      fail(n, "mode " + attr_s(n, "mode", "") + " (only constant)");
    Shape pads = opset_ >= 11 ? ints(n, 1, "pads").value_or(Shape{})
                              : attr_ints(n, opset_ < 2 ? "paddings" : "pads").value_or(Shape{});
    double value = opset_ >= 11 ? (has_in(n, 2) ? constant(n, 2, "constant_value").v.at(0) : 0.0)
                                : attr_f(n, "value", 0);
    Shape axes;
    if (opset_ >= 18 && has_in(n, 3))
      for (double a : constant(n, 3, "axes").v) axes.push_back(axis(n, static_cast<i64>(a), r));
    else
      for (std::size_t i = 0; i < r; ++i) axes.push_back(static_cast<i64>(i));
    if (pads.size() != 2 * axes.size())
      fail(n, "pads " + shape_text(pads) + " for rank " + std::to_string(r));
    Shape crop, grow(2 * r, 0), s = x.shape;
    for (std::size_t i = 0; i < r; ++i) crop.insert(crop.end(), {0, x.shape[i]});
    for (std::size_t i = 0; i < axes.size(); ++i) {
      i64 a = axes[i], b = pads[i], e = pads[i + axes.size()];
      crop[2 * a] = std::max<i64>(0, -b), crop[2 * a + 1] = x.shape[a] - std::max<i64>(0, -e);
      grow[2 * a] = std::max<i64>(0, b), grow[2 * a + 1] = std::max<i64>(0, e);
      s[a] = x.shape[a] + b + e;
      if (s[a] < 0) fail(n, "pads " + shape_text(pads) + " crop " + shape_text(x.shape) + " below nothing");
    }
    Val v = x;
    Shape whole;
    for (std::size_t i = 0; i < r; ++i) whole.insert(whole.end(), {0, x.shape[i]});
    if (crop != whole) {
      stage(x);
      v = expr("(" + x.code + ").shrink<" + list(crop) + ">()", x.shape, 1);
      for (std::size_t i = 0; i < r; ++i) v.shape[i] = crop[2 * i + 1] - crop[2 * i];
    }
    std::string code = grow == Shape(2 * r, 0) ? operand(n.input(0), v) : padded(v, grow, value);
    set(n, expr(code, s, kStageNodes));
  }

  // Slice with steps of 1 (constant starts, ends, axes): a shrink.
  void slice(const ::onnx::NodeProto& n) {
    Val& x = in(n, 0);
    const std::size_t r = x.shape.size();
    const bool inputs = opset_ >= 10;
    auto need = [&](std::optional<Shape> v, const char* what) {
      if (!v) fail(n, std::string("no ") + what);
      return *v;
    };
    Shape starts = need(inputs ? ints(n, 1, "starts") : attr_ints(n, "starts"), "starts");
    Shape ends = need(inputs ? ints(n, 2, "ends") : attr_ints(n, "ends"), "ends");
    std::optional<Shape> axes = inputs ? ints(n, 3, "axes") : attr_ints(n, "axes");
    std::optional<Shape> steps = inputs ? ints(n, 4, "steps") : std::nullopt;
    Shape sh = x.shape, range;
    for (std::size_t i = 0; i < r; ++i) range.insert(range.end(), {0, x.shape[i]});
    for (std::size_t i = 0; i < starts.size(); ++i) {
      i64 a = axis(n, axes ? axes->at(i) : static_cast<i64>(i), r), d = x.shape[a];
      if (steps && steps->at(i) != 1)
        fail(n, "steps " + shape_text(*steps) + " (the static path slices by 1)");
      auto clamp = [&](i64 v) { return std::clamp<i64>(v < 0 ? v + d : v, 0, d); };
      i64 b = clamp(starts[i]), e = std::max(b, clamp(ends.at(i)));
      range[2 * a] = b, range[2 * a + 1] = e, sh[a] = e - b;
    }
    set(n, expr("(" + operand(n.input(0), x) + ").shrink<" + list(range) + ">()", sh, x.nodes));
  }

  // Split along an axis: one shrink per output, of the staged input.
  void split(const ::onnx::NodeProto& n) {
    Val& x = in(n, 0);
    const std::size_t r = x.shape.size();
    i64 a = axis(n, attr_i(n, "axis", 0), r);
    Shape parts = (opset_ >= 13 ? ints(n, 1, "split") : attr_ints(n, "split")).value_or(Shape{});
    if (parts.empty()) {
      i64 k = n.output_size(), d = x.shape[a];
      for (i64 i = 0; i < k; ++i) parts.push_back(d / k + (i < d % k ? 1 : 0));
    }
    if (static_cast<int>(parts.size()) != n.output_size() ||
        std::accumulate(parts.begin(), parts.end(), i64{0}) != x.shape[a])
      fail(n, "split " + shape_text(parts) + " does not cut axis " + std::to_string(a) + " of " +
                  shape_text(x.shape));
    stage(x);
    for (std::size_t o = 0, at = 0; o < parts.size(); at += parts[o], ++o) {
      Shape range, sh = x.shape;
      for (std::size_t i = 0; i < r; ++i) range.insert(range.end(), {0, x.shape[i]});
      range[2 * a] = static_cast<i64>(at), range[2 * a + 1] = static_cast<i64>(at) + parts[o];
      sh[a] = parts[o];
      set_output(n.output(static_cast<int>(o)), expr("(" + x.code + ").shrink<" + list(range) + ">()", sh, 0),
                 1);
    }
  }

  void softmax(const ::onnx::NodeProto& n) {
    Val& x = in(n, 0);
    const std::size_t r = x.shape.size();
    i64 a = axis(n, attr_i(n, "axis", opset_ < 13 ? 1 : -1), r);
    std::string f = n.op_type() == "Softmax" ? "softmax" : "log_softmax";
    std::string xc = operand(n.input(0), x);
    std::string code;
    if (opset_ >= 13 || a == static_cast<i64>(r) - 1) {
      code = "(" + xc + ")." + f + "<" + std::to_string(a) + ">()";
    } else {  // before opset 13: over all the axes from `axis` on, as one
      Shape flat = {numel(Shape(x.shape.begin(), x.shape.begin() + a)),
                    numel(Shape(x.shape.begin() + a, x.shape.end()))};
      code = reshape(reshape(xc, flat) + "." + f + "<1>()", x.shape);
    }
    set(n, expr(code, x.shape, x.nodes + 5));
  }

  void reduce(const ::onnx::NodeProto& n) {
    Val& x = in(n, 0);
    const bool input_axes = n.op_type() == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
    std::optional<Shape> axes = input_axes ? ints(n, 1, "axes") : attr_ints(n, "axes");
    Shape ax;
    if (!axes || axes->empty()) {
      if (attr_i(n, "noop_with_empty_axes", 0)) {
        vals_[n.output(0)] = x;
        return;
      }
      for (std::size_t i = 0; i < x.shape.size(); ++i) ax.push_back(static_cast<i64>(i));
    } else {
      for (i64 a : *axes) ax.push_back(axis(n, a, x.shape.size()));
      std::sort(ax.begin(), ax.end());
    }
    const bool keep = attr_i(n, "keepdims", 1);
    Shape s;
    for (std::size_t i = 0; i < x.shape.size(); ++i) {
      bool reduced = std::count(ax.begin(), ax.end(), static_cast<i64>(i));
      if (!reduced)
        s.push_back(x.shape[i]);
      else if (keep)
        s.push_back(1);
    }
    std::string f = n.op_type() == "ReduceMean"  ? "mean"
                    : n.op_type() == "ReduceSum" ? "sum"
                    : n.op_type() == "ReduceMax" ? "max"
                                                 : "min";
    std::string code =
        "(" + operand(n.input(0), x) + ")." + f + "<" + list(ax) + ">(" + (keep ? "fx::keepdim" : "") + ")";
    set(n, expr(code, s, x.nodes + 1, x.nonneg && f != "min"));
  }

  // Concat: each input padded with zeros to the output's extent along the axis, summed.
  void concat(const ::onnx::NodeProto& n) {
    const Shape first = in(n, 0).shape;
    i64 a = axis(n, attr_i(n, "axis", 0), first.size());
    i64 total = 0;
    for (int i = 0; i < n.input_size(); ++i) total += in(n, i).shape.at(a);
    Shape s = first;
    s[a] = total;
    std::string code;
    int nodes = 0;
    for (i64 i = 0, off = 0; i < n.input_size(); ++i) {
      Val& v = in(n, static_cast<int>(i));
      Shape want = s;
      want[a] = v.shape[a];
      if (v.shape != want)
        fail(n, "input " + std::to_string(i) + " " + shape_text(v.shape) + " does not fit " + shape_text(s));
      Shape p;
      for (std::size_t d = 0; d < s.size(); ++d) {
        p.push_back(static_cast<i64>(d) == a ? off : 0);
        p.push_back(static_cast<i64>(d) == a ? total - off - v.shape[a] : 0);
      }
      code += (code.empty() ? "" : " + ") +
              ("(" + operand(n.input(static_cast<int>(i)), v) + ").pad<" + list(p) + ">()");
      nodes += v.nodes + 2;
      off += v.shape[a];
    }
    set(n, expr("(" + code + ")", s, nodes));
  }

  void write_safetensors(const std::string& file) const {
    std::string head = "{";
    std::uint64_t off = 0;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      std::uint64_t bytes = params_[k].v.size() * sizeof(float);
      head += (head.size() > 1 ? "," : "") +
              ("\"" + path(k) + "\":{\"dtype\":\"F32\",\"shape\":[" + list(params_[k].shape, ",") +
               "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + bytes) + "]}");
      off += bytes;
    }
    head += "}";
    while (head.size() % 8) head += ' ';
    std::ofstream o(file, std::ios::binary);
    if (!o) throw Error("cannot write " + file);
    std::uint64_t n = head.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    o.write(reinterpret_cast<const char*>(len), 8);
    o << head;
    for (const auto& p : params_)
      for (float v : p.v) {
        unsigned char b[4];
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(u >> (8 * i));
        o.write(reinterpret_cast<const char*>(b), 4);
      }
    if (!o) throw Error("cannot write " + file);
  }

  const ::onnx::ModelProto& m_;
  std::filesystem::path folder_;
  i64 opset_ = 1;
  std::map<std::string, Val> vals_;
  std::map<std::string, int> uses_;
  std::set<int> done_;  // nodes emitted with another (a batch norm folded into its conv)
  std::set<std::string> names_;
  std::vector<Param> params_;
  std::vector<std::pair<std::string, Shape>> stages_;
  std::vector<Io> inputs_, outputs_;
  std::ostringstream body_;
};

}  // namespace

int main(int argc, char** argv) try {
  std::string emit;
  auto args = metagrad::tools::parse_model_args(argc, argv, kUsage, [&](const std::string& a) {
    if (a.rfind("--emit=", 0) != 0) return false;
    emit = a.substr(7);
    return true;
  });
  if (!args) return 0;
  const std::string &model_path = args->model, &out = args->out;
  std::string name = args->name;
  const std::map<std::string, Shape>& given = args->inputs;
  if (emit != "cpp")
    throw Error("--emit=cpp is the one output there is (a static-path C++ header)\n" + std::string(kUsage));
  if (out.empty()) throw Error(std::string("no output header (-o model.hpp)\n") + kUsage);
  std::set<std::string> none;
  if (!name.empty() && identifier(name, "model", none) != name)
    throw Error("-n " + name + ": not a C++ identifier");
  if (name.empty()) name = identifier(std::filesystem::path(model_path).stem().string(), "model", none);
  std::ifstream f(model_path, std::ios::binary);
  ::onnx::ModelProto m;
  if (!f) throw Error(model_path + ": cannot open it");
  if (!m.ParseFromIstream(&f)) throw Error(model_path + ": not an ONNX model (the protobuf does not parse)");
  try {
    Emitter e(m, std::filesystem::path(model_path).parent_path(), given);
    e.run();
    e.write(out, name, model_path);
  } catch (const Error& err) { throw Error(model_path + ": " + err.what()); }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "metagrad-onnx: %s\n", e.what());
  return 1;
}
