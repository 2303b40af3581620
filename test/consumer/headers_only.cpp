// The header-only target alone: View in constant expressions and a static-path expression (Boost.Mp11
// comes through metagrad::headers), no runtime library linked.
#include <metagrad/fixed.hpp>
#include <metagrad/shape/view.hpp>

static_assert(metagrad::View({2, 3}).permute({1, 0}).strides == metagrad::Dims{1, 3});
int main() {
  namespace fx = metagrad::fixed;
  fx::Tensor<float, 2, 3> a{1, 2, 3, 4, 5, 6};
  fx::Tensor<float, 3> s = (a * 2.f).sum<0>();
  return s(0) == 10.f && s(2) == 18.f ? 0 : 1;
}
