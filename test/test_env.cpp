// detail/env.hpp: a flag read from the environment once per version of it, and again after any
// setenv or unsetenv (the tests of DEBUG's output set DEBUG between realizes).
#include <stdlib.h>  // setenv, unsetenv

#include <array>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <string>

#include "metagrad/detail/env.hpp"

namespace {

int reads = 0;

// Call site N watches variable names[N] (each instantiation's lambda is a cache of its own).
constexpr std::array<const char*, 3> names = {"METAGRAD_TEST_ENV_A", "METAGRAD_TEST_ENV_B",
                                              "METAGRAD_TEST_ENV_C"};
template <int N>
std::string watched() {
  return metagrad::detail::env_cached([] {
    ++reads;
    const char* v = std::getenv(names[N]);
    return std::string(v ? v : "<unset>");
  });
}
std::string now(int n) {
  const char* v = std::getenv(names[static_cast<std::size_t>(n)]);
  return v ? v : "<unset>";
}

}  // namespace

TEST_CASE("env_cached reads the environment again only after it changed", "[env]") {
  ::unsetenv(names[0]);
  REQUIRE(watched<0>() == "<unset>");
  int before = reads;
  for (int i = 0; i < 100; ++i) REQUIRE(watched<0>() == "<unset>");
  REQUIRE(reads == before);  // no change, no read
  ::setenv(names[0], "1", 1);
  REQUIRE(watched<0>() == "1");  // a new variable
  ::setenv(names[0], "2", 1);
  REQUIRE(watched<0>() == "2");  // overwritten
  ::setenv(names[0], "1", 1);
  REQUIRE(watched<0>() == "1");  // back to a value it had (glibc reuses that string)
  before = reads;
  REQUIRE(watched<0>() == "1");
  REQUIRE(reads == before);
  ::unsetenv(names[0]);
  REQUIRE(watched<0>() == "<unset>");
}

TEST_CASE("env_cached follows random sequences of setenv and unsetenv", "[env]") {
  std::mt19937 gen(63);
  const char* values[] = {"0", "1", "2", "10"};
  for (int n = 0; n < 3; ++n) ::unsetenv(names[static_cast<std::size_t>(n)]);
  for (int step = 0; step < 500; ++step) {
    int n = static_cast<int>(gen() % 3);
    const char* name = names[static_cast<std::size_t>(n)];
    switch (gen() % 3) {
      case 0:
        ::unsetenv(name);
        break;
      case 1:  // (an unset and a set together: the environment keeps its length)
        ::unsetenv(names[static_cast<std::size_t>((n + 1) % 3)]);
        [[fallthrough]];
      default:
        ::setenv(name, values[gen() % 4], static_cast<int>(gen() % 2));
    }
    INFO("step " << step);
    REQUIRE(watched<0>() == now(0));
    REQUIRE(watched<1>() == now(1));
    REQUIRE(watched<2>() == now(2));
  }
  for (int n = 0; n < 3; ++n) ::unsetenv(names[static_cast<std::size_t>(n)]);
}
