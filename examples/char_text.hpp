#pragma once
// The text examples/gpt trains on, shared with bench/bench_gpt: printable ASCII and newlines, one
// token per character, read from a file or every text file of a folder (Debian's fortunes), split
// 9:1 into training and validation text, and drawn as random windows.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace examples {

inline int encode(unsigned char c) { return c == '\n' ? 0 : c >= 32 && c < 127 ? c - 31 : -1; }
inline char decode(std::int64_t t) { return t == 0 ? '\n' : static_cast<char>(t + 31); }

inline std::vector<std::int64_t> load_text(const std::string& path) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.is_regular_file() && e.path().extension() != ".dat" && e.path().extension() != ".u8")
        files.push_back(e.path());
    std::sort(files.begin(), files.end());  // one order on every machine
  } else {
    files.push_back(path);
  }
  std::vector<std::int64_t> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (char c : s) {
      int t = encode(static_cast<unsigned char>(c == '\t' ? ' ' : c));
      if (t >= 0) out.push_back(t);
    }
  }
  if (out.size() < 10000)
    throw std::runtime_error("gpt: " + path +
                             " holds too little text (install Debian's fortunes: tools/setup.sh)");
  return out;
}

struct SplitText {
  std::vector<std::int64_t> train, val;
  explicit SplitText(const std::vector<std::int64_t>& text) {
    auto split = text.begin() + static_cast<std::ptrdiff_t>(text.size() * 9 / 10);
    train.assign(text.begin(), split), val.assign(split, text.end());
  }
};

// b random windows of t characters and the characters after them (each b * t, row-major).
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> windows(
    const std::vector<std::int64_t>& text, long b, long t, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> at(0, text.size() - static_cast<std::size_t>(t) - 2);
  std::vector<std::int64_t> x, y;
  for (long i = 0; i < b; ++i) {
    auto s = text.begin() + static_cast<std::ptrdiff_t>(at(rng));
    x.insert(x.end(), s, s + t);
    y.insert(y.end(), s + 1, s + t + 1);
  }
  return {std::move(x), std::move(y)};
}

// The mean of `loss(x, y)` over 4 windows of the validation text, the same 4 at every call.
template <class Loss>
double validation_loss(const std::vector<std::int64_t>& val, long b, long t, Loss&& loss) {
  std::mt19937_64 rng(7);
  double s = 0;
  for (int i = 0; i < 4; ++i) {
    auto [x, y] = windows(val, b, t, rng);
    s += loss(x, y);
  }
  return s / 4;
}

}  // namespace examples
