// Tensor conversion: ONNX's TensorProto (initializers, Constant values, the backend tests' .pb files)
// to host copies, Tensors and StringTensors, and host copies to Tensors.
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "metagrad/onnx.hpp"
#include "ops.hpp"

namespace metagrad::onnx::detail {
namespace {

using TP = ::onnx::TensorProto;

float half_to_float(std::uint16_t h) {
  std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);  // subnormal (or zero)
  else if (exp == 31)
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// The tensor's bytes, little-endian in its dtype's layout: raw_data (viewed, not copied), an external
// file's range, or the typed fields repacked.
struct Bytes {
  std::string own;
  std::string_view view;
};

template <class T, class Src>
void pack(std::string& out, const Src& src) {
  out.resize(static_cast<std::size_t>(src.size()) * sizeof(T));
  for (int k = 0; k < src.size(); ++k) {
    T v = static_cast<T>(src.Get(k));
    std::memcpy(out.data() + static_cast<std::size_t>(k) * sizeof(T), &v, sizeof(T));
  }
}

Bytes bytes_of(const TP& p, DType dt, std::int64_t numel, const std::string& folder) {
  Bytes b;
  std::size_t want = static_cast<std::size_t>(numel) * static_cast<std::size_t>(dt.itemsize);
  std::string what = "tensor '" + p.name() + "'";
  if (p.data_location() == TP::EXTERNAL) {
    std::string location;
    std::int64_t offset = 0, length = -1;
    for (const auto& e : p.external_data()) {
      if (e.key() == "location")
        location = e.value();
      else if (e.key() == "offset")
        offset = std::stoll(e.value());
      else if (e.key() == "length")
        length = std::stoll(e.value());
    }
    std::string file = folder + "/" + location;
    std::ifstream in(file, std::ios::binary);
    if (location.empty() || !in) throw Error(what + ": cannot open its external data file '" + file + "'");
    in.seekg(offset);
    b.own.resize(length >= 0 ? static_cast<std::size_t>(length) : want);
    in.read(b.own.data(), static_cast<std::streamsize>(b.own.size()));
    if (static_cast<std::size_t>(in.gcount()) != b.own.size())
      throw Error(what + ": its external data file '" + file + "' ends before byte " +
                  std::to_string(offset + static_cast<std::int64_t>(b.own.size())));
    b.view = b.own;
  } else if (p.has_raw_data()) {
    b.view = p.raw_data();
  } else {
    switch (p.data_type()) {
      case TP::FLOAT:
        pack<float>(b.own, p.float_data());
        break;
      case TP::DOUBLE:
        pack<double>(b.own, p.double_data());
        break;
      case TP::INT64:
        pack<std::int64_t>(b.own, p.int64_data());
        break;
      case TP::UINT32:
        pack<std::uint32_t>(b.own, p.uint64_data());
        break;
      case TP::UINT64:
        pack<std::uint64_t>(b.own, p.uint64_data());
        break;
      case TP::INT32:
        pack<std::int32_t>(b.own, p.int32_data());
        break;
      case TP::INT16:
        pack<std::int16_t>(b.own, p.int32_data());
        break;
      case TP::UINT16:
      case TP::FLOAT16:
      case TP::BFLOAT16:
        pack<std::uint16_t>(b.own, p.int32_data());
        break;
      case TP::INT8:
        pack<std::int8_t>(b.own, p.int32_data());
        break;
      case TP::UINT8:
      case TP::BOOL:
        pack<std::uint8_t>(b.own, p.int32_data());
        break;
      default:
        break;
    }
    b.view = b.own;
  }
  if (b.view.size() != want)
    throw Error(what + " of shape " + shape_str(Dims(p.dims())) + " and type " + dt.name + " needs " +
                std::to_string(want) + " bytes of data, it has " + std::to_string(b.view.size()));
  return b;
}

std::pair<DType, Dims> header(const TP& p) {
  auto dt = dtype_of_onnx(p.data_type());
  if (!dt)
    throw Error("tensor '" + p.name() + "': element type " + onnx_type_name(p.data_type()) +
                " is not supported (metagrad has no such dtype)");
  Dims shape;
  if (p.dims_size() > static_cast<int>(kMaxDims))
    throw Error("tensor '" + p.name() + "' has " + std::to_string(p.dims_size()) + " dimensions; at most " +
                std::to_string(kMaxDims) + " are supported");
  std::int64_t bytes = dt->itemsize;
  for (auto d : p.dims()) {
    if (d < 0) throw Error("tensor '" + p.name() + "' has a negative dimension " + std::to_string(d));
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw Error("tensor '" + p.name() + "': its dimensions' product leaves int64");
    shape.push_back(d);
  }
  return {*dt, shape};
}

std::int64_t numel_of(const Dims& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::optional<DType> dtype_of_onnx(int t) {
  switch (t) {
    case TP::FLOAT:
      return dtypes::float32;
    case TP::UINT8:
      return dtypes::uint8;
    case TP::INT8:
      return dtypes::int8;
    case TP::UINT16:
      return dtypes::uint16;
    case TP::INT16:
      return dtypes::int16;
    case TP::INT32:
      return dtypes::int32;
    case TP::INT64:
      return dtypes::int64;
    case TP::BOOL:
      return dtypes::bool_;
    case TP::FLOAT16:
      return dtypes::float16;
    case TP::DOUBLE:
      return dtypes::float64;
    case TP::UINT32:
      return dtypes::uint32;
    case TP::UINT64:
      return dtypes::uint64;
    case TP::BFLOAT16:
      return dtypes::bfloat16;
    default:
      return std::nullopt;
  }
}

const char* onnx_type_name(int t) {
  return TP::DataType_IsValid(t) ? TP::DataType_Name(static_cast<TP::DataType>(t)).c_str() : "UNKNOWN";
}

std::string shape_str(const Dims& d) { return to_string(d); }

std::int64_t Host::int_at(std::int64_t k) const {
  if (!is_float()) return i[static_cast<std::size_t>(k)];
  double v = f[static_cast<std::size_t>(k)];
  if (std::isnan(v)) return 0;
  if (v >= 9.2e18) return std::numeric_limits<std::int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

std::vector<std::int64_t> Host::ints() const {
  if (!is_float()) return i;
  std::vector<std::int64_t> out;
  for (std::int64_t k = 0; k < numel(); ++k) out.push_back(int_at(k));
  return out;
}

std::vector<double> Host::doubles() const {
  if (is_float()) return f;
  return std::vector<double>(i.begin(), i.end());
}

void Host::push(double v) {
  if (is_float())
    f.push_back(v);
  else if (dtype == dtypes::bool_)
    i.push_back(v != 0);
  else
    i.push_back(std::isnan(v) ? 0 : static_cast<std::int64_t>(v));
}

Host Host::ints_of(std::vector<std::int64_t> v, DType dt) {
  Host h;
  h.dtype = dt;
  h.shape = {static_cast<std::int64_t>(v.size())};
  h.i = std::move(v);
  return h;
}

Host Host::scalar(double v, DType dt) {
  Host h;
  h.dtype = dt;
  h.push(v);
  return h;
}

Host Host::cast(DType to) const {
  Host h;
  h.dtype = to;
  h.shape = shape;
  if (!is_float() && !dtypes::is_float(to)) {
    h.i = i;
    if (to == dtypes::bool_)
      for (auto& v : h.i) v = v != 0;
    return h;
  }
  for (std::int64_t k = 0; k < numel(); ++k) h.push(at(k));
  if (to == dtypes::float32)
    for (auto& v : h.f) v = static_cast<float>(v);
  return h;
}

Tensor Host::tensor() const {
  if (dtype == dtypes::float64) return Tensor(f, shape);
  if (is_float()) {
    Tensor t(std::vector<float>(f.begin(), f.end()), shape);
    return dtype == dtypes::float32 ? t : t.cast(dtype);
  }
  if (dtype == dtypes::int64) return Tensor(i, shape);
  if (dtype == dtypes::int32) return Tensor(std::vector<std::int32_t>(i.begin(), i.end()), shape);
  if (dtype == dtypes::bool_) return Tensor(std::vector<bool>(i.begin(), i.end()), shape);
  if (dtype == dtypes::uint8) return Tensor(std::vector<std::uint8_t>(i.begin(), i.end()), shape);
  return Tensor(i, shape).cast(dtype);
}

Host host_from_proto(const TP& p, const std::string& folder) {
  auto [dt, shape] = header(p);
  Host h;
  h.dtype = dt;
  h.shape = shape;
  std::int64_t n = numel_of(shape);
  Bytes b = bytes_of(p, dt, n, folder);
  const char* d = b.view.data();
  for (std::int64_t k = 0; k < n; ++k) {
    const char* at = d + k * dt.itemsize;
    if (dt == dtypes::float32)
      h.f.push_back(load<float>(at));
    else if (dt == dtypes::float64)
      h.f.push_back(load<double>(at));
    else if (dt == dtypes::float16)
      h.f.push_back(half_to_float(load<std::uint16_t>(at)));
    else if (dt == dtypes::bfloat16)
      h.f.push_back(std::bit_cast<float>(std::uint32_t{load<std::uint16_t>(at)} << 16));
    else if (dt == dtypes::int64 || dt == dtypes::uint64)
      h.i.push_back(load<std::int64_t>(at));
    else if (dt == dtypes::int32)
      h.i.push_back(load<std::int32_t>(at));
    else if (dt == dtypes::uint32)
      h.i.push_back(load<std::uint32_t>(at));
    else if (dt == dtypes::int16)
      h.i.push_back(load<std::int16_t>(at));
    else if (dt == dtypes::uint16)
      h.i.push_back(load<std::uint16_t>(at));
    else if (dt == dtypes::int8)
      h.i.push_back(load<std::int8_t>(at));
    else
      h.i.push_back(load<std::uint8_t>(at));  // uint8, bool
  }
  return h;
}

StringTensor strings_from_proto(const TP& p) {
  StringTensor s;
  for (auto d : p.dims()) {
    if (d < 0) throw Error("tensor '" + p.name() + "' has a negative dimension " + std::to_string(d));
    s.shape.push_back(d);
  }
  if (p.data_location() == TP::EXTERNAL)
    throw Error("tensor '" + p.name() + "': strings in an external data file are not supported");
  std::int64_t n = numel_of(s.shape);
  if (p.string_data_size() != n)
    throw Error("tensor '" + p.name() + "' of shape " + shape_str(s.shape) + " and type STRING needs " +
                std::to_string(n) + " strings, it has " + std::to_string(p.string_data_size()));
  s.data.assign(p.string_data().begin(), p.string_data().end());
  return s;
}

Value constant_from_proto(const TP& p, const std::string& folder) {
  Value v;
  if (p.data_type() == TP::STRING) {
    v = Value(strings_from_proto(p));
  } else {
    v = Value(tensor_from_proto(p, folder));
    if (p.data_type() != TP::FLOAT || v.t->numel() <= kHostLimit)
      v.h = std::make_shared<const Host>(host_from_proto(p, folder));
  }
  v.constant = true;
  return v;
}

Tensor tensor_from_proto(const TP& p, const std::string& folder) {
  auto [dt, shape] = header(p);
  Bytes b = bytes_of(p, dt, numel_of(shape), folder);
  auto raw = std::make_shared<RawMallocBuffer>(static_cast<std::size_t>(numel_of(shape)), dt);
  raw->copyin(b.view.data());  // from the parsed message's own bytes
  return Tensor(LazyBuffer::from_raw(raw, shape, "CPU"));
}

}  // namespace metagrad::onnx::detail

namespace metagrad::onnx {

AnyTensor read_any(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  ::onnx::TensorProto p;
  if (!p.ParseFromString(ss.str())) throw Error(path + ": not a serialized onnx.TensorProto");
  auto slash = path.find_last_of('/');
  try {
    if (p.data_type() == ::onnx::TensorProto::STRING) return detail::strings_from_proto(p);
    return detail::tensor_from_proto(p, slash == std::string::npos ? "." : path.substr(0, slash))
        .to(Device::DEFAULT);
  } catch (const Error& e) { throw Error(path + ": " + e.what()); }
}

Tensor read_tensor(const std::string& path) {
  auto v = read_any(path);
  if (auto* t = std::get_if<Tensor>(&v)) return std::move(*t);
  throw Error(path + ": the tensor holds strings, which a Tensor cannot: read it with read_any");
}

}  // namespace metagrad::onnx
