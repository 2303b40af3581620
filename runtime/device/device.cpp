// The device registry: devices register themselves (Device::Registrar in runtime/backends/ops_X.cpp), each
// is built on first use; DEFAULT comes from the environment.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "metagrad/detail/cat.hpp"
#include "metagrad/device.hpp"

namespace metagrad {

namespace {

struct Entry {
  std::string name;
  int rank;
  Device::Factory make;
};

// The registered devices, in preference order for the default device: fastest first.
std::vector<Entry>& factories() {
  static std::vector<Entry> table;
  return table;
}

std::string default_device() {
  if (std::string d = getenv("DEVICE"); !d.empty()) return Device::canonicalize(d);
  for (const auto& [name, rank, make] : factories())
    if (getenv_int(name.c_str()) == 1) return name;
  // The first available in preference order: probing stops there, so start-up builds one device.
  for (const auto& [name, rank, make] : factories()) {
    try {
      Device::get(name);
      return name;
    } catch (const std::exception&) {}
  }
  return "CPU";
}

}  // namespace

Device::Registrar::Registrar(std::string name, int rank, Factory make) {
  auto& t = factories();
  auto at = std::find_if(t.begin(), t.end(), [&](const Entry& e) { return e.rank > rank; });
  t.insert(at, Entry{std::move(name), rank, make});
}

std::string Device::DEFAULT = default_device();

std::string Device::canonicalize(std::string name) {
  // ASCII only, in place: every LazyBuffer's construction calls this (std::toupper is a locale
  // lookup per character)
  for (char& c : name)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return name;
}

std::vector<std::string> Device::available() {
  std::vector<std::string> out;
  for (const auto& [name, rank, make] : factories()) {
    try {
      get(name);
      out.push_back(name);
    } catch (const std::exception&) {}
  }
  return out;
}

Backend& Device::get(const std::string& name) {
  // Every tensor op asks: the last device this thread got needs no lock, map or canonical name.
  thread_local std::string last_name;
  thread_local Backend* last = nullptr;
  if (last && name == last_name) return *last;
  Backend& b = get_slow(name);
  last_name = name, last = &b;
  return b;
}

Backend& Device::get_slow(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Backend>> built;
  static std::map<std::string, std::string> failed;
  std::string key = canonicalize(name);
  std::lock_guard lock(mu);
  if (auto it = built.find(key); it != built.end()) return *it->second;
  if (auto it = failed.find(key); it != failed.end()) throw std::runtime_error(it->second);
  auto f =
      std::find_if(factories().begin(), factories().end(), [&](const Entry& e) { return e.name == key; });
  if (f == factories().end()) {
    std::string known;
    for (const auto& [n, rank, make] : factories()) known += detail::cat(known.empty() ? "" : ", ", n);
    throw std::runtime_error(
        detail::cat("Device \"", name, "\" is not a metagrad device (built: ", known, ")"));
  }
  try {
    return *(built[key] = f->make());
  } catch (const std::exception& e) {
    failed[key] = detail::cat("Device ", key, " is not available: ", e.what());
    throw std::runtime_error(failed[key]);
  }
}

std::string human_bytes(std::int64_t bytes) {
  static constexpr const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::abs(v) >= 1000 && u < 4) v /= 1000, ++u;
  char b[32];
  std::snprintf(b, sizeof b, u == 0 ? "%.0f %s" : std::abs(v) < 10 ? "%.2f %s" : "%.1f %s", v, units[u]);
  return b;
}

void print_kernel_line(const std::string& name, std::size_t nbufs, double seconds, std::int64_t ops,
                       std::int64_t bytes) {
  double t = std::max(seconds, 1e-9);
  std::fprintf(stderr, "*** %4lld %-30s arg %2zu %10.2f us %9.2f GFLOP/s %8.2f GB/s  mem %s\n",
               static_cast<long long>(GlobalCounters::kernel_count), name.c_str(), nbufs, seconds * 1e6,
               static_cast<double>(ops) / t * 1e-9, static_cast<double>(bytes) / t * 1e-9,
               human_bytes(GlobalCounters::mem_used).c_str());
}

}  // namespace metagrad
