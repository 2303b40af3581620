// Fuzzer for the IDX loader (datasets::read_idx): valid IDX files, plain and gzipped, mutated in
// their bytes and their dimensions (sizes near 2^20, 2^24, 2^32 whose products pass 2^64). Every
// input must load with data.size() equal to the product of the shape, or be rejected with
// std::runtime_error naming the file; anything else fails. The regression corpus holds the shapes
// whose byte count wrapped.
#include <zlib.h>

#include <catch2/catch.hpp>

#include "fuzz_common.hpp"
#include "metagrad/datasets/fashion_mnist.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;

namespace {

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}
std::string idx_file(std::uint32_t ndim, const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string out = be32(0x800u | ndim);
  for (std::uint32_t d : dims) out += be32(d);
  return out + data;
}

// gzip of `plain` with zlib's deflate (windowBits 31: the gzip wrapper and its CRC).
std::string gzip(const std::string& plain) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(plain.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

const std::vector<std::uint32_t> kSizes = {0,   1,        2,        3,        28,         255,
                                           256, 1u << 20, 1u << 24, 1u << 31, 0xffffffffu};

// read_idx must load or throw std::runtime_error naming the file; true if it loaded.
bool read_checked(const fuzz::TempFile& file, std::uint32_t magic, const std::string& context) {
  return fuzz::loads_or_rejects(file.path, context, [&] {
    datasets::IdxFile f = datasets::read_idx(file.path, magic);
    INFO(context << "\nloaded shape " << to_string(f.shape));
    REQUIRE(f.shape.size() == (magic & 0xff));
    REQUIRE(static_cast<std::int64_t>(f.data.size()) == prod(f.shape));
  });
}

}  // namespace

TEST_CASE("fuzz: IDX regression corpus (issue 13)", "[fuzz_idx]") {
  fuzz::TempFile file("corpus.idx");
  auto rejects = [&](const std::vector<std::uint32_t>& dims, const std::string& data,
                     const std::string& why) {
    file.write(idx_file(static_cast<std::uint32_t>(dims.size()), dims, data));
    INFO(to_string(Dims(dims)));
    auto magic = 0x800u | static_cast<std::uint32_t>(dims.size());
    REQUIRE_THROWS_AS(datasets::read_idx(file.path, magic), std::runtime_error);
    REQUIRE_THROWS_WITH(datasets::read_idx(file.path, magic), Contains(file.path) && Contains(why));
  };
  // 2^20 * 2^20 * 2^24 = 2^64 wrapped to 0 bytes: an empty file passed for an enormous shape
  rejects({1u << 20, 1u << 20, 1u << 24}, "", "implausibly large");
  rejects({1u << 20, 1u << 20, 1u << 24}, "", "(1048576, 1048576, 16777216)");
  rejects({1u << 20, 1u << 20, 0xffffffffu, 1u << 12}, "", "implausibly large");
  rejects({0xffffffffu, 0xffffffffu, 0xffffffffu}, "", "implausibly large");
  // a zero size makes an empty file valid whatever the other sizes
  file.write(idx_file(3, {0, 1u << 20, 1u << 20}, ""));
  REQUIRE(datasets::read_idx(file.path, 0x803).data.empty());
}

TEST_CASE("fuzz: IDX loader, mutated files", "[fuzz_idx]") {
  const std::uint64_t seed = fuzz::seed(0x1d8f11e5);
  const long n = fuzz::inputs(3000);
  fuzz::Rng r(seed);
  fuzz::TempFile file("mutated.idx");
  long loaded = 0, rejected = 0;
  for (long i = 0; i < n; ++i) {
    auto ndim = static_cast<std::uint32_t>(r.in(1, 4));
    std::vector<std::uint32_t> dims;
    std::int64_t total = 1;
    for (std::uint32_t d = 0; d < ndim; ++d)
      dims.push_back(static_cast<std::uint32_t>(r.in(0, 5))), total *= dims.back();
    std::string data;
    for (std::int64_t k = 0; k < total; ++k) data.push_back(static_cast<char>(r.next()));
    std::uint32_t magic = 0x800u | ndim;
    bool pristine = r.chance(5);
    if (!pristine && r.chance(40))  // sizes whose products overflow, with whatever data
      for (std::uint32_t& d : dims)
        if (r.chance(60)) d = r.pick(kSizes);
    std::string bytes = idx_file(ndim, dims, data);
    if (!pristine)
      for (std::int64_t k = r.in(0, 2); k-- > 0;) fuzz::mutate_bytes(r, bytes);
    bool gz = r.chance(50);
    if (gz) {
      bytes = gzip(bytes);
      if (!pristine && r.chance(30)) fuzz::mutate_bytes(r, bytes);  // the compressed stream itself
    }
    file.write(bytes);
    if (!pristine && r.chance(5)) magic = 0x800u | static_cast<std::uint32_t>(r.in(1, 4));
    std::string context =
        "seed " + std::to_string(seed) + ", input " + std::to_string(i) + (gz ? " (gzip)" : "");
    bool ok = read_checked(file, magic, context);
    if (pristine && !ok) FAIL(context << "\na valid file was rejected");
    (ok ? loaded : rejected)++;
  }
  CAPTURE(loaded, rejected);
  REQUIRE(loaded >= n / 20);
  REQUIRE(rejected >= n / 3);
}
