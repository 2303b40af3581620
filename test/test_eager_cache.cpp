// The eager cache (runtime/lazy/schedule_cache.hpp): an eager op's plan found again by its op and
// its sources' dtypes, views and identities computes what a plan built anew would, bit for bit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "metagrad/metagrad.hpp"

using metagrad::Device;
using metagrad::Tensor;

TEST_CASE("eager ops planned from the eager cache compute what the op does", "[schedule][schedule_cache]") {
  // Shapes of one size (one hash slot's neighbours), ops of one and two sources, a source twice,
  // a cast (an op with an argument), a view (not cached): each against the host's arithmetic.
  const std::vector<metagrad::Dims> shapes = {{6}, {2, 3}, {3, 2}, {1, 6}};
  for (const std::string& dev : Device::available()) {
    if (dev != "CPU" && dev != "CLANG" && dev != "LLVM") continue;  // (the host's devices: seconds)
    std::mt19937 gen(63);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (int step = 0; step < 300; ++step) {
      const metagrad::Dims& shape = shapes[gen() % shapes.size()];
      const std::vector<std::int64_t> as_list(shape.begin(), shape.end());
      std::vector<float> x(6), y(6);
      for (float& v : x) v = u(gen);
      for (float& v : y) v = u(gen);
      // float32 or float64 sources, alike in all else: the dtypes are part of the key
      const bool wide = gen() % 3 == 0;
      auto make = [&](const std::vector<float>& v) {
        Tensor t = Tensor(v, shape, {.device = dev}).realize();
        return wide ? t.cast(metagrad::dtypes::float64).realize() : t;
      };
      Tensor a = make(x), b = make(y);
      int op = static_cast<int>(gen() % 7);
      INFO(dev << " step " << step << " op " << op << " wide " << wide << " shape "
               << metagrad::to_string(shape));
      if (op == 5) {  // a cast: its dtype, the op's argument, is part of the key
        std::vector<double> got = a.cast(metagrad::dtypes::float64).realize().to_vector<double>();
        for (std::size_t i = 0; i < 6; ++i) REQUIRE(got[i] == static_cast<double>(x[i]));
        continue;
      }
      Tensor r = op == 0   ? a + b
                 : op == 1 ? a + a
                 : op == 2 ? b * a
                 : op == 3 ? a - b
                 : op == 4 ? a.maximum(b)
                           : a + b.reshape({6}).flip(0).reshape(as_list);  // a view of b: planned anew
      auto check = [&]<class T>(std::vector<T> got) {
        for (std::size_t i = 0; i < 6; ++i) {
          T p = x[i], q = y[i], q_flipped = y[5 - i];
          T want = op == 0   ? p + q
                   : op == 1 ? p + p
                   : op == 2 ? q * p
                   : op == 3 ? p - q
                   : op == 4 ? std::max(p, q)
                             : p + q_flipped;
          REQUIRE(got[i] == want);
        }
      };
      r.realize();
      wide ? check(r.to_vector<double>()) : check(r.to_vector<float>());
    }
  }
}
