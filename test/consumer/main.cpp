// A project outside the tree: links the installed runtime, checks a ShapeTracker round trip, a
// realized Tensor and that version.hpp states the version the build system found (EXPECTED_VERSION,
// from find_package or from pkg-config --modversion).
#include <metagrad/metagrad.hpp>
#include <string>

int main() {
  metagrad::ShapeTracker st({4, 6});
  st.permute({1, 0}).reshape({24});
  st.reshape({6, 4}).simplify();
  if (st.views().size() != 1 || st.views()[0].strides != metagrad::Dims{1, 6}) return 1;
  metagrad::Tensor sum = metagrad::Tensor({1.0f, 2.0f}, {.device = "CPU"}).sum();
  if (sum.item() != 3.0f) return 2;
  static_assert(METAGRAD_VERSION ==
                METAGRAD_VERSION_MAJOR * 10000 + METAGRAD_VERSION_MINOR * 100 + METAGRAD_VERSION_PATCH);
  return std::string(METAGRAD_VERSION_STRING) == EXPECTED_VERSION ? 0 : 3;
}
