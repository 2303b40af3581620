#pragma once
// Tests that run on one device: `available` says whether it can be used (a printed warning says why
// not, so the test can return); DeviceScope makes it the default for a scope when it is; float32-exact
// random inputs for them.
#include <catch2/catch.hpp>

#include <metagrad/metagrad.hpp>
#include <random>
#include <string>
#include <vector>

namespace metagrad::test {

// Whether the device can be used; if not, a printed warning says why (the test can return).
inline bool available(const std::string& name) {
  try {
    Device::get(name);
    return true;
  } catch (const std::exception& e) {
    WARN(name << " is not available, skipped: " << e.what());
    return false;
  }
}

struct DeviceScope {
  std::string saved = Device::DEFAULT;
  bool ok = false;
  explicit DeviceScope(const std::string& name) : ok(available(name)) {
    if (ok) Device::DEFAULT = name;
  }
  ~DeviceScope() { Device::DEFAULT = saved; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
};

// n values in [-2, 2), each exactly representable in float32.
inline std::vector<double> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(-2, 2);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<double>(static_cast<float>(d(gen)));
  return v;
}

}  // namespace metagrad::test
