#pragma once
// Fashion-MNIST (Zalando's 28x28 grey clothing images, 10 classes) read from Debian's
// `dataset-fashion-mnist`: four gzipped IDX files, parsed here with zlib and checked (magic
// numbers, dimensions, sizes, label range) so a damaged file fails loudly instead of training on
// garbage. Plain (uncompressed) IDX files are read too.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "metagrad/tensor.hpp"

namespace metagrad::datasets {

inline constexpr const char* fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
inline constexpr std::array<const char*, 10> fashion_mnist_classes = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// An IDX file of unsigned bytes: its dimensions and its data, row-major.
struct IdxFile {
  Dims shape;
  std::vector<std::uint8_t> data;
};
// Reads an IDX ubyte file (gzipped or plain) whose magic number must be `magic` (2051 for images,
// 2049 for labels). std::runtime_error naming `path` if it is missing, unreadable, corrupt,
// truncated, longer than its header says, or of another kind.
IdxFile read_idx(const std::string& path, std::uint32_t magic);

// Images and labels, batched into the tensors a classifier takes.
struct Batch {
  Tensor X;  // float32 (n, rows * cols), pixels scaled to [0, 1]
  Tensor Y;  // (n), class indices 0..9; int32 unless asked otherwise
};

// One split: `size()` images of rows x cols uint8 pixels and their labels.
struct ImageSet {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // size() * rows * cols, row-major, 0..255
  std::vector<std::uint8_t> labels;  // size(), each < 10

  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  // The examples at `idx` (each in [0, size())), on `device` ("" is Device::DEFAULT).
  Batch batch(const std::vector<std::int64_t>& idx, const std::string& device = "",
              DType label_dtype = dtypes::int32) const;
  // Examples [start, start + n), clipped to size().
  Batch batch(std::int64_t start, std::int64_t n, const std::string& device = "",
              DType label_dtype = dtypes::int32) const;
  // The first n examples (n clipped to size()): a training subset.
  ImageSet head(std::int64_t n) const;
  // Rank `rank` of `world`'s slice of one epoch, as PyTorch's DistributedSampler: every rank
  // shuffles [0, size()) with the same generator (seed and epoch; mt19937_64 and our own
  // Fisher-Yates, so any machine draws it alike) and takes positions rank, rank + world, ...,
  // size() / world of them. Its batch s of b examples is then its share of the one-process batch s
  // of b * world. world = 1 is the whole set shuffled.
  std::vector<std::int64_t> epoch_indices(std::uint64_t seed, std::int64_t epoch, int rank = 0,
                                          int world = 1) const;
};

struct FashionMNIST {
  ImageSet train;  // 60000 images
  ImageSet test;   // 10000 images
};

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`. A missing file names the
// Debian package to install; images and labels must agree in count, labels must be < 10.
FashionMNIST load_fashion_mnist(const std::string& dir = fashion_mnist_dir);

}  // namespace metagrad::datasets
