// Fashion-MNIST: the IDX loader against checksums computed independently (Python's gzip module),
// its errors on missing, corrupt and truncated files, and an MLP trained on the CPU device with
// nn::Linear, sparse_categorical_crossentropy and nn::optim::Adam.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "device_scope.hpp"
#include "gradcheck.hpp"

using namespace metagrad;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const datasets::FashionMNIST& dataset() {
  static const datasets::FashionMNIST ds = datasets::load_fashion_mnist();
  return ds;
}

// A fresh directory under the system temp dir, removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           detail::cat("metagrad_fmnist_", std::to_string(std::random_device{}()), "_",
                       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::vector<std::uint8_t> be32(std::uint32_t v) {
  return {std::uint8_t(v >> 24), std::uint8_t(v >> 16), std::uint8_t(v >> 8), std::uint8_t(v)};
}

// IDX bytes: magic, the dimensions, then `data` (which need not match them).
std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out = be32(magic);
  for (std::uint32_t d : dims)
    for (std::uint8_t b : be32(d)) out.push_back(b);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// gzip (RFC 1952) with the data in stored deflate blocks (RFC 1951): written here, independently
// of zlib, so the reader is checked against the formats rather than against itself.
std::uint32_t crc32(const std::vector<std::uint8_t>& bytes) {
  std::uint32_t c = 0xffffffffu;
  for (std::uint8_t b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
std::vector<std::uint8_t> gzip_stored(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint8_t> out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
  auto le = [&](std::uint32_t v, int n) {
    for (int k = 0; k < n; ++k) out.push_back(static_cast<std::uint8_t>(v >> (8 * k)));
  };
  std::size_t pos = 0;
  do {  // at least one block, even for no data
    std::size_t len = std::min<std::size_t>(bytes.size() - pos, 65535);
    out.push_back(pos + len == bytes.size() ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    le(static_cast<std::uint32_t>(len), 2);
    le(static_cast<std::uint32_t>(~len & 0xffff), 2);
    out.insert(out.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos),
               bytes.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  } while (pos < bytes.size());
  le(crc32(bytes), 4);
  le(static_cast<std::uint32_t>(bytes.size()), 4);
  return out;
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  write_raw(path, gzip_stored(bytes));
}
std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A small dataset directory: n images of rows x cols (pixel = (i + k) % 256) and n labels.
void write_dataset(const TempDir& dir, std::uint32_t n_images, std::uint32_t rows, std::uint32_t cols,
                   std::vector<std::uint8_t> labels) {
  std::vector<std::uint8_t> px(std::size_t{n_images} * rows * cols);
  for (std::size_t k = 0; k < px.size(); ++k) px[k] = static_cast<std::uint8_t>(k % 256);
  for (const char* split : {"train", "t10k"}) {
    write_gz(dir / detail::cat(split, "-images-idx3-ubyte.gz"), idx_bytes(2051, {n_images, rows, cols}, px));
    write_gz(dir / detail::cat(split, "-labels-idx1-ubyte.gz"),
             idx_bytes(2049, {static_cast<std::uint32_t>(labels.size())}, labels));
  }
}

std::string real(const char* name) { return detail::cat(datasets::fashion_mnist_dir, "/", name); }

}  // namespace

TEST_CASE("load_fashion_mnist: shapes, labels and pixels match independent checksums", "[fashion_mnist]") {
  const auto& ds = dataset();
  REQUIRE(ds.train.size() == 60000);
  REQUIRE(ds.test.size() == 10000);
  for (const datasets::ImageSet* s : {&ds.train, &ds.test}) {
    REQUIRE(s->rows == 28);
    REQUIRE(s->cols == 28);
    REQUIRE(static_cast<std::int64_t>(s->pixels.size()) == s->size() * 784);
    // every class equally often, as published
    std::vector<std::int64_t> count(10, 0);
    for (std::uint8_t y : s->labels) {
      REQUIRE(y < 10);
      ++count[y];
    }
    for (std::int64_t c : count) REQUIRE(c == s->size() / 10);
    REQUIRE(*std::min_element(s->pixels.begin(), s->pixels.end()) == 0);
    REQUIRE(*std::max_element(s->pixels.begin(), s->pixels.end()) == 255);
  }
  REQUIRE(std::vector<int>(ds.train.labels.begin(), ds.train.labels.begin() + 10) ==
          std::vector<int>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  REQUIRE(std::vector<int>(ds.test.labels.begin(), ds.test.labels.begin() + 10) ==
          std::vector<int>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  auto sum = [](auto b, auto e) { return std::accumulate(b, e, std::uint64_t{0}); };
  REQUIRE(sum(ds.train.pixels.begin(), ds.train.pixels.end()) == 3431114169u);
  REQUIRE(sum(ds.test.pixels.begin(), ds.test.pixels.end()) == 573469082u);
  REQUIRE(sum(ds.train.pixels.begin(), ds.train.pixels.begin() + 784) == 76247u);
  REQUIRE(sum(ds.test.pixels.begin(), ds.test.pixels.begin() + 784) == 33456u);
  REQUIRE(std::string(datasets::fashion_mnist_classes[9]) == "Ankle boot");
}

TEST_CASE("ImageSet.batch: float pixels in 0..1, labels, head", "[fashion_mnist]") {
  const auto& test = dataset().test;
  std::vector<std::int64_t> idx = {9999, 0, 17, 0};
  datasets::Batch b = test.batch(idx);
  REQUIRE(b.X.shape() == Dims{4, 784});
  REQUIRE(b.X.dtype() == dtypes::float32);
  REQUIRE(b.Y.shape() == Dims{4});
  REQUIRE(b.Y.dtype() == dtypes::int32);
  std::vector<double> x = b.X.to_vector<double>(), want;
  for (std::int64_t i : idx)
    for (std::size_t k = 0; k < 784; ++k) want.push_back(test.pixels[std::size_t(i) * 784 + k] / 255.0);
  test::require_close(x, want, 1e-7, 1e-6);
  REQUIRE(*std::min_element(x.begin(), x.end()) >= 0.0);
  REQUIRE(*std::max_element(x.begin(), x.end()) <= 1.0);
  REQUIRE(b.Y.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{test.labels[9999], 9, test.labels[17], 9});
  REQUIRE(test.batch(idx, "", dtypes::int64).Y.dtype() == dtypes::int64);

  datasets::Batch tail = test.batch(9998, 5);  // clipped to the end
  REQUIRE(tail.X.shape() == Dims{2, 784});
  REQUIRE(tail.Y.to_vector<int>() == std::vector<int>{test.labels[9998], test.labels[9999]});
  datasets::Batch none = test.batch(10000, 5);
  REQUIRE(none.X.shape() == Dims{0, 784});
  REQUIRE(none.Y.shape() == Dims{0});
  REQUIRE(none.Y.dtype() == dtypes::int32);

  datasets::ImageSet h = test.head(3);
  REQUIRE(h.size() == 3);
  REQUIRE(h.pixels == std::vector<std::uint8_t>(test.pixels.begin(), test.pixels.begin() + 3 * 784));
  REQUIRE(test.head(1 << 20).size() == 10000);

  REQUIRE_THROWS_WITH(test.batch({0, 10000}),
                      Contains("index 10000 out of range") && Contains("10000 examples"));
  REQUIRE_THROWS_WITH(test.batch({-1}), Contains("index -1 out of range"));
  REQUIRE_THROWS_WITH(test.batch(-2, 5), Contains("start -2"));
}

TEST_CASE("read_idx: gzipped and plain files round-trip", "[fashion_mnist]") {
  TempDir dir;
  std::vector<std::uint8_t> data(2 * 3 * 5);
  std::iota(data.begin(), data.end(), std::uint8_t{200});  // wraps past 255
  write_gz(dir / "a.gz", idx_bytes(2051, {2, 3, 5}, data));
  write_raw(dir / "a.idx", idx_bytes(2051, {2, 3, 5}, data));
  for (const char* name : {"a.gz", "a.idx"}) {
    datasets::IdxFile f = datasets::read_idx(dir / name, 2051);
    REQUIRE(f.shape == Dims{2, 3, 5});
    REQUIRE(f.data == data);
  }
  std::vector<std::uint8_t> big(300 * 28 * 28);  // several stored blocks
  for (std::size_t k = 0; k < big.size(); ++k) big[k] = static_cast<std::uint8_t>(k * 7 % 251);
  write_gz(dir / "big.gz", idx_bytes(2051, {300, 28, 28}, big));
  REQUIRE(datasets::read_idx(dir / "big.gz", 2051).data == big);
  write_gz(dir / "empty.gz", idx_bytes(2049, {0}, {}));
  REQUIRE(datasets::read_idx(dir / "empty.gz", 2049).data.empty());
}

TEST_CASE("read_idx and load_fashion_mnist: missing, corrupt and truncated files", "[fashion_mnist]") {
  TempDir dir;
  SECTION("a missing dataset names the Debian package") {
    REQUIRE_THROWS_AS(datasets::load_fashion_mnist(dir / "nowhere"), std::runtime_error);
    REQUIRE_THROWS_WITH(datasets::load_fashion_mnist(dir / "nowhere"),
                        Contains("missing file") && Contains("nowhere/train-images-idx3-ubyte.gz") &&
                            Contains("dataset-fashion-mnist"));
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "none.gz", 2049),
                        Contains("none.gz") && Contains("cannot open") && Contains("No such file"));
  }
  SECTION("a gzip stream cut short") {
    std::vector<std::uint8_t> gz = read_raw(real("t10k-images-idx3-ubyte.gz"));
    gz.resize(gz.size() / 2);
    write_raw(dir / "cut.gz", gz);
    REQUIRE_THROWS_AS(datasets::read_idx(dir / "cut.gz", 2051), std::runtime_error);
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "cut.gz", 2051),
                        Contains("cut.gz") && Contains("corrupt or truncated gzip data"));
  }
  SECTION("corrupt compressed bytes fail the checks zlib makes") {
    std::vector<std::uint8_t> gz = read_raw(real("t10k-labels-idx1-ubyte.gz"));
    for (std::size_t k = gz.size() / 3; k < gz.size() / 3 + 16; ++k) gz[k] ^= 0x5a;
    write_raw(dir / "bad.gz", gz);
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "bad.gz", 2049),
                        Contains("bad.gz") && Contains("corrupt or truncated gzip data (zlib: "));
  }
  SECTION("a CRC-32 mismatch and a cut stored stream, in files written without zlib") {
    std::vector<std::uint8_t> gz = gzip_stored(idx_bytes(2049, {4}, {1, 2, 3, 4}));
    gz[gz.size() - 9] ^= 1;  // the last data byte, before CRC-32 and ISIZE
    write_raw(dir / "crc.gz", gz);
    REQUIRE_THROWS_WITH(
        datasets::read_idx(dir / "crc.gz", 2049),
        Contains("crc.gz") && Contains("corrupt or truncated gzip data (zlib: incorrect data check)"));
    gz = gzip_stored(idx_bytes(2049, {1000}, std::vector<std::uint8_t>(1000, 7)));
    gz.resize(500);
    write_raw(dir / "cut.gz", gz);
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "cut.gz", 2049),
                        Contains("corrupt or truncated gzip data (zlib: unexpected end of file)"));
  }
  SECTION("an IDX file whose data is shorter or longer than its header says") {
    write_gz(dir / "short.gz", idx_bytes(2049, {100}, std::vector<std::uint8_t>(50)));
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "short.gz", 2049),
                        Contains("short.gz") && Contains("truncated: shape (100,) needs 100 bytes of data") &&
                            Contains("holds 50"));
    write_gz(dir / "head.gz", idx_bytes(2051, {}, {0, 0, 0, 5}));
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "head.gz", 2051),
                        Contains("truncated header: 8 of 16 bytes"));
    write_gz(dir / "tiny.gz", {0, 0});
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "tiny.gz", 2051),
                        Contains("too short for an IDX header (2 bytes)"));
    write_gz(dir / "long.gz", idx_bytes(2049, {3}, {1, 2, 3, 4}));
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "long.gz", 2049), Contains("longer than its header says"));
  }
  SECTION("the wrong kind of file") {
    REQUIRE_THROWS_WITH(
        datasets::read_idx(real("t10k-labels-idx1-ubyte.gz"), 2051),
        Contains("t10k-labels-idx1-ubyte.gz") && Contains("bad magic number 2049") && Contains("want 2051"));
    write_raw(dir / "text.gz", {'h', 'e', 'l', 'l', 'o', '\n'});
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "text.gz", 2049), Contains("bad magic number"));
    REQUIRE_THROWS_AS(datasets::read_idx(dir / "text.gz", 0x0d03), std::invalid_argument);
    REQUIRE_THROWS_WITH(datasets::read_idx(dir / "text.gz", 0x0d03),
                        Contains("not an unsigned-byte IDX type"));
  }
  SECTION("files that disagree with each other or with Fashion-MNIST") {
    write_dataset(dir, 3, 28, 28, {0, 1, 9});
    datasets::FashionMNIST ds = datasets::load_fashion_mnist(dir.path.string());
    REQUIRE(ds.train.size() == 3);
    REQUIRE(ds.test.labels == std::vector<std::uint8_t>{0, 1, 9});
    write_dataset(dir, 3, 28, 28, {0, 1, 10});
    REQUIRE_THROWS_WITH(datasets::load_fashion_mnist(dir.path.string()),
                        Contains("label 10 at index 2 is not a class in 0..9"));
    write_dataset(dir, 3, 28, 28, {0, 1});
    REQUIRE_THROWS_WITH(datasets::load_fashion_mnist(dir.path.string()),
                        Contains("holds 3 images but") && Contains("holds 2 labels"));
    write_dataset(dir, 2, 27, 28, {0, 1});
    REQUIRE_THROWS_WITH(datasets::load_fashion_mnist(dir.path.string()),
                        Contains("images of shape (2, 27, 28), want (N, 28, 28)"));
  }
}

namespace {
struct MLP {
  nn::Linear l1{784, 128}, l2{128, 10};
  Tensor operator()(const Tensor& x) const { return l2(l1((x - 0.2860) / 0.3530).relu()); }
  nn::StateDict state_dict() const { return nn::state_dict({{"l1", l1}, {"l2", l2}}); }
};

// Class of the largest logit per row, computed on the host (independent of Tensor::argmax).
std::vector<std::int64_t> host_argmax(const Tensor& logits) {
  std::vector<float> v = logits.to_vector<float>();
  std::vector<std::int64_t> out(v.size() / 10);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = std::max_element(&v[i * 10], &v[i * 10] + 10) - &v[i * 10];
  return out;
}
}  // namespace

// The budget: one epoch over the first 30000 training images in batches of 64 (469 Adam steps, lr
// 0.004 decaying linearly to 0, inputs standardised), then the whole test set. That reaches about
// 85% (84.5-85.5% over seeds in a float32 reference) in about 45 s of CPU time on the interpreted
// CPU device; the full 60000 images would double the time for about half a point.
TEST_CASE("an MLP trained on the CPU device reaches 84% test accuracy", "[fashion_mnist][train]") {
  const auto& ds = dataset();
  test::DeviceScope cpu("CPU");
  const std::int64_t subset = 30000, batch = 64, steps = (subset + batch - 1) / batch;
  const double lr = 0.004;
  Tensor::manual_seed(1337);
  MLP model;
  nn::optim::Adam optim(nn::get_parameters(model), lr);
  REQUIRE(nn::get_parameters(model).size() == 4);
  std::vector<std::int64_t> order(static_cast<std::size_t>(subset));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1337));

  auto t0 = std::chrono::steady_clock::now();
  double first_loss = 0, last_loss = 0;
  {
    Tensor::TrainingGuard training;
    for (std::int64_t s = 0; s < steps; ++s) {
      auto first = order.begin() + s * batch;
      std::vector<std::int64_t> idx(first, first + std::min(batch, subset - s * batch));
      datasets::Batch b = ds.train.batch(idx);
      REQUIRE(b.X.device() == "CPU");
      optim.set_lr(lr * (1 - double(s) / double(steps)));
      Tensor loss = model(b.X).sparse_categorical_crossentropy(b.Y);
      optim.zero_grad();
      loss.backward();
      optim.step();
      double l = loss.item<double>();
      REQUIRE(std::isfinite(l));
      if (s < 10) first_loss += l / 10;
      if (s >= steps - 10) last_loss += l / 10;
    }
  }
  double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Tensor::NoGradGuard no_grad;
  std::int64_t correct = 0, correct_device = 0;
  for (std::int64_t start = 0; start < ds.test.size(); start += 1000) {
    datasets::Batch b = ds.test.batch(start, 1000);
    Tensor logits = model(b.X);
    std::vector<std::int64_t> pred = host_argmax(logits);
    for (std::size_t i = 0; i < pred.size(); ++i)
      correct += pred[i] == ds.test.labels[std::size_t(start) + i];
    correct_device += logits.argmax(-1).eq(b.Y).sum().item<std::int64_t>();
  }
  double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double acc = double(correct) / double(ds.test.size());
  std::printf(
      "[fashion_mnist] MLP on CPU: %lld steps of %lld in %.1f s (%.0f samples/s), test in %.1f s; "
      "loss %.3f -> %.3f, test accuracy %.2f%%\n",
      static_cast<long long>(steps), static_cast<long long>(batch), train_s, double(subset) / train_s,
      total_s - train_s, first_loss, last_loss, 100 * acc);
  CHECK(correct_device == correct);
  CHECK(last_loss < first_loss / 3);
  REQUIRE(acc >= 0.84);
}
