// BEAM search over the GEMM's cache blocking, per shape, ISA and thread count, kept on disk.
//
// The tree has three levels (KC, then MC, then NC); each level expands every kept candidate by
// that parameter's values, times them all on the machine, and keeps the BEAM fastest. Results live
// in <kernel cache>/gemm/<cpu>.txt, one line per shape appended with O_APPEND (a line is one write,
// so processes tuning at once do not tear each other's lines); the first lookup reads the file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "metagrad/cpu/caches.hpp"
#include "metagrad/cpu/parallel.hpp"
#include "metagrad/helpers.hpp"
#include "metagrad/device/disk_cache.hpp"
#include "metagrad/device/gemm.hpp"

namespace metagrad::gemm {
namespace {

namespace fs = std::filesystem;
using Key = std::tuple<int, std::int64_t, std::int64_t, std::int64_t, int>;  // isa, m, n, k, threads

struct Store {
  std::mutex mu;
  std::map<Key, std::pair<GemmBlocking, bool>> known;  // the blocking, and whether it came from disk
  bool loaded = false;
  TuneStats stats;
};
Store& store() {
  static Store s;
  return s;
}

// The processor, as far as blocking cares: its model name and caches.
std::string cpu_id() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      model = line;
      break;
    }
  const auto& c = cpu::host_caches();
  return stable_hash(model + " " + std::to_string(c.l1) + " " + std::to_string(c.l2) + " " +
                     std::to_string(c.l3));
}
fs::path store_path() { return fs::path(kernel_cache_dir()) / "gemm" / (cpu_id() + ".txt"); }

// A line is used only where every field is one the search could have written: a known ISA, positive
// sizes, and blockings within the candidates' range (one damaged line, a kc of INT64_MAX, made every
// later matmul die with SIGFPE, BEAM set or not). Any other line is dropped and the file rewritten
// without it.
bool plausible(int isa, std::int64_t m, std::int64_t n, std::int64_t k, int threads, const GemmBlocking& b) {
  return isa >= 0 && isa <= static_cast<int>(Isa::avx512) && m > 0 && n > 0 && k > 0 && threads > 0 &&
         b.mc >= 1 && b.mc <= 8192 && b.kc >= 1 && b.kc <= 4096 && b.nc >= 1 && b.nc <= 65536;
}

void load(Store& s) {
  if (s.loaded) return;
  s.loaded = true;
  std::ifstream f(store_path());
  std::string line;
  bool dropped = false;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    int isa = -1, threads = 0;
    std::int64_t m = 0, n = 0, k = 0;
    GemmBlocking b{0, 0, 0};
    std::string rest;
    if (in >> isa >> m >> n >> k >> threads >> b.mc >> b.kc >> b.nc && !(in >> rest) &&
        plausible(isa, m, n, k, threads, b))
      s.known[{isa, m, n, k, threads}] = {b, true};
    else
      dropped = dropped || !line.empty();
  }
  if (!dropped) return;
  f.close();
  std::error_code ec;
  fs::path p = store_path(), tmp = p;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    for (const auto& [key, v] : s.known) {
      auto [isa, m, n, k, threads] = key;
      out << isa << " " << m << " " << n << " " << k << " " << threads << " " << v.first.mc << " "
          << v.first.kc << " " << v.first.nc << "\n";
    }
  }
  fs::rename(tmp, p, ec);  // atomic: a reader sees the old file or the new one
  if (ec) fs::remove(tmp, ec);
}

void save(const Key& key, const GemmBlocking& b) {
  std::error_code ec;
  fs::path p = store_path();
  fs::create_directories(p.parent_path(), ec);
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;  // an unwritable cache only costs the next process a search
  auto [isa, m, n, k, threads] = key;
  std::ostringstream os;
  os << isa << " " << m << " " << n << " " << k << " " << threads << " " << b.mc << " " << b.kc << " " << b.nc
     << "\n";
  std::string line = os.str();
  [[maybe_unused]] auto w = ::write(fd, line.data(), line.size());
  ::close(fd);
}

double seconds(const Problem& p, const GemmBlocking& b, Isa isa) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    sgemm(p, b, isa);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

GemmBlocking search(std::int64_t m, std::int64_t n, std::int64_t k, Isa isa, int width) {
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  std::mt19937 rng(0);
  std::normal_distribution<float> d;
  for (auto* v : {&a, &b})
    for (auto& x : *v) x = d(rng);
  Problem p{m, n, k, a.data(), k, 1, b.data(), n, 1, c.data(), n};
  const GemmBlocking def = default_blocking(isa);
  sgemm(p, def, isa);  // warm: pages touched, threads awake
  std::vector<std::pair<double, GemmBlocking>> beam{{seconds(p, def, isa), def}};
  auto level = [&](auto values, auto set) {
    std::vector<std::pair<double, GemmBlocking>> next = beam;
    for (auto& [t, cand] : beam)
      for (std::int64_t v : values) {
        GemmBlocking g = cand;
        set(g, v);
        if (g == cand) continue;
        next.emplace_back(seconds(p, g, isa), g);
      }
    std::sort(next.begin(), next.end(), [](auto& x, auto& y) { return x.first < y.first; });
    next.erase(std::unique(next.begin(), next.end(), [](auto& x, auto& y) { return x.second == y.second; }),
               next.end());
    next.resize(std::min<std::size_t>(next.size(), static_cast<std::size_t>(width)));
    beam = std::move(next);
  };
  std::vector<std::int64_t> kcs, ncs;
  for (std::int64_t v : {64, 128, 192, 256, 384, 512, 768})
    if (v < k + 64) kcs.push_back(v);
  std::set<std::int64_t> mcs;  // (a set: def.mc / 1 and def.mc * 1 are one candidate)
  for (std::int64_t f : {1, 2, 4, 8})
    mcs.insert(std::max<std::int64_t>(def.mc / f, 1)), mcs.insert(def.mc * f);
  for (std::int64_t v : {512, 1024, 2048, 4096, 8192})
    if (v < n + 512) ncs.push_back(v);
  level(kcs, [](GemmBlocking& g, std::int64_t v) { g.kc = v; });
  level(mcs, [](GemmBlocking& g, std::int64_t v) { g.mc = v; });
  level(ncs, [](GemmBlocking& g, std::int64_t v) { g.nc = v; });
  return beam.front().second;
}

}  // namespace

GemmBlocking choose_blocking(std::int64_t m, std::int64_t n, std::int64_t k, Isa isa) {
  static const int width = static_cast<int>(getenv_int("BEAM", 0));
  Key key{static_cast<int>(isa), m, n, k, cpu::threads()};
  Store& s = store();
  {
    std::lock_guard lock(s.mu);
    load(s);
    if (auto it = s.known.find(key); it != s.known.end()) {
      if (it->second.second) ++s.stats.disk_hits, it->second.second = false;  // counted once
      return it->second.first;
    }
    if (width <= 0 || m * n * k < (std::int64_t{1} << 18)) return default_blocking(isa);  // too small to time
  }
  GemmBlocking best = search(m, n, k, isa, width);
  std::lock_guard lock(s.mu);
  ++s.stats.searches;
  s.known[key] = {best, false};
  save(key, best);
  return best;
}

TuneStats tune_stats() {
  std::lock_guard lock(store().mu);
  return store().stats;
}

}  // namespace metagrad::gemm
