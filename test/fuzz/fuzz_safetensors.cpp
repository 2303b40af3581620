// Fuzzer for the safetensors loader (nn::safe_load): valid files written here, then mutated, byte
// by byte and field by field (numbers swapped for sizes near 2^32, 2^61, 2^64 and beyond, offsets
// moved, dtypes changed, BOOL bytes set). Every input must either load, with each tensor's bytes
// matching its shape, or be rejected with std::runtime_error naming the file; anything else (another
// exception, a crash, a sanitizer report) fails. The regression corpus holds the bad files issue 13
// found, each with the error it must give.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>

#include "fuzz_common.hpp"
#include "metagrad/nn/state.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;

namespace {

std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}
std::string file_of(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

struct Dt {
  const char* name;
  int itemsize;
};
const std::vector<Dt> kDts = {{"BOOL", 1}, {"I8", 1},  {"U8", 1},  {"I32", 4},
                              {"I64", 8},  {"F16", 2}, {"F32", 4}, {"F64", 8}};

// A valid file: up to three tensors of small shapes, laid out back to back (in a shuffled key
// order), with random bytes (0/1 for BOOL). The header is returned apart so fields can be mutated.
struct Parts {
  std::string header, data;
};
Parts valid_file(fuzz::Rng& r) {
  Parts p;
  p.header = "{";
  bool meta = r.chance(20);
  if (meta) p.header += R"("__metadata__":{"format":"pt"})";
  std::int64_t n = r.in(0, 3);
  for (std::int64_t t = 0; t < n; ++t) {
    const Dt& dt = r.pick(kDts);
    std::string shape = "[";
    std::int64_t numel = 1;
    for (std::int64_t d = r.in(0, 3); d-- > 0;) {
      std::int64_t s = r.in(0, 4);
      numel *= s;
      shape += std::to_string(s) + (d ? "," : "");
    }
    shape += "]";
    std::size_t begin = p.data.size();
    for (std::int64_t i = 0; i < numel * dt.itemsize; ++i)
      p.data.push_back(std::strcmp(dt.name, "BOOL") == 0 ? static_cast<char>(r.in(0, 1))
                                                         : static_cast<char>(r.next()));
    if (t || meta) p.header += ",";
    p.header += "\"t" + std::to_string(t) + "\":{\"dtype\":\"" + dt.name + "\",\"shape\":" + shape +
                ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(p.data.size()) + "]}";
  }
  p.header += "}";
  return p;
}

const std::vector<std::string> kNumbers = {
    "0",
    "1",
    "2",
    "3",
    "7",
    "8",
    "-1",
    "1.5",
    "1e30",
    "1E3",
    "4294967295",
    "4294967296",
    "2305843009213693952",  // 2^61: times 8 bytes wraps to 0
    "4611686018427387904",  // 2^62
    "9223372036854775807",
    "9223372036854775808",  // int64 max, + 1
    "18446744073709551615",
    "18446744073709551616",             // uint64 max, + 1
    "1000000000000000000000000000000",  // 10^30: out of range for from_chars
    "00",
    "-0",
    ""};

// Replaces the k-th number (a run of digits, signs, dots, exponents) in the header.
void replace_number(fuzz::Rng& r, std::string& h) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (std::size_t i = 0; i < h.size();) {
    if ((h[i] >= '0' && h[i] <= '9') && (i == 0 || h[i - 1] == '[' || h[i - 1] == ',' || h[i - 1] == ':')) {
      std::size_t j = i;
      while (j < h.size() && std::strchr("+-.eE0123456789", h[j])) ++j;
      spans.emplace_back(i, j);
      i = j;
    } else {
      ++i;
    }
  }
  if (spans.empty()) return;
  auto [a, b] = r.pick(spans);
  h.replace(a, b - a, r.pick(kNumbers));
}

void mutate(fuzz::Rng& r, Parts& p) {
  switch (r.in(0, 6)) {
    case 0:
    case 1:
      replace_number(r, p.header);
      break;
    case 2: {  // another dtype
      for (const Dt& d : kDts) {
        std::size_t at = p.header.find(std::string("\"") + d.name + "\"");
        if (at != std::string::npos && r.chance(50)) {
          p.header.replace(at + 1, std::strlen(d.name), r.pick(kDts).name);
          break;
        }
      }
      break;
    }
    case 3:  // a byte of the data, e.g. a BOOL that is neither 0 nor 1
      if (!p.data.empty())
        p.data[static_cast<std::size_t>(r.in(0, static_cast<std::int64_t>(p.data.size()) - 1))] =
            static_cast<char>(r.in(0, 3));
      break;
    case 4:
      fuzz::mutate_bytes(r, p.data);
      break;
    default:
      fuzz::mutate_bytes(r, p.header);
  }
}

// Loads `bytes`; true if it loaded. Anything but success or std::runtime_error naming the file fails.
bool load_checked(const fuzz::TempFile& file, const std::string& bytes, const std::string& context) {
  file.write(bytes);
  return fuzz::loads_or_rejects(file.path, context, [&] {
    nn::StateDict sd = nn::safe_load(file.path);
    for (const auto& [name, t] : sd) {
      INFO(context << "\nloaded '" << name << "' " << to_string(t));
      REQUIRE(t.numel() * t.dtype().itemsize <= static_cast<std::int64_t>(bytes.size()));
      (void)t.to_vector<double>();  // reads every element
    }
  });
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (c >= 32 && c < 127) ? std::string(1, c) : "\\x" + std::to_string(static_cast<unsigned char>(c));
  return out;
}

}  // namespace

TEST_CASE("fuzz: safetensors regression corpus (issue 13)", "[fuzz_safetensors]") {
  fuzz::TempFile file("corpus.safetensors");
  auto rejects = [&](const std::string& header, const std::string& data, const std::string& why) {
    file.write(file_of(header, data));
    INFO(header);
    REQUIRE_THROWS_AS(nn::safe_load(file.path), std::runtime_error);
    REQUIRE_THROWS_WITH(nn::safe_load(file.path), Contains(file.path) && Contains(why));
  };
  // numel * itemsize wrapped: 2^61 F64 is 2^64 bytes, which wrapped to 0 and allocated 1 byte
  rejects(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", "",
          "the shape is too large");
  rejects(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", "",
          "the shape is too large");
  rejects(R"({"a":{"dtype":"I8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "",
          "the shape is too large");
  // sizes that are not 64-bit integers: from_chars errors were ignored and [1e30]-like sizes read 0
  rejects(R"({"a":{"dtype":"F32","shape":[1000000000000000000000000000000],"data_offsets":[0,0]}})", "",
          "too large for 64 bits");
  rejects(R"({"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,0]}})", "", "non-negative integers");
  rejects(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,18446744073709551616]}})", "",
          "too large for 64 bits");
  // overlapping tensors, gaps and unused bytes: the format forbids them
  std::string eight(8, '\0');
  rejects(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      eight, "overlap");
  rejects(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      eight, "overlap");
  rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "unused");
  rejects(
      R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"I8","shape":[1],"data_offsets":[3,4]}})",
      std::string(4, '\0'), "unused");
  rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight, "ends at byte 4");
  // BOOL bytes other than 0 and 1
  rejects(R"({"a":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3),
          "BOOL element 2 is the byte 2");
  rejects(R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", "\xff", "not 0 or 1");

  // and what stays valid: empty tensors anywhere in the order, keys out of offset order
  file.write(file_of(
      R"({"e":{"dtype":"F64","shape":[0,3],"data_offsets":[4,4]},"b":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})",
      std::string("\x01\x00\x00\x01", 4)));
  nn::StateDict sd = nn::safe_load(file.path);
  REQUIRE(sd.at("b").to_vector<double>() == std::vector<double>{1, 0, 0, 1});
  REQUIRE(sd.at("e").shape() == Dims{0, 3});
}

TEST_CASE("fuzz: safetensors loader, mutated files", "[fuzz_safetensors]") {
  const std::uint64_t seed = fuzz::seed(0x5afe7e45);
  const long n = fuzz::inputs(4000);
  fuzz::Rng r(seed);
  fuzz::TempFile file("mutated.safetensors");
  long loaded = 0, rejected = 0;
  for (long i = 0; i < n; ++i) {
    Parts p = valid_file(r);
    bool pristine = r.chance(5);
    if (!pristine)
      for (std::int64_t k = r.in(1, 3); k-- > 0;) mutate(r, p);
    std::string bytes = file_of(p.header, p.data);
    if (!pristine && r.chance(5)) fuzz::mutate_bytes(r, bytes);  // also the length prefix
    std::string context =
        "seed " + std::to_string(seed) + ", input " + std::to_string(i) + ": header " + printable(p.header);
    bool ok = load_checked(file, bytes, context);
    if (pristine && !ok) FAIL(context << "\na valid file was rejected");
    (ok ? loaded : rejected)++;
  }
  CAPTURE(loaded, rejected);
  REQUIRE(loaded >= n / 20);  // the mutations keep some files valid, and reject most
  REQUIRE(rejected >= n / 2);
}
