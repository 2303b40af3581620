#pragma once
// Shared pieces of the fuzzers: a seeded generator, the input counts (small in CI, larger on
// demand) and temporary files.
//
// METAGRAD_FUZZ_SCALE=k runs k times as many inputs (default 1, the CI budget);
// METAGRAD_FUZZ_SEED=s starts from another seed (default: each fuzzer's fixed seed, so a CI run
// is repeatable). A failure prints the seed and the input's number.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>
#include <vector>

namespace fuzz {

// splitmix64: small, fast and the same on every platform (std::uniform_int_distribution is not).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi].
  std::int64_t in(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return in(0, 99) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(in(0, static_cast<std::int64_t>(v.size()) - 1))];
  }
};

inline long env_long(const char* name, long dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return end && *end == 0 && x > 0 ? x : dflt;
}
// The CI count times METAGRAD_FUZZ_SCALE.
inline long inputs(long ci_count) { return ci_count * env_long("METAGRAD_FUZZ_SCALE", 1); }
inline std::uint64_t seed(std::uint64_t dflt) {
  return static_cast<std::uint64_t>(env_long("METAGRAD_FUZZ_SEED", static_cast<long>(dflt)));
}

// A file under the temp dir, unique to this process, removed with the object.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("metagrad_fuzz_" + std::to_string(::getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  void write(const std::string& bytes) const {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
};

// Runs load(), which checks what it loaded. True if it loaded; false if it threw std::runtime_error
// naming `path` (a clear rejection). Any other exception fails the test.
template <class F>
bool loads_or_rejects(const std::string& path, const std::string& context, F load) {
  try {
    load();
    return true;
  } catch (const std::runtime_error& e) {
    INFO(context);
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains(path));
  } catch (const std::exception& e) {
    FAIL(context << "\nthrew " << typeid(e).name() << ", not std::runtime_error: " << e.what());
  }
  return false;
}

// Generic byte mutations: flip bits, overwrite, insert, delete, truncate, append.
inline void mutate_bytes(Rng& r, std::string& b) {
  switch (r.in(0, 5)) {
    case 0:
      if (!b.empty())
        b[static_cast<std::size_t>(r.in(0, static_cast<std::int64_t>(b.size()) - 1))] ^=
            static_cast<char>(1 << r.in(0, 7));
      break;
    case 1:
      if (!b.empty())
        b[static_cast<std::size_t>(r.in(0, static_cast<std::int64_t>(b.size()) - 1))] =
            static_cast<char>(r.next());
      break;
    case 2:
      b.insert(b.begin() + r.in(0, static_cast<std::int64_t>(b.size())), static_cast<char>(r.next()));
      break;
    case 3:
      if (!b.empty()) b.erase(b.begin() + r.in(0, static_cast<std::int64_t>(b.size()) - 1));
      break;
    case 4:
      b.resize(static_cast<std::size_t>(r.in(0, static_cast<std::int64_t>(b.size()))));
      break;
    default:
      for (std::int64_t n = r.in(1, 16); n-- > 0;) b.push_back(static_cast<char>(r.next()));
  }
}

}  // namespace fuzz
