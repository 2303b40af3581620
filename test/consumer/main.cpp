// A project outside the tree: links the installed runtime and checks a ShapeTracker round trip.
#include <metagrad/metagrad.hpp>

int main() {
  metagrad::ShapeTracker st({4, 6});
  st.permute({1, 0}).reshape({24});
  st.reshape({6, 4}).simplify();
  return st.views().size() == 1 && st.views()[0].strides == metagrad::Dims{1, 6} ? 0 : 1;
}
