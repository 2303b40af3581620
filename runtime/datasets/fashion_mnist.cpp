// Fashion-MNIST: IDX files through zlib's gz* interface, which also reads plain files unchanged.
#include "metagrad/datasets/fashion_mnist.hpp"
#include "metagrad/detail/cat.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace metagrad::datasets {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error(detail::cat("read_idx: '", path, "': ", why));
}

struct GzFile {
  gzFile f;
  std::string path;
  ~GzFile() { gzclose(f); }

  // Reads up to n bytes; fewer only at the end of the data. Decompression errors (bad deflate
  // data, a CRC mismatch) and a stream that stops mid-way (Z_BUF_ERROR at the end) throw.
  std::size_t read(std::uint8_t* out, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
      int r = gzread(f, out + got, chunk);
      if (r > 0) got += static_cast<std::size_t>(r);
      if (r == static_cast<int>(chunk)) continue;
      int err = Z_OK;
      const char* msg = gzerror(f, &err);
      if (r < 0 || (err != Z_OK && err != Z_STREAM_END)) {
        std::string m = msg && *msg ? msg : "unknown error", prefix = path + ": ";
        if (m.rfind(prefix, 0) == 0) m.erase(0, prefix.size());  // zlib names the file too
        fail(path, detail::cat("corrupt or truncated gzip data (zlib: ", m, ")"));
      }
      break;
    }
    return got;
  }
};

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::uint32_t big_endian(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::vector<float> scaled_pixels(const ImageSet& s, const std::vector<std::int64_t>& idx) {
  std::size_t pix = static_cast<std::size_t>(s.rows * s.cols);
  std::vector<float> x(idx.size() * pix);
  for (std::size_t b = 0; b < idx.size(); ++b) {
    const std::uint8_t* src = s.pixels.data() + static_cast<std::size_t>(idx[b]) * pix;
    for (std::size_t k = 0; k < pix; ++k) x[b * pix + k] = static_cast<float>(src[k]) / 255.0f;
  }
  return x;
}

}  // namespace

IdxFile read_idx(const std::string& path, std::uint32_t magic) {
  if ((magic >> 8) != 0x08 || (magic & 0xff) == 0 || (magic & 0xff) > kMaxDims)
    throw std::invalid_argument(detail::cat("read_idx: magic ", hex(magic),
                                            " is not an unsigned-byte IDX type (0x0000080N, N in 1..",
                                            std::to_string(kMaxDims), ")"));
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail(path, detail::cat("cannot open: ", errno ? std::strerror(errno) : "out of memory"));
  GzFile in{f, path};
  gzbuffer(f, 1 << 17);

  std::uint8_t head[4 + 4 * kMaxDims];
  std::size_t ndim = magic & 0xff, head_bytes = 4 + 4 * ndim;
  std::size_t got = in.read(head, head_bytes);
  if (got < 4) fail(path, detail::cat("too short for an IDX header (", std::to_string(got), " bytes)"));
  if (std::uint32_t m = big_endian(head); m != magic)
    fail(path, detail::cat("bad magic number ", std::to_string(m), " (", hex(m), "), want ",
                           std::to_string(magic), " (", hex(magic), ")"));
  if (got < head_bytes)
    fail(path, detail::cat("truncated header: ", std::to_string(got), " of ", std::to_string(head_bytes),
                           " bytes"));

  IdxFile out;
  std::uint64_t total = 1;
  for (std::size_t d = 0; d < ndim; ++d) {
    std::uint32_t n = big_endian(head + 4 + 4 * d);
    out.shape.push_back(n);
    // Overflow-checked: the running product (up to 2^40) times a size (up to 2^32) can pass 2^64,
    // and 2^20 x 2^20 x 2^24 wrapped to 0 bytes, an empty file for an enormous shape.
    if (__builtin_mul_overflow(total, std::uint64_t{n}, &total) || total > (std::uint64_t{1} << 40))
      fail(path, detail::cat("dimensions ", to_string(out.shape), " are implausibly large"));
  }
  // Grows with the data actually read, so a corrupt header cannot make us allocate terabytes (nor
  // zero 64 MB for a file of a few bytes: the start is 1 MB, doubled as data comes).
  std::size_t want = static_cast<std::size_t>(total);
  out.data.resize(std::min<std::size_t>(want, std::size_t{1} << 20));
  std::size_t have = 0;
  while (have < want) {
    if (have == out.data.size()) out.data.resize(std::min(want, 2 * out.data.size()));
    std::size_t r = in.read(out.data.data() + have, out.data.size() - have);
    have += r;
    if (r == 0) break;
  }
  if (have < want)
    fail(path, detail::cat("truncated: shape ", to_string(out.shape), " needs ", std::to_string(want),
                           " bytes of data, the file holds ", std::to_string(have)));
  std::uint8_t extra;
  if (in.read(&extra, 1) != 0)  // also where zlib verifies the CRC
    fail(path, detail::cat("longer than its header says: data beyond the ", std::to_string(want),
                           " bytes of shape ", to_string(out.shape)));
  return out;
}

Batch ImageSet::batch(const std::vector<std::int64_t>& idx, const std::string& device,
                      DType label_dtype) const {
  std::vector<std::int32_t> y(idx.size());
  for (std::size_t b = 0; b < idx.size(); ++b) {
    if (idx[b] < 0 || idx[b] >= size())
      throw std::invalid_argument(detail::cat("ImageSet.batch: index ", std::to_string(idx[b]),
                                              " out of range for a set of ", std::to_string(size()),
                                              " examples"));
    y[b] = labels[static_cast<std::size_t>(idx[b])];
  }
  auto n = static_cast<std::int64_t>(idx.size());
  if (n == 0)  // not from empty vectors: RawMallocBuffer::copyin would memcpy from a null pointer
    return {Tensor::zeros({0, rows * cols}, {.device = device}),
            Tensor::zeros({0}, {.device = device, .dtype = label_dtype})};
  return {Tensor(scaled_pixels(*this, idx), {n, rows * cols}, {.device = device}),
          Tensor(y, {n}, {.device = device, .dtype = label_dtype})};
}

Batch ImageSet::batch(std::int64_t start, std::int64_t n, const std::string& device,
                      DType label_dtype) const {
  if (start < 0 || n < 0)
    throw std::invalid_argument(detail::cat("ImageSet.batch: start ", std::to_string(start), " and count ",
                                            std::to_string(n), " must not be negative"));
  std::vector<std::int64_t> idx;
  for (std::int64_t i = start; i < size() && i - start < n; ++i) idx.push_back(i);
  return batch(idx, device, label_dtype);
}

ImageSet ImageSet::head(std::int64_t n) const {
  std::size_t k = static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, size()));
  ImageSet s{rows, cols, {}, {labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(k)}};
  s.pixels.assign(pixels.begin(),
                  pixels.begin() + static_cast<std::ptrdiff_t>(k * static_cast<std::size_t>(rows * cols)));
  return s;
}

std::vector<std::int64_t> ImageSet::epoch_indices(std::uint64_t seed, std::int64_t epoch, int rank,
                                                  int world) const {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument(detail::cat("ImageSet.epoch_indices: rank ", std::to_string(rank),
                                            " of world ", std::to_string(world),
                                            " (want 0 <= rank < world)"));
  std::vector<std::int64_t> order(static_cast<std::size_t>(size()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(epoch + 1)));
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  std::vector<std::int64_t> mine;
  std::size_t per_rank = order.size() / static_cast<std::size_t>(world);
  for (std::size_t k = 0; k < per_rank; ++k)
    mine.push_back(order[k * static_cast<std::size_t>(world) + static_cast<std::size_t>(rank)]);
  return mine;
}

FashionMNIST load_fashion_mnist(const std::string& dir) {
  auto split = [&](const std::string& prefix) {
    std::string ipath = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
    std::string lpath = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
    for (const std::string& p : {ipath, lpath}) {
      std::error_code ec;
      if (!std::filesystem::exists(p, ec) && !ec)  // other failures: read_idx says what went wrong
        throw std::runtime_error(detail::cat(
            "load_fashion_mnist: missing file '", p, "'; install Debian's package dataset-fashion-mnist ",
            "(apt-get install dataset-fashion-mnist) or pass the directory that holds the four IDX files"));
    }
    IdxFile images = read_idx(ipath, 2051), labels = read_idx(lpath, 2049);
    if (images.shape[0] != labels.shape[0])
      throw std::runtime_error(detail::cat("load_fashion_mnist: '", ipath, "' holds ",
                                           std::to_string(images.shape[0]), " images but '", lpath,
                                           "' holds ", std::to_string(labels.shape[0]), " labels"));
    if (images.shape[1] != 28 || images.shape[2] != 28)
      throw std::runtime_error(detail::cat("load_fashion_mnist: '", ipath, "' holds images of shape ",
                                           to_string(images.shape), ", want (N, 28, 28)"));
    for (std::size_t i = 0; i < labels.data.size(); ++i)
      if (labels.data[i] >= fashion_mnist_classes.size())
        throw std::runtime_error(detail::cat("load_fashion_mnist: '", lpath, "': label ",
                                             std::to_string(labels.data[i]), " at index ", std::to_string(i),
                                             " is not a class in 0..9"));
    return ImageSet{images.shape[1], images.shape[2], std::move(images.data), std::move(labels.data)};
  };
  return {split("train"), split("t10k")};
}

}  // namespace metagrad::datasets
