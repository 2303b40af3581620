// What metagrad-aot and metagrad-onnx share: their command line
//
//   TOOL model.onnx -o PATH [-n NAME] [--input NAME=1x3x224x224 ...] [the tool's own options]
//
// and an ONNX name made an identifier of the code they write. Errors are std::invalid_argument.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace metagrad::tools {

// "1x3x224x224" -> {1, 3, 224, 224}; "" is a scalar.
inline std::vector<std::int64_t> parse_dims(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> d;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t x = text.find('x', at), end = x == std::string::npos ? text.size() : x;
    std::string part = text.substr(at, end - at);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {}
    if (part.empty() || used != part.size() || v <= 0)
      throw std::invalid_argument(flag + ": '" + part +
                                  "' is not a positive size (sizes are written 1x3x224x224)");
    d.push_back(v);
    at = x == std::string::npos ? text.size() : x + 1;
    if (x != std::string::npos && at == text.size())
      throw std::invalid_argument(flag + ": a size is missing at the end");
  }
  return d;
}

struct ModelArgs {
  std::string model, out, name;                             // the file, -o, -n
  std::map<std::string, std::vector<std::int64_t>> inputs;  // --input NAME=dims
};

// The command line, or nothing after -h (the usage printed). `own` is asked first about each option
// (as written, "--emit=cpp") and returns whether it took it.
inline std::optional<ModelArgs> parse_model_args(int argc, char** argv, const char* usage,
                                                 const std::function<bool(const std::string&)>& own) {
  ModelArgs r;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value\n" + usage);
      return argv[++i];
    };
    if (own(a)) continue;
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return std::nullopt;
    } else if (a == "-o") {
      r.out = value();
    } else if (a == "-n") {
      r.name = value();
    } else if (a == "--input" || a.rfind("--input=", 0) == 0) {
      std::string v = a == "--input" ? value() : a.substr(8), flag = "--input " + v;
      auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0) throw std::invalid_argument(flag + ": write NAME=1x3x224x224");
      if (!r.inputs.emplace(v.substr(0, eq), parse_dims(v.substr(eq + 1), flag)).second)
        throw std::invalid_argument(flag + ": the input is given twice");
    } else if (!a.empty() && a[0] == '-') {
      throw std::invalid_argument("unknown option " + a + "\n" + usage);
    } else if (r.model.empty()) {
      r.model = a;
    } else {
      throw std::invalid_argument("one model at a time: " + r.model + " and " + a + "\n" + usage);
    }
  }
  if (r.model.empty()) throw std::invalid_argument(std::string("no model file\n") + usage);
  return r;
}

// An ONNX name as an identifier: other characters become '_', a name that starts with a digit or '_'
// gets `role`_ before it, "__" becomes "_" (both reserved in C and C++, and the C headers are included
// from C++), a reserved word gets '_' after it, a name already taken a number.
inline std::string identifier(const std::string& onnx, const std::string& role, std::set<std::string>& taken,
                              const std::set<std::string>& reserved) {
  std::string s;
  for (char c : onnx) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '_') s = role + "_" + s;
  for (auto at = s.find("__"); at != std::string::npos; at = s.find("__")) s.erase(at, 1);
  if (reserved.count(s)) s += "_";
  std::string name = s;
  for (int k = 2; !taken.insert(name).second; ++k) name = s + "_" + std::to_string(k);
  return name;
}

}  // namespace metagrad::tools
