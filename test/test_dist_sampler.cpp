// ImageSet::epoch_indices: the rank/world slice of an epoch that data-parallel training reads
// (no MPI needed: the ranks agree by drawing the same permutation, which this checks directly).
#include <algorithm>
#include <catch2/catch.hpp>
#include <metagrad/datasets/fashion_mnist.hpp>
#include <random>
#include <set>

using namespace metagrad;
using Catch::Matchers::Contains;

namespace {
datasets::ImageSet fake_set(std::int64_t n) {
  return {1, 1, std::vector<std::uint8_t>(static_cast<std::size_t>(n)),
          std::vector<std::uint8_t>(static_cast<std::size_t>(n))};
}
}  // namespace

TEST_CASE("epoch_indices: the ranks' slices are the one-process epoch, batch by batch", "[fashion_mnist]") {
  std::mt19937 g(3);
  for (int trial = 0; trial < 60; ++trial) {
    std::int64_t n = g() % 500;
    int world = 1 + static_cast<int>(g() % 5);
    std::int64_t b = 1 + g() % 9;  // each rank's batch
    std::uint64_t seed = g();
    std::int64_t epoch = g() % 4;
    auto set = fake_set(n);
    std::vector<std::int64_t> whole = set.epoch_indices(seed, epoch);
    INFO("n=" << n << " world=" << world << " b=" << b);
    // world = 1: a permutation of [0, n), the same for the same seed and epoch, another for the next.
    std::vector<std::int64_t> sorted = whole;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(sorted[static_cast<std::size_t>(i)] == i);
    CHECK(set.epoch_indices(seed, epoch) == whole);
    if (n > 10) CHECK(set.epoch_indices(seed, epoch + 1) != whole);
    std::set<std::int64_t> seen;
    for (int r = 0; r < world; ++r) {
      std::vector<std::int64_t> mine = set.epoch_indices(seed, epoch, r, world);
      REQUIRE(static_cast<std::int64_t>(mine.size()) == n / world);
      for (std::int64_t k = 0; k < static_cast<std::int64_t>(mine.size()); ++k) {
        // Rank r's k-th example is in its batch k / b, and that batch is its share of the
        // one-process batch k / b of b * world examples.
        std::int64_t s = k / b, pos = s * b * world + (k % b) * world + r;
        REQUIRE(pos / (b * world) == s);
        REQUIRE(mine[static_cast<std::size_t>(k)] == whole[static_cast<std::size_t>(pos)]);
        REQUIRE(seen.insert(mine[static_cast<std::size_t>(k)]).second);  // no two ranks share an example
      }
    }
  }
  auto set = fake_set(10);
  REQUIRE_THROWS_WITH(set.epoch_indices(1, 0, 2, 2), Contains("rank 2 of world 2"));
  REQUIRE_THROWS_WITH(set.epoch_indices(1, 0, 0, 0), Contains("rank 0 of world 0"));
}
