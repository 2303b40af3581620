// float16 and bfloat16: storage of 16 bits, computing in float32, on every device. Conversions are
// checked against a reference written here from the IEEE 754 definition (a value's exponent and
// significand, rounded to nearest with ties to even), independent of the library's bit tricks: all
// 65536 patterns to float, and to 16 bits from ties, subnormals, overflow, inf, NaN and random
// floats, on the host and through each device's casts, loads and stores. safetensors F16 and BF16
// load and save, and the loader maps the file rather than reading it whole.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include "child_process.hpp"
#include "device_scope.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;
namespace fs = std::filesystem;

namespace {

// A binary IEEE format of 16 bits: 1 sign bit, `e` exponent bits, `m` fraction bits.
struct Format {
  int e, m;
  int bias() const { return (1 << (e - 1)) - 1; }
  int emax() const { return bias(); }
  int emin() const { return 1 - bias(); }
};
constexpr Format kHalf{5, 10}, kBf16{8, 7};

// The value of a pattern, from the definition: (-1)^s 2^(E-bias) (1 + f/2^m), subnormals
// 2^emin (f/2^m), all-ones exponent inf (f = 0) or NaN.
double ref_value(Format F, std::uint16_t bits) {
  int s = bits >> 15, E = (bits >> F.m) & ((1 << F.e) - 1);
  double f = bits & ((1 << F.m) - 1), sign = s ? -1 : 1;
  if (E == (1 << F.e) - 1) return f == 0 ? sign * INFINITY : NAN;
  if (E == 0) return sign * std::ldexp(f, F.emin() - F.m);
  return sign * std::ldexp(1 + std::ldexp(f, -F.m), E - F.bias());
}

// The pattern nearest a float, ties to the even significand; beyond the largest finite value (by
// half its unit or more) inf. NaN is any NaN pattern (the caller checks only that).
std::uint16_t ref_bits(Format F, float x) {
  std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  std::uint16_t inf = static_cast<std::uint16_t>(sign | (((1 << F.e) - 1) << F.m));
  if (std::isnan(x)) return static_cast<std::uint16_t>(inf | (1 << (F.m - 1)));
  double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return inf;
  if (a == 0) return sign;
  int ex = 0;
  std::frexp(a, &ex);  // a = r 2^ex, r in [0.5, 1)
  int E = std::max(ex - 1, F.emin());
  double n = std::ldexp(a, F.m - E);  // a in units of the significand's last place: exact
  double r = std::floor(n), rest = n - r;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(r, 2) == 1)) r += 1;
  if (r >= std::ldexp(1, F.m + 1)) r /= 2, E += 1;  // rounded up to the next power of two
  if (E > F.emax()) return inf;
  if (r < std::ldexp(1, F.m)) return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(r));
  return static_cast<std::uint16_t>(sign | ((E + F.bias()) << F.m) |
                                    static_cast<std::uint16_t>(r - std::ldexp(1, F.m)));
}

bool is_nan_bits(Format F, std::uint16_t b) {
  return ((b >> F.m) & ((1 << F.e) - 1)) == (1 << F.e) - 1 && (b & ((1 << F.m) - 1)) != 0;
}

// Floats that test rounding: every pattern's value, the midpoints between neighbours (ties), a
// quarter either side of them, float's extremes and subnormals, and random floats of every size.
std::vector<float> probes(Format F, std::size_t random) {
  std::vector<float> out = {0.f,
                            -0.f,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            -NAN,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(),
                            1e-45f,
                            65504.f,
                            65519.99f,
                            65520.f};
  for (std::uint32_t b = 0; b < 0x7fff; b += 7) {  // positive finite patterns, and their negatives
    double v = ref_value(F, static_cast<std::uint16_t>(b)),
           w = ref_value(F, static_cast<std::uint16_t>(b + 1));
    if (!std::isfinite(w)) continue;
    for (double t : {v, (v + w) / 2, v + (w - v) / 4, v + 3 * (w - v) / 4}) {
      out.push_back(static_cast<float>(t));
      out.push_back(static_cast<float>(-t));
    }
  }
  std::mt19937 gen(static_cast<unsigned>(F.m));
  for (std::size_t i = 0; i < random; ++i)
    out.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen())));
  return out;
}

template <class T>
std::vector<std::uint16_t> bits_of(const std::vector<T>& v) {
  std::vector<std::uint16_t> out;
  for (const T& x : v) out.push_back(x.bits);
  return out;
}

// Checks 16-bit results `got` against the reference rounding of `in`.
// A conversion keeps a NaN's sign; arithmetic need not (IEEE 754 leaves the sign of a NaN result
// open, and a GPU's multiply returns one canonical NaN): `nan_sign` says which `got` comes from.
void check_rounding(Format F, const std::vector<float>& in, const std::vector<std::uint16_t>& got,
                    const char* what, bool nan_sign = true) {
  REQUIRE(got.size() == in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::uint16_t want = ref_bits(F, in[i]);
    INFO(what << ": " << in[i] << " (float bits " << std::hex << std::bit_cast<std::uint32_t>(in[i])
              << ") gave " << got[i] << ", the reference " << want);
    if (std::isnan(in[i])) {
      REQUIRE(is_nan_bits(F, got[i]));
      if (nan_sign) REQUIRE((got[i] >> 15) == (want >> 15));  // the sign stays
    } else {
      REQUIRE(got[i] == want);
    }
  }
}

}  // namespace

TEST_CASE("float16 and bfloat16 host conversions match the IEEE definition", "[creation]") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    auto bits = static_cast<std::uint16_t>(b);
    INFO(std::hex << b);
    double h = ref_value(kHalf, bits), g = ref_value(kBf16, bits);
    float hf = half::to_float(bits), gf = bf16::to_float(bits);
    REQUIRE((std::isnan(h) ? std::isnan(hf) : static_cast<double>(hf) == h));
    REQUIRE((std::isnan(g) ? std::isnan(gf) : static_cast<double>(gf) == g));
    if (!std::isnan(h)) REQUIRE(half::from_float(hf) == bits);  // every value round trips
    if (!std::isnan(g)) REQUIRE(bf16::from_float(gf) == bits);
  }
  for (Format F : {kHalf, kBf16}) {
    std::vector<float> in = probes(F, 20000);
    std::vector<std::uint16_t> got;
    for (float x : in) got.push_back(F.m == 10 ? half::from_float(x) : bf16::from_float(x));
    check_rounding(F, in, got, F.m == 10 ? "half::from_float" : "bf16::from_float");
  }
  // The rules the reference encodes, spelled out: ties go to the even neighbour, overflow to inf.
  REQUIRE(bf16::from_float(1.f + 0x1p-8f) == 0x3f80);      // halfway 1 and 1+2^-7: even is 1
  REQUIRE(bf16::from_float(1.f + 3 * 0x1p-8f) == 0x3f82);  // halfway up from odd 0x3f81
  REQUIRE(bf16::from_float(std::numeric_limits<float>::max()) == 0x7f80);
  REQUIRE(half::from_float(65520.f) == 0x7c00);    // halfway 65504 and 2^16: inf
  REQUIRE(bf16::from_float(0x1p-133f) == 0x0001);  // bfloat16's smallest subnormal
  REQUIRE(promote_types(dtypes::float16, dtypes::bfloat16) == dtypes::float32);
  REQUIRE(promote_types(dtypes::bfloat16, dtypes::int32) == dtypes::bfloat16);
  REQUIRE(promote_types(dtypes::bfloat16, dtypes::float32) == dtypes::float32);
}

TEST_CASE("float16 and bfloat16 on the device: casts both ways, loads and stores, float32 compute",
          "[creation]") {
  for (auto [F, dt] : {std::pair{kHalf, dtypes::float16}, std::pair{kBf16, dtypes::bfloat16}}) {
    INFO(dt.name << " on " << Device::DEFAULT);
    std::vector<float> in = probes(F, 3000);
    auto n = static_cast<std::int64_t>(in.size());
    Tensor x(in, {n});
    Tensor y = x.cast(dt);
    REQUIRE(y.dtype() == dt);
    std::vector<std::uint16_t> got =
        dt == dtypes::float16 ? bits_of(y.to_vector<half>()) : bits_of(y.to_vector<bf16>());
    check_rounding(F, in, got, "cast from float32");
    // Back to float32: exactly the value each pattern stands for.
    std::vector<float> back = y.cast(dtypes::float32).to_vector<float>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      double want = ref_value(F, got[i]);
      INFO(i << ": bits " << std::hex << got[i]);
      REQUIRE((std::isnan(want) ? std::isnan(back[i]) : static_cast<double>(back[i]) == want));
    }
    // Loaded into float, computed in float, stored rounded: (y * 3 + 1) is round(float(y*3) + 1).
    std::vector<std::uint16_t> z = dt == dtypes::float16 ? bits_of((y * 3 + 1).to_vector<half>())
                                                         : bits_of((y * 3 + 1).to_vector<bf16>());
    std::vector<float> computed;
    for (std::size_t i = 0; i < in.size(); ++i) computed.push_back(back[i] * 3.f + 1.f);
    check_rounding(F, computed, z, "y * 3 + 1", false);
    // A cast inside a kernel rounds there: x.cast(dt) * 1 read back as float32 is the rounded value.
    std::vector<float> inside = (x.cast(dt).cast(dtypes::float32) - x).to_vector<float>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      double want = ref_value(F, got[i]) - static_cast<double>(in[i]);
      if (!std::isfinite(want) || std::isnan(want)) continue;
      INFO(i << ": " << in[i]);
      REQUIRE(static_cast<double>(inside[i]) == static_cast<double>(static_cast<float>(want)));
    }
  }
  // Made from 16-bit host values, summed and averaged in float32.
  std::vector<bf16> hb{bf16(1.5f), bf16(-2.f), bf16(256.f), bf16(0.0078125f)};
  Tensor b(hb, {4});
  REQUIRE(b.dtype() == dtypes::bfloat16);
  REQUIRE(b.sum().item<float>() == static_cast<float>(bf16(1.5f - 2.f + 256.f + 0.0078125f)));  // 256
  REQUIRE(b.mean().dtype() == dtypes::bfloat16);
  REQUIRE(b.mean().item<float>() == static_cast<float>(bf16((1.5f - 2.f + 256.f + 0.0078125f) / 4)));
}

namespace {

struct TempPath {
  test::TempDir dir{"metagrad_narrow"};
  std::string path(const std::string& name) const { return (dir.path / name).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A safetensors file: the 8-byte little-endian header length, the header, the data.
std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string le16(const std::vector<std::uint16_t>& v) {
  std::string out;
  for (std::uint16_t x : v) out += static_cast<char>(x & 0xff), out += static_cast<char>(x >> 8);
  return out;
}

}  // namespace

TEST_CASE("safetensors: F16 and BF16 load and save, bit for bit", "[nn]") {
  TempPath tmp;
  std::vector<float> in = {1.f, -2.5f, 3.14159f, 1e-40f, 65520.f, -0.f, INFINITY, 1e30f};
  std::vector<std::uint16_t> h, g;
  for (float x : in) h.push_back(ref_bits(kHalf, x)), g.push_back(ref_bits(kBf16, x));
  // A file another tool wrote: values given as bits.
  std::string file = tmp.path("foreign.safetensors");
  std::string header = R"({"g":{"dtype":"BF16","shape":[2,4],"data_offsets":[0,16]},)"
                       R"("h":{"dtype":"F16","shape":[8],"data_offsets":[16,32]}})";
  std::ofstream(file, std::ios::binary) << safetensors_file(header, le16(g) + le16(h));
  nn::StateDict sd = nn::safe_load(file);
  REQUIRE(sd.at("g").dtype() == dtypes::bfloat16);
  REQUIRE(sd.at("g").shape() == Dims{2, 4});
  REQUIRE(sd.at("h").dtype() == dtypes::float16);
  REQUIRE(bits_of(sd.at("g").to_vector<bf16>()) == g);
  REQUIRE(bits_of(sd.at("h").to_vector<half>()) == h);
  std::vector<float> gv = sd.at("g").cast(dtypes::float32).to_vector<float>();
  for (std::size_t i = 0; i < in.size(); ++i) REQUIRE(static_cast<double>(gv[i]) == ref_value(kBf16, g[i]));
  // Saved from tensors computed on the device: the same bytes.
  std::string saved = tmp.path("saved.safetensors");
  Tensor x(in, {8});
  nn::safe_save({{"g", x.cast(dtypes::bfloat16).reshape({2, 4})}, {"h", x.cast(dtypes::float16)}}, saved);
  std::string bytes = slurp(saved);
  REQUIRE(bytes.find(R"("dtype":"BF16")") != std::string::npos);
  REQUIRE(bytes.substr(bytes.size() - 32) == le16(g) + le16(h));
  nn::StateDict back = nn::safe_load(saved);
  REQUIRE(bits_of(back.at("g").to_vector<bf16>()) == g);
}

// The child loads a large file's metadata, then all of it, and reports its peak memory growth.
TEST_CASE("safetensors mmap child process", "[.][safetensors]") {
  const char* file = std::getenv("METAGRAD_TEST_CHILD_FILE");
  if (!file) return;
  // The peak resident set of this program image (VmHWM): getrusage's ru_maxrss carries the forking
  // parent's peak across execve, so a child of a long test run would see no growth at all.
  auto peak_kb = [] {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return -1L;
  };
  long before = peak_kb();
  REQUIRE(nn::safe_load_metadata(file).at("note") == "big");
  long after_meta = peak_kb();
  nn::StateDict sd = nn::safe_load(file);
  long after_load = peak_kb();
  REQUIRE(sd.keys().size() == 4);
  for (const auto& [name, t] : sd) REQUIRE(t.sum().item<float>() == 0.f);  // after measuring
  std::ofstream(std::getenv("METAGRAD_TEST_CHILD_OUT"))
      << after_meta - before << " " << after_load - before << "\n";
}

TEST_CASE("safetensors: the file is mapped, not read whole", "[safetensors]") {
  TempPath tmp;
  // 4 tensors of 32 MB of zeros: a sparse file, written in no time.
  constexpr std::int64_t kFloats = 8 << 20;
  std::string header = R"({"__metadata__":{"note":"big"})";
  for (int i = 0; i < 4; ++i)
    header += ",\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[)" + std::to_string(kFloats) +
              R"(],"data_offsets":[)" + std::to_string(i * kFloats * 4) + "," +
              std::to_string((i + 1) * kFloats * 4) + "]}";
  header += "}";
  std::string file = tmp.path("big.safetensors"), out = tmp.path("peak");
  {
    std::ofstream f(file, std::ios::binary);
    f << safetensors_file(header, "");
  }
  fs::resize_file(file, fs::file_size(file) + 4 * kFloats * 4);
  pid_t pid =
      test::spawn_child("safetensors mmap child process",
                        {"METAGRAD_TEST_CHILD_FILE=" + file, "METAGRAD_TEST_CHILD_OUT=" + out, "DEVICE=CPU"});
  REQUIRE(pid > 0);
  REQUIRE(test::wait_for(pid) == 0);
  long meta_kb = -1, load_kb = -1;
  std::ifstream(out) >> meta_kb >> load_kb;
  INFO("peak growth: " << meta_kb << " kB reading the metadata, " << load_kb << " kB loading 128 MB");
  REQUIRE(meta_kb >= 0);
  REQUIRE(meta_kb < 8 * 1024);  // read whole, it would be 128 MB
  // The tensors and a tensor's pages of the file (about 160 MB); read whole, 256 MB or more. The margin
  // is for sanitizer builds (shadow memory).
  REQUIRE(load_kb < 128 * 1024 * 7 / 4);
  REQUIRE(load_kb >= 128 * 1024 * 9 / 10);  // (the tensors are there)
}
