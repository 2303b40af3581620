// metagrad-aot: an ONNX model compiled ahead of time to C that needs only libc and libm (docs/onnx.md):
//
//   metagrad-aot model.onnx -o DIR [-n NAME] [--input NAME=1x3x224x224 ...] [--constants=bin|c]
//
// loads the model, fixes every input's shape (symbolic dimensions from --input), runs it once under an
// aot::Generator and writes DIR/NAME.h, DIR/NAME.c and DIR/NAME.bin (the weights, linked in by the C's
// .incbin; --constants=c writes them as C text instead): one function
// `int NAME_run(const T* input..., T* output...)`, inputs and outputs in the model's order, returning 0
// (1: a Gather's index read from an input is out of range).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "metagrad/aot.hpp"
#include "metagrad/device/raw_buffer.hpp"
#include "metagrad/lazy.hpp"
#include "metagrad/onnx.hpp"
#include "model_args.hpp"

using namespace metagrad;

namespace {

const char* const kUsage =
    "usage: metagrad-aot model.onnx -o DIR [-n NAME] [--input NAME=1x3x224x224 ...] [--constants=bin|c]\n";

// An ONNX name as a C identifier (tools/model_args.hpp).
std::string c_name(const std::string& onnx, const std::string& role, std::set<std::string>& taken) {
  static const std::set<std::string> keywords{
      "auto",     "break",   "case",    "char",     "const",    "continue", "default",  "do",
      "double",   "else",    "enum",    "extern",   "float",    "for",      "goto",     "if",
      "inline",   "int",     "long",    "register", "restrict", "return",   "short",    "signed",
      "sizeof",   "static",  "struct",  "switch",   "typedef",  "union",    "unsigned", "void",
      "volatile", "while",   "bool",    "true",     "false",    "NULL",     "int8_t",   "int16_t",
      "int32_t",  "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t"};
  return tools::identifier(onnx, role, taken, keywords);
}

std::string dims_text(const std::vector<onnx::Dim>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    s += i ? ", " : "";
    if (auto* v = std::get_if<std::int64_t>(&dims[i]))
      s += std::to_string(*v);
    else
      s += std::get<std::string>(dims[i]).empty() ? "?" : std::get<std::string>(dims[i]);
  }
  return s + "]";
}

// The shape input k is compiled for: its declared dimensions, with --input's sizes where given.
Dims fix_shape(const onnx::Model& m, std::size_t k,
               const std::map<std::string, std::vector<std::int64_t>>& given) {
  const std::string& name = m.input_names()[k];
  const auto& decl = m.input_shapes()[k];
  auto it = given.find(name);
  if (it != given.end()) {
    const Dims d(it->second);
    bool ok = decl.empty() || decl.size() == d.size();
    for (std::size_t i = 0; ok && i < decl.size(); ++i)
      if (auto* v = std::get_if<std::int64_t>(&decl[i]); v && *v != d[i]) ok = false;
    if (!ok)
      throw std::invalid_argument("--input " + name + ": the model declares the shape " + dims_text(decl) +
                                  ", which " + to_string(d) + " does not fit");
    return d;
  }
  Dims d;
  for (std::size_t i = 0; i < decl.size(); ++i) {
    auto* v = std::get_if<std::int64_t>(&decl[i]);
    if (!v || *v <= 0)
      throw std::invalid_argument("input '" + name + "' has the shape " + dims_text(decl) + ": dimension " +
                                  std::to_string(i) + " is not fixed; give every size with --input " + name +
                                  "=AxBx...");
    d.push_back(*v);
  }
  return d;
}

// While the graph is built, an input's values do not exist yet: a node that needs them then (an output
// shape or indices that depend on the data, as NonZero's) cannot become C, and says so.
bool building = true;

Tensor placeholder(const std::string& name, const Dims& shape, DType dtype) {
  auto fill = [name](RawBuffer& out, const std::vector<RawBuffer*>&) {
    if (building)
      throw std::runtime_error("it needs the values of input '" + name +
                               "' to build the graph (a shape or indices computed from the data): a "
                               "compiled model cannot, its shapes are fixed before it runs");
    std::vector<std::byte> zeros(out.nbytes());
    out.copyin(zeros.data());
  };
  auto arg = std::make_shared<const CustomArg>(CustomArg{fill});
  return Tensor(LazyBuffer::loadop(LoadOps::CUSTOM, shape, dtype, Device::DEFAULT, arg, {}), false);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string constants = "bin";
  auto cli = tools::parse_model_args(argc, argv, kUsage, [&](const std::string& a) {
    if (a.rfind("--constants=", 0) != 0) return false;
    constants = a.substr(12);
    if (constants != "bin" && constants != "c")
      throw std::invalid_argument(a + ": the constants go to a binary file (bin) or into the C (c)");
    return true;
  });
  if (!cli) return 0;
  const std::string& model_path = cli->model;
  std::string dir = cli->out.empty() ? "." : cli->out, name = cli->name;
  const auto& given = cli->inputs;
  if (std::set<std::string> none; !name.empty() && c_name(name, "model", none) != name)
    throw std::invalid_argument("-n " + name + ": not a C identifier");
  if (name.empty()) {
    std::set<std::string> none;
    name = c_name(std::filesystem::path(model_path).stem().string(), "model", none);
  }
  // The internal symbols' prefix differs from NAME (the GEMM's own C has a static NAME_run).
  aot::Generator g(name + "_aot");  // and the model's tensors are made on CLANG after this
  onnx::Model m = onnx::load(model_path);
  for (const auto& [in, dims] : given)
    if (std::find(m.input_names().begin(), m.input_names().end(), in) == m.input_names().end()) {
      std::string names;
      for (const auto& n : m.input_names()) names += (names.empty() ? "" : ", ") + n;
      throw std::invalid_argument("--input " + in + ": the model has no such input (its inputs: " + names +
                                  ")");
    }
  std::set<std::string> taken;  // the parameters' names
  std::vector<aot::Arg> ins, outs;
  for (std::size_t k = 0; k < m.input_names().size(); ++k) {
    if (m.input_dtypes()[k] == onnx::string_dtype)
      throw std::invalid_argument("input '" + m.input_names()[k] +
                                  "' is a tensor of strings, which C code cannot take");
    ins.push_back({c_name(m.input_names()[k], "input", taken),
                   placeholder(m.input_names()[k], fix_shape(m, k, given), m.input_dtypes()[k])});
  }
  std::vector<Tensor> xs;
  for (const auto& a : ins) xs.push_back(a.tensor);
  std::vector<Tensor> ys = m(xs);
  building = false;
  for (std::size_t k = 0; k < ys.size(); ++k)
    outs.push_back({c_name(m.output_names()[k], "output", taken), ys[k]});
  g.function(name + "_run", ins, outs);
  std::vector<std::string> args{"metagrad-aot", "-o", dir, "-n", name};  // NAME.h, NAME.c (and NAME.bin)
  if (constants == "bin") args.push_back("--constants-file=4096");
  std::vector<char*> argv_g;
  for (auto& a : args) argv_g.push_back(a.data());
  if (int status = g.main(static_cast<int>(argv_g.size()), argv_g.data()); status != 0) return status;
  // NAME.h opens with the model's file and its own names of the arrays that C names differently.
  auto safe = [](std::string t) {  // inside a C comment
    for (std::size_t at; (at = t.find("*/")) != std::string::npos;) t.replace(at, 2, "* /");
    return t;
  };
  std::string names;
  for (const auto* list : {&ins, &outs})
    for (std::size_t k = 0; k < list->size(); ++k) {
      const std::string& onnx = (list == &ins ? m.input_names() : m.output_names())[k];
      if ((*list)[k].name != onnx) names += "\n   " + (*list)[k].name + " is '" + safe(onnx) + "'";
    }
  auto header = std::filesystem::path(dir) / (name + ".h");
  std::ifstream in(header);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::ofstream(header) << "/* " << name << "_run: " << safe(model_path) << " compiled by metagrad-aot"
                        << (names.empty() ? "" : "; in the model,") << names << " */\n"
                        << text;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "metagrad-aot: %s\n", e.what());
  return 1;
}
