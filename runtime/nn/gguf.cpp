// The GGUF reader (nn/gguf.hpp): a bounds-checked cursor over the mapped file, so that every read
// past the end or bad count becomes an error naming what was being read.
#include "metagrad/nn/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "metagrad/cpu/quant.hpp"

namespace metagrad::nn {

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32

struct Cursor {
  const char* p;
  std::size_t size, at = 0;
  const std::string& file;
  std::string what;  // what is being read, for errors

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("gguf: '" + file + "': " + what + ": " + why);
  }
  const char* take(std::size_t n) {
    if (n > size - at)
      fail("truncated (needs " + std::to_string(n) + " bytes at offset " + std::to_string(at) +
           ", the file has " + std::to_string(size) + ")");
    const char* r = p + at;
    at += n;
    return r;
  }
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string string() {
    const auto n = get<std::uint64_t>();
    if (n > size - at) fail("a string of " + std::to_string(n) + " bytes runs past the file's end");
    return {take(n), static_cast<std::size_t>(n)};
  }
  GgufValue value(std::uint32_t type, int depth) {
    GgufValue v;
    v.type = type;
    using K = GgufValue::Kind;
    switch (type) {
      case 0:
        v.kind = K::unsigned_integer, v.u = get<std::uint8_t>();
        break;
      case 1:
        v.kind = K::integer, v.i = get<std::int8_t>();
        break;
      case 2:
        v.kind = K::unsigned_integer, v.u = get<std::uint16_t>();
        break;
      case 3:
        v.kind = K::integer, v.i = get<std::int16_t>();
        break;
      case 4:
        v.kind = K::unsigned_integer, v.u = get<std::uint32_t>();
        break;
      case 5:
        v.kind = K::integer, v.i = get<std::int32_t>();
        break;
      case 6:
        v.kind = K::floating, v.f = get<float>();
        break;
      case 7:
        v.kind = K::boolean, v.b = get<std::uint8_t>() != 0;
        break;
      case 8:
        v.kind = K::string, v.s = string();
        break;
      case 9: {
        if (depth > 4) fail("arrays nested too deep");
        v.kind = K::array;
        const auto elem = get<std::uint32_t>();
        const auto n = get<std::uint64_t>();
        if (n > size - at) fail("an array of " + std::to_string(n) + " values runs past the file's end");
        v.array.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t k = 0; k < n; ++k) v.array.push_back(value(elem, depth + 1));
        break;
      }
      case 10:
        v.kind = K::unsigned_integer, v.u = get<std::uint64_t>();
        break;
      case 11:
        v.kind = K::integer, v.i = get<std::int64_t>();
        break;
      case 12:
        v.kind = K::floating, v.f = get<double>();
        break;
      default:
        fail("unknown value type " + std::to_string(type));
    }
    return v;
  }
};

// Bytes of n elements of type t (n a multiple of the block for the quantised ones), or 0 if t is
// not one this reader knows.
std::size_t type_bytes(GgufType t, std::int64_t n) {
  const auto un = static_cast<std::size_t>(n);
  switch (t) {
    case GgufType::f32:
      return 4 * un;
    case GgufType::f16:
    case GgufType::bf16:
      return 2 * un;
    case GgufType::q8_0:
      return un / cpu::kQuantBlock * sizeof(cpu::BlockQ8_0);
    case GgufType::q4_0:
      return un / cpu::kQuantBlock * sizeof(cpu::BlockQ4_0);
  }
  return 0;
}

}  // namespace

std::string to_string(GgufType t) {
  switch (t) {
    case GgufType::f32:
      return "F32";
    case GgufType::f16:
      return "F16";
    case GgufType::bf16:
      return "BF16";
    case GgufType::q8_0:
      return "Q8_0";
    case GgufType::q4_0:
      return "Q4_0";
  }
  return "type " + std::to_string(static_cast<std::uint32_t>(t));
}

std::int64_t GgufTensor::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("gguf: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("gguf: '" + path + "' is not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  void* p = size_ ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) throw std::runtime_error("gguf: cannot map '" + path + "': " + std::strerror(err));
  map_ = static_cast<const char*>(p);
  try {
    Cursor c{map_, size_, 0, path_, "header"};
    if (c.get<std::uint32_t>() != kMagic) c.fail("not a GGUF file (no 'GGUF' magic)");
    version_ = c.get<std::uint32_t>();
    if (version_ != 3) c.fail("version " + std::to_string(version_) + ", this reader reads 3");
    const auto n_tensors = c.get<std::uint64_t>(), n_kv = c.get<std::uint64_t>();
    if (n_tensors > size_ || n_kv > size_) c.fail("counts larger than the file");
    for (std::uint64_t k = 0; k < n_kv; ++k) {
      c.what = "metadata key " + std::to_string(k);
      std::string key = c.string();
      c.what = "metadata '" + key + "'";
      metadata_[key] = c.value(c.get<std::uint32_t>(), 0);
    }
    if (auto it = metadata_.find("general.alignment"); it != metadata_.end()) {
      const GgufValue& v = it->second;
      alignment_ = v.kind == GgufValue::Kind::unsigned_integer ? v.u : 0;
      if (alignment_ == 0 || (alignment_ & (alignment_ - 1)))
        throw std::runtime_error("gguf: '" + path + "': general.alignment must be a power of two");
    }
    std::vector<std::uint64_t> offsets;
    for (std::uint64_t t = 0; t < n_tensors; ++t) {
      c.what = "tensor info " + std::to_string(t);
      GgufTensor x;
      x.name = c.string();
      c.what = "tensor '" + x.name + "'";
      const auto n_dims = c.get<std::uint32_t>();
      if (n_dims == 0 || n_dims > 4) c.fail(std::to_string(n_dims) + " dimensions (1 to 4)");
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        const auto v = c.get<std::uint64_t>();
        if (v == 0 || v > (std::uint64_t{1} << 40)) c.fail("dimension " + std::to_string(v));
        x.dims.push_back(static_cast<std::int64_t>(v));
      }
      x.type = static_cast<GgufType>(c.get<std::uint32_t>());
      offsets.push_back(c.get<std::uint64_t>());
      if (x.elements() > (std::int64_t{1} << 40)) c.fail("too many elements");
      x.bytes = type_bytes(x.type, x.elements());
      if (x.bytes == 0) c.fail("type " + to_string(x.type) + " is not one of F32, F16, BF16, Q8_0, Q4_0");
      if ((x.type == GgufType::q8_0 || x.type == GgufType::q4_0) && x.dims[0] % cpu::kQuantBlock)
        c.fail(to_string(x.type) + " rows of " + std::to_string(x.dims[0]) + " values (a multiple of 32)");
      tensors_.push_back(std::move(x));
    }
    const std::uint64_t data = (c.at + alignment_ - 1) / alignment_ * alignment_;
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      GgufTensor& x = tensors_[t];
      c.what = "tensor '" + x.name + "' (" + to_string(x.type) + ")";
      if (offsets[t] % alignment_) c.fail("data offset " + std::to_string(offsets[t]) + " is not aligned");
      if (offsets[t] > size_ || data + offsets[t] > size_ || x.bytes > size_ - data - offsets[t])
        c.fail("data [" + std::to_string(data + offsets[t]) + ", +" + std::to_string(x.bytes) +
               ") runs past the file's end (" + std::to_string(size_) + " bytes): truncated");
      x.data = map_ + data + offsets[t];
    }
  } catch (...) {
    if (map_) ::munmap(const_cast<char*>(map_), size_);
    throw;
  }
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(const_cast<char*>(map_), size_);
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  for (const GgufTensor& t : tensors_)
    if (t.name == name) return t;
  throw std::out_of_range("gguf: '" + path_ + "' has no tensor '" + name + "'");
}

}  // namespace metagrad::nn
