#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>

#include "metagrad/device.hpp"

// A run on DEVICE=CUDA where the CUDA device cannot start (no driver or no GPU: every CI machine) is
// skipped, saying why, rather than failing every test on a device that is not there; ctest reports
// it as skipped (test/CMakeLists.txt). Every other device fails loudly when it is missing.
int main(int argc, char* argv[]) {
  if (metagrad::Device::canonicalize(metagrad::getenv("DEVICE")) == "CUDA") try {
      metagrad::Device::get("CUDA");
    } catch (const std::exception& e) {
      std::printf("skipped: no CUDA driver: %s\n", e.what());
      return 0;
    }
  return Catch::Session().run(argc, argv);
}
