// StateDict, loading a model's state, and safetensors files with a small JSON reader and writer.
#include "metagrad/nn/state.hpp"
#include "metagrad/detail/cat.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string_view>

namespace metagrad::nn {

using metagrad::detail::cat;

// ---- StateDict ----

void StateDict::add(const std::string& key, const Tensor& t) {
  if (!index_.emplace(key, items_.size()).second)
    throw std::invalid_argument(cat("StateDict: the key '", key, "' is there twice"));
  items_.emplace_back(key, t);
}
const Tensor& StateDict::at(const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) throw std::out_of_range(cat("StateDict: no key '", key, "'"));
  return items_[it->second].second;
}
std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, t] : items_) out.push_back(k);
  return out;
}

StateDict get_state_dict(const Tensor& t, const std::string& prefix) {
  return t.defined() ? StateDict{{prefix, t}} : StateDict{};
}
StateDict get_state_dict(const StateDict& d, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, t] : d) out.add(detail::join_key(prefix, k), t);
  return out;
}
StateDict state_dict(std::initializer_list<Member> members) {
  StateDict out;
  for (const Member& m : members)
    for (const auto& [k, t] : m.dict) out.add(k, t);
  return out;
}

void load_state_dict(const StateDict& into, const StateDict& from, bool strict) {
  std::vector<std::pair<Tensor, Tensor>> todo;
  for (const auto& [k, t] : into) {
    if (!from.contains(k)) {
      if (strict) throw std::invalid_argument(cat("load_state_dict: the state dict has no '", k, "'"));
      continue;
    }
    const Tensor& v = from.at(k);
    if (v.shape() != t.shape() || v.dtype() != t.dtype())
      throw std::invalid_argument(cat("load_state_dict: '", k, "' is ", to_string(t.shape()), " ",
                                      t.dtype().name, " in the model but ", to_string(v.shape()), " ",
                                      v.dtype().name, " in the state dict"));
    todo.emplace_back(t, v);
  }
  if (strict)
    for (const auto& [k, v] : from)
      if (!into.contains(k)) throw std::invalid_argument(cat("load_state_dict: the model has no '", k, "'"));
  for (auto& [t, v] : todo) t.assign(v.to(t.device())).realize();
}

// ---- JSON: just what safetensors headers need (objects keep their order) ----

namespace {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  std::string text;               // a String's value, or a Number's digits as written
  std::vector<Json> items;        // an Array's values, or an Object's
  std::vector<std::string> keys;  // an Object's keys, in order
};

class JsonReader {
 public:
  JsonReader(std::string_view s, std::string what) : s_(s), what_(std::move(what)) {}

  Json document() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  std::string_view s_;
  std::string what_;
  std::size_t i_ = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error(cat(what_, ": bad JSON header at header byte ", std::to_string(i_), ": ", why));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(cat("expected '", std::string(1, c), "'"));
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) fail("nested too deeply");
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Object, ++i_;
      if (eat('}')) return v;
      do {
        ws();
        std::string k = string();
        expect(':');
        v.keys.push_back(std::move(k));
        v.items.push_back(value(depth + 1));
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Array, ++i_;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::String, v.text = string();
    } else if (word("true") || word("false")) {
      v.kind = Json::Bool, v.b = c == 't';
    } else if (word("null")) {
      v.kind = Json::Null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Number;
      std::size_t start = i_;
      while (i_ < s_.size() && std::strchr("+-.eE0123456789", s_[i_])) ++i_;
      v.text = std::string(s_.substr(start, i_ - start));
    } else {
      fail(cat("unexpected character '", std::string(1, c), "'"));
    }
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned u = 0;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, u, 16);
    if (ec != std::errc() || p != s_.data() + i_ + 4) fail("bad \\u escape");
    i_ += 4;
    return u;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18)), out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)), out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated string");
      switch (char e = s_[i_++]) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00 && word("\\u")) {  // a surrogate pair
            unsigned lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          utf8(out, cp);
          break;
        }
        default:
          fail(cat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }
};

void write_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00", out += hex[(c >> 4) & 0xf], out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  out += '"';
}

// ---- safetensors ----

struct SafeDType {
  const char* name;
  DType dtype;
};
constexpr SafeDType kSafeDTypes[] = {
    {"BOOL", dtypes::bool_},  {"I8", dtypes::int8},     {"U8", dtypes::uint8},      {"I32", dtypes::int32},
    {"I64", dtypes::int64},   {"F16", dtypes::float16}, {"BF16", dtypes::bfloat16}, {"F32", dtypes::float32},
    {"F64", dtypes::float64}, {"I16", dtypes::int16},   {"U16", dtypes::uint16},    {"U32", dtypes::uint32},
    {"U64", dtypes::uint64}};

// Reverses each item's bytes: the file is little-endian whatever the host is.
void to_little_endian(std::string& bytes, std::size_t itemsize) {
  if constexpr (std::endian::native == std::endian::big)
    for (std::size_t i = 0; i + itemsize <= bytes.size(); i += itemsize)
      std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                   bytes.begin() + static_cast<std::ptrdiff_t>(i + itemsize));
}

template <class T>
std::string raw_bytes(const Tensor& t) {
  std::vector<T> v = t.to_vector<T>();
  std::string out(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
std::string tensor_bytes(const Tensor& t) {
  DType d = t.dtype();
  std::string b;
  if (t.numel() == 0) return b;
  if (d == dtypes::bool_ || d == dtypes::uint8)
    b = raw_bytes<std::uint8_t>(t);
  else if (d == dtypes::int8)
    b = raw_bytes<std::int8_t>(t);
  else if (d == dtypes::int16)
    b = raw_bytes<std::int16_t>(t);
  else if (d == dtypes::uint16)
    b = raw_bytes<std::uint16_t>(t);
  else if (d == dtypes::int32)
    b = raw_bytes<std::int32_t>(t);
  else if (d == dtypes::uint32)
    b = raw_bytes<std::uint32_t>(t);
  else if (d == dtypes::uint64)
    b = raw_bytes<std::uint64_t>(t);
  else if (d == dtypes::int64)
    b = raw_bytes<std::int64_t>(t);
  else if (d == dtypes::float16)
    b = raw_bytes<half>(t);
  else if (d == dtypes::bfloat16)
    b = raw_bytes<bf16>(t);
  else if (d == dtypes::float32)
    b = raw_bytes<float>(t);
  else
    b = raw_bytes<double>(t);
  to_little_endian(b, static_cast<std::size_t>(d.itemsize));
  return b;
}

// A file mapped read-only (mmap): its pages are read from the file as they are touched, so a header
// or one tensor of a large file costs only its own pages, and loading holds no second copy of it.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw std::runtime_error(cat("safe_load: '", path, "' is a directory, not a .safetensors file"));
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(cat("safe_load: cannot open '", path, "': ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw std::runtime_error(cat("safe_load: error reading '", path, "': not a regular file"));
    }
    n_ = static_cast<std::size_t>(st.st_size);
    void* p = n_ ? ::mmap(nullptr, n_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED)
      throw std::runtime_error(cat("safe_load: error mapping '", path, "': ", std::strerror(err)));
    p_ = static_cast<const char*>(p);
  }
  ~Mapping() {
    if (p_) ::munmap(const_cast<char*>(p_), n_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::string_view bytes() const { return {p_, n_}; }
  // Gives back the pages wholly inside [begin, end): copied out already, read again if touched.
  void release(std::size_t begin, std::size_t end) const {
    auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::size_t from = (begin + page - 1) / page * page, to = end / page * page;
    if (p_ && to > from) ::madvise(const_cast<char*>(p_) + from, to - from, MADV_DONTNEED);
  }

 private:
  const char* p_ = nullptr;
  std::size_t n_ = 0;
};

// The parsed header and the file's bytes (mapped).
struct SafeFile {
  std::string what;
  std::unique_ptr<Mapping> map;
  std::string_view data;
  std::size_t data_start = 0;
  Json header;
};

SafeFile open_safetensors(const std::string& path) {
  SafeFile f{cat("safe_load '", path, "'"), std::make_unique<Mapping>(path), {}, 0, {}};
  f.data = f.map->bytes();
  if (f.data.size() < 8)
    throw std::runtime_error(cat(f.what, ": the file has ", std::to_string(f.data.size()),
                                 " bytes, too short for the 8-byte header length"));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(f.data[static_cast<std::size_t>(i)]);
  if (n > f.data.size() - 8)
    throw std::runtime_error(cat(f.what, ": the header length ", std::to_string(n), " exceeds the ",
                                 std::to_string(f.data.size() - 8), " bytes after it (truncated file?)"));
  f.data_start = 8 + static_cast<std::size_t>(n);
  f.header = JsonReader(f.data.substr(8, static_cast<std::size_t>(n)), f.what).document();
  if (f.header.kind != Json::Object)
    throw std::runtime_error(cat(f.what, ": the header is not a JSON object"));
  return f;
}

// A non-negative integer written as such: no sign, fraction or exponent, and within 64 bits (a
// size like 1e30 or 10^30 is an error, not 0 or a truncation).
std::uint64_t as_count(const Json& v, const std::string& what, const std::string& field) {
  std::uint64_t x = 0;
  const char* end = v.text.data() + v.text.size();
  auto [ptr, ec] = std::from_chars(v.text.data(), end, x);
  if (v.kind != Json::Number || ptr != end || v.text.empty())
    throw std::runtime_error(cat(what, ": ", field, " must hold non-negative integers, not ",
                                 v.kind == Json::Number ? v.text : std::string("a non-number")));
  if (ec != std::errc())
    throw std::runtime_error(cat(what, ": ", field, " holds ", v.text, ", too large for 64 bits"));
  return x;
}

const Json* member(const Json& obj, const std::string& key) {
  for (std::size_t i = 0; i < obj.keys.size(); ++i)
    if (obj.keys[i] == key) return &obj.items[i];
  return nullptr;
}

// One tensor's header entry, checked: a known dtype, a shape whose byte size fits, and offsets
// inside the data section that hold exactly that many bytes.
struct SafeEntry {
  std::string name, what;
  const SafeDType* sd = nullptr;
  Dims dims;
  std::uint64_t begin = 0, end = 0;
};

SafeEntry parse_entry(const SafeFile& f, const std::string& name, const Json& info) {
  SafeEntry e;
  e.name = name, e.what = cat(f.what, ": tensor '", name, "'");
  const std::string& what = e.what;
  if (info.kind != Json::Object) throw std::runtime_error(cat(what, ": its entry is not an object"));
  const Json *dt = member(info, "dtype"), *shape = member(info, "shape"),
             *offs = member(info, "data_offsets");
  if (!dt || !shape || !offs)
    throw std::runtime_error(cat(what, ": needs \"dtype\", \"shape\" and \"data_offsets\""));
  if (dt->kind != Json::String) throw std::runtime_error(cat(what, ": \"dtype\" must be a string"));
  for (const SafeDType& s : kSafeDTypes)
    if (dt->text == s.name) e.sd = &s;
  if (!e.sd)
    throw std::runtime_error(
        cat(what, ": unknown dtype \"", dt->text, "\" (known: BOOL, I8, U8, I32, I64, F16, BF16, F32, F64)"));
  if (shape->kind != Json::Array || shape->items.size() > kMaxDims)
    throw std::runtime_error(
        cat(what, ": \"shape\" must be an array of at most ", std::to_string(kMaxDims), " sizes"));
  std::string written = "(";
  for (const Json& d : shape->items) written += cat(written.size() > 1 ? ", " : "", d.text);
  written += shape->items.size() == 1 ? ",)" : ")";
  // The byte size, overflow-checked (a shape of 2^61 F64 must not wrap to a small allocation); the
  // shape must also be one the library takes (check_shape).
  std::uint64_t nbytes = static_cast<std::uint64_t>(e.sd->dtype.itemsize);
  for (const Json& d : shape->items) {
    std::uint64_t x = as_count(d, what, "\"shape\"");
    if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_mul_overflow(nbytes, x, &nbytes))
      throw std::runtime_error(
          cat(what, ": the shape is too large: ", e.sd->name, " ", written, " needs 2^64 bytes or more"));
    e.dims.push_back(static_cast<std::int64_t>(x));
  }
  try {
    check_shape("safe_load", e.dims);
  } catch (const std::invalid_argument& err) { throw std::runtime_error(cat(what, ": ", err.what())); }
  if (offs->kind != Json::Array || offs->items.size() != 2)
    throw std::runtime_error(cat(what, ": \"data_offsets\" must be [begin, end]"));
  e.begin = as_count(offs->items[0], what, "\"data_offsets\"");
  e.end = as_count(offs->items[1], what, "\"data_offsets\"");
  std::uint64_t avail = f.data.size() - f.data_start;
  if (e.begin > e.end || e.end > avail)
    throw std::runtime_error(cat(what, ": data_offsets [", std::to_string(e.begin), ", ",
                                 std::to_string(e.end), "] out of range: the data section has ",
                                 std::to_string(avail), " bytes"));
  if (e.end - e.begin != nbytes)
    throw std::runtime_error(cat(what, ": data_offsets [", std::to_string(e.begin), ", ",
                                 std::to_string(e.end), "] hold ", std::to_string(e.end - e.begin),
                                 " bytes but ", e.sd->name, " ", to_string(e.dims), " needs ",
                                 std::to_string(nbytes)));
  return e;
}

// The format's rule: the tensors' byte ranges, in order, cover the data section exactly, with no
// overlap and no gap.
void check_layout(const SafeFile& f, std::vector<const SafeEntry*> entries) {
  std::sort(entries.begin(), entries.end(), [](const SafeEntry* a, const SafeEntry* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  std::uint64_t at = 0, avail = f.data.size() - f.data_start;
  const SafeEntry* prev = nullptr;
  for (const SafeEntry* e : entries) {
    if (e->begin < at)
      throw std::runtime_error(cat(e->what, ": data_offsets [", std::to_string(e->begin), ", ",
                                   std::to_string(e->end), "] overlap those of '", prev->name, "'"));
    if (e->begin > at)
      throw std::runtime_error(cat(e->what, ": data_offsets [", std::to_string(e->begin), ", ",
                                   std::to_string(e->end), "] leave the bytes [", std::to_string(at), ", ",
                                   std::to_string(e->begin), ") of the data section unused"));
    at = e->end, prev = e;
  }
  if (at != avail)
    throw std::runtime_error(cat(f.what, ": the tensors' data ends at byte ", std::to_string(at),
                                 " of the data section, which has ", std::to_string(avail), " bytes"));
}

Tensor load_tensor(const SafeFile& f, const SafeEntry& e) {
  std::size_t itemsize = static_cast<std::size_t>(e.sd->dtype.itemsize),
              nbytes = static_cast<std::size_t>(e.end - e.begin),
              at = f.data_start + static_cast<std::size_t>(e.begin);
  std::string_view bytes = f.data.substr(at, nbytes);
  if (e.sd->dtype == dtypes::bool_)
    for (std::size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i] != 0 && bytes[i] != 1)
        throw std::runtime_error(cat(e.what, ": BOOL element ", std::to_string(i), " is the byte ",
                                     std::to_string(static_cast<unsigned char>(bytes[i])), ", not 0 or 1"));
  auto raw = std::make_shared<RawMallocBuffer>(nbytes / itemsize, e.sd->dtype);
  if constexpr (std::endian::native == std::endian::little) {
    raw->copyin(bytes.data());  // straight from the mapped file
  } else {
    std::string swapped(bytes);
    to_little_endian(swapped, itemsize);
    raw->copyin(swapped.data());
  }
  f.map->release(at, at + nbytes);
  return Tensor(LazyBuffer::from_raw(raw, e.dims, "CPU")).to(Device::DEFAULT);
}

}  // namespace

void safe_save(const StateDict& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata) {
  std::string header = "{", data;
  if (!metadata.empty()) {
    write_string(header, "__metadata__");
    header += ":{";
    for (const auto& [k, v] : metadata) {
      if (header.back() != '{') header += ',';
      write_string(header, k), header += ':', write_string(header, v);
    }
    header += '}';
  }
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw std::invalid_argument(cat("safe_save '", path, "': '__metadata__' cannot name a tensor"));
    const SafeDType* sd = nullptr;
    for (const SafeDType& s : kSafeDTypes)
      if (s.dtype == t.dtype()) sd = &s;
    std::string bytes = tensor_bytes(t);
    if (header.size() > 1) header += ',';
    write_string(header, name);
    header += cat(":{\"dtype\":\"", sd->name, "\",\"shape\":[");
    for (std::size_t i = 0; i < t.shape().size(); ++i)
      header += cat(i ? "," : "", std::to_string(t.shape()[i]));
    header += cat("],\"data_offsets\":[", std::to_string(data.size()), ",",
                  std::to_string(data.size() + bytes.size()), "]}");
    data += bytes;
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference does
  std::string prefix(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) prefix[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error(cat("safe_save: cannot open '", path, "' for writing"));
  f << prefix << header << data;
  f.flush();
  if (!f) throw std::runtime_error(cat("safe_save: error writing '", path, "'"));
}

StateDict safe_load(const std::string& path) {
  SafeFile f = open_safetensors(path);
  // Every entry and the layout are checked before any data is copied.
  std::vector<SafeEntry> entries;
  std::set<std::string> names;
  for (std::size_t i = 0; i < f.header.keys.size(); ++i) {
    const std::string& name = f.header.keys[i];
    if (name == "__metadata__") continue;
    if (!names.insert(name).second)
      throw std::runtime_error(cat(f.what, ": the tensor '", name, "' is there twice"));
    entries.push_back(parse_entry(f, name, f.header.items[i]));
  }
  std::vector<const SafeEntry*> order;
  for (const SafeEntry& e : entries) order.push_back(&e);
  check_layout(f, order);
  StateDict out;
  for (const SafeEntry& e : entries) out.add(e.name, load_tensor(f, e));
  return out;
}

std::map<std::string, std::string> safe_load_metadata(const std::string& path) {
  SafeFile f = open_safetensors(path);
  std::map<std::string, std::string> out;
  const Json* m = member(f.header, "__metadata__");
  if (!m) return out;
  if (m->kind != Json::Object) throw std::runtime_error(cat(f.what, ": \"__metadata__\" must be an object"));
  for (std::size_t i = 0; i < m->keys.size(); ++i) {
    const std::string& k = m->keys[i];
    const Json& v = m->items[i];
    if (v.kind != Json::String)
      throw std::runtime_error(cat(f.what, ": \"__metadata__\" value of '", k, "' must be a string"));
    out[k] = v.text;
  }
  return out;
}

}  // namespace metagrad::nn
