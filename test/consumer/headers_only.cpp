// The header-only target alone: View in constant expressions, no runtime library linked.
#include <metagrad/shape/view.hpp>

static_assert(metagrad::View({2, 3}).permute({1, 0}).strides == metagrad::Dims{1, 3});
int main() { return 0; }
