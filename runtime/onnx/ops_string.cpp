// Tensors of strings, on the host: StringNormalizer, Equal on strings, and the text of Cast to and from
// STRING (the numbers as ONNX's reference writes them: shortest round-trip digits, Python's notation).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cwctype>
#include <limits>
#include <locale>
#include <memory>
#include <unordered_set>
#include <vector>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

std::int64_t numel(const Dims& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// A float as Python's repr (and numpy's str) writes it: the shortest digits that read back as the same
// value, positional for exponents in [-4, 16) ("0.039187793", "1.0"), else scientific ("1e-05").
std::string number_text(double v, bool single) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  char buf[64];
  auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific)
                  : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  auto e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  if (exp < -4 || exp >= 16) return sci;
  std::string sign = sci[0] == '-' ? "-" : "", digits;
  for (std::size_t k = sign.size(); k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  if (exp < 0) return sign + "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  auto whole = static_cast<std::size_t>(exp) + 1;
  if (digits.size() <= whole) return sign + digits + std::string(whole - digits.size(), '0') + ".0";
  return sign + digits.substr(0, whole) + "." + digits.substr(whole);
}

bool equals_nocase(const std::string& a, const char* b) {
  std::size_t k = 0;
  for (; k < a.size() && b[k]; ++k)
    if (std::tolower(static_cast<unsigned char>(a[k])) != b[k]) return false;
  return k == a.size() && !b[k];
}

// A string as a number: ONNX's "NaN", "INF", "+INF", "-INF" (any case), else all of it must parse.
double parse_float(const std::string& s, bool single) {
  if (equals_nocase(s, "nan")) return std::numeric_limits<double>::quiet_NaN();
  if (equals_nocase(s, "inf") || equals_nocase(s, "+inf")) return std::numeric_limits<double>::infinity();
  if (equals_nocase(s, "-inf")) return -std::numeric_limits<double>::infinity();
  char* end = nullptr;
  double v = single ? std::strtof(s.c_str(), &end) : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) throw Error("Cast: the string '" + s + "' is not a number");
  return v;
}

// Integers read exactly where they are integers ("9007199254740993"), else through a float ("100.5" -> 100).
std::int64_t parse_int(const std::string& s, DType to) {
  if (equals_nocase(s, "true")) return 1;
  if (equals_nocase(s, "false")) return 0;
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  auto r = to == dtypes::uint64 ? std::from_chars(s.data(), end, reinterpret_cast<std::uint64_t&>(v))
                                : std::from_chars(s.data(), end, v);
  if (r.ec == std::errc() && r.ptr == end) return to == dtypes::bool_ ? v != 0 : v;
  double d = parse_float(s, false);
  if (!(std::abs(d) < 9.2e18))  // NaN too
    throw Error("Cast: the string '" + s + "' is out of the range of " + to.name);
  Host h;
  h.dtype = to;
  h.push(d);
  return h.i[0];
}

// Case mapping and comparison under a locale: UTF-8 decoded to code points, each mapped by the locale's
// ctype<wchar_t> (wchar_t holds a code point on the platforms metagrad builds on).
class CaseMap {
 public:
  explicit CaseMap(const std::string& name)
      : loc_(pick(name)), ct_(&std::use_facet<std::ctype<wchar_t>>(loc_)) {}
  std::string lower(const std::string& s) const { return map(s, false); }
  std::string upper(const std::string& s) const { return map(s, true); }

 private:
  // en_US (ONNX's default) and C use Unicode's default case mapping, which glibc's built-in C.UTF-8
  // carries; any other locale must be installed on this system.
  static std::locale pick(const std::string& name) {
    static const char* const plain[] = {"",  "en_US",   "en_US.UTF-8", "en_US.utf8",
                                        "C", "C.UTF-8", "C.utf8",      "POSIX"};
    bool is_plain = std::find(std::begin(plain), std::end(plain), name) != std::end(plain);
    for (const std::string& n :
         is_plain ? std::vector<std::string>{"C.UTF-8"} : std::vector<std::string>{name, name + ".UTF-8"}) {
      try {
        return std::locale(n);
      } catch (const std::runtime_error&) {}
    }
    if (is_plain) return std::locale::classic();  // no C.UTF-8: ASCII's case mapping
    throw Error("locale '" + name +
                "' is not supported (en_US and C are, and locales installed on this system)");
  }
  std::string map(const std::string& s, bool up) const {
    std::string out;
    out.reserve(s.size());
    for (std::size_t k = 0; k < s.size();) {
      auto c = static_cast<unsigned char>(s[k]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (!len || k + static_cast<std::size_t>(len) > s.size())
        throw Error("StringNormalizer: the string '" + s + "' is not valid UTF-8");
      char32_t cp = len == 1 ? c : c & (0x7f >> len);
      for (int j = 1; j < len; ++j) {
        auto b = static_cast<unsigned char>(s[k + static_cast<std::size_t>(j)]);
        if ((b >> 6) != 2) throw Error("StringNormalizer: the string '" + s + "' is not valid UTF-8");
        cp = (cp << 6) | (b & 0x3f);
      }
      k += static_cast<std::size_t>(len);
      auto w = static_cast<wchar_t>(cp);
      put(out, static_cast<char32_t>(up ? ct_->toupper(w) : ct_->tolower(w)));
    }
    return out;
  }
  static void put(std::string& out, char32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  std::locale loc_;
  const std::ctype<wchar_t>* ct_;
};

}  // namespace

StringTensor to_strings(const Host& h) {
  StringTensor s;
  s.shape = h.shape;
  bool single = h.dtype != dtypes::float64;
  for (std::int64_t k = 0; k < h.numel(); ++k) {
    if (h.is_float())
      s.data.push_back(number_text(h.at(k), single));
    else if (h.dtype == dtypes::bool_)
      s.data.push_back(h.i[static_cast<std::size_t>(k)] ? "True" : "False");  // numpy's str
    else if (h.dtype == dtypes::uint64)
      s.data.push_back(std::to_string(static_cast<std::uint64_t>(h.i[static_cast<std::size_t>(k)])));
    else
      s.data.push_back(std::to_string(h.i[static_cast<std::size_t>(k)]));
  }
  return s;
}

Host from_strings(const StringTensor& s, DType to) {
  Host h;
  h.dtype = to;
  h.shape = s.shape;
  for (const auto& x : s.data)
    if (dtypes::is_float(to))
      h.f.push_back(parse_float(x, to != dtypes::float64));
    else
      h.i.push_back(parse_int(x, to));
  return h;
}

void add_string_ops(OpTable& t) {
  t["StringNormalizer"] = [](const NodeInfo& n) -> Run {
    std::string action = n.s("case_change_action", "NONE");
    if (action != "NONE" && action != "LOWER" && action != "UPPER")
      n.unsupported("case_change_action '" + action + "'");
    bool sensitive = n.i("is_case_sensitive", 0) != 0;
    auto cases = std::make_shared<const CaseMap>(n.s("locale", ""));
    std::unordered_set<std::string> stop;
    for (const auto& w : n.strings("stopwords")) stop.insert(sensitive ? w : cases->lower(w));
    return [action, sensitive, cases, stop](Args& a) -> std::vector<Value> {
      const StringTensor& x = a.str(0);
      if (!(x.shape.size() == 1 || (x.shape.size() == 2 && x.shape[0] == 1)))
        throw Error("StringNormalizer takes a tensor of shape (C,) or (1, C), the input is " +
                    shape_str(x.shape));
      StringTensor y;
      for (const auto& w : x.data) {
        if (!stop.empty() && stop.count(sensitive ? w : cases->lower(w))) continue;
        y.data.push_back(action == "LOWER" ? cases->lower(w) : action == "UPPER" ? cases->upper(w) : w);
      }
      if (y.data.empty()) y.data.emplace_back();  // ONNX: all removed is one empty string
      auto c = static_cast<std::int64_t>(y.data.size());
      y.shape = x.shape.size() == 1 ? Dims{c} : Dims{1, c};
      return {std::move(y)};
    };
  };
  // Equal on two tensors of strings (broadcast), else the numeric Equal.
  t["Equal"] = [numeric = t.at("Equal")](const NodeInfo& n) -> Run {
    Run run = numeric(n);
    return [run](Args& a) -> std::vector<Value> {
      if (!a.is_string(0) && !a.is_string(1)) return run(a);
      const StringTensor &x = a.str(0), &y = a.str(1);
      Host r;
      r.dtype = dtypes::bool_;
      r.shape = broadcast_shapes(x.shape, y.shape);
      for (std::int64_t k = 0; k < numel(r.shape); ++k)
        r.i.push_back(x.data[static_cast<std::size_t>(broadcast_offset(r.shape, x.shape, k))] ==
                      y.data[static_cast<std::size_t>(broadcast_offset(r.shape, y.shape, k))]);
      return {std::move(r)};
    };
  };
}

}  // namespace metagrad::onnx::detail
