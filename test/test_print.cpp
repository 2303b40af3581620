// Printing values (`std::cout << t`) on both paths: PyTorch's text for the same values (taken from
// PyTorch 1.13's repr), summarised past 1000 elements, and the static path printing what the
// dynamic path prints for the same data.
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "metagrad/fixed.hpp"
#include "metagrad/metagrad.hpp"

using namespace metagrad;

namespace {
template <class T>
std::string text(const T& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}
}  // namespace

TEST_CASE("Tensor prints its values as PyTorch does", "[print]") {
  CHECK(text(Tensor(std::vector<float>{1, 2.5f, -3, 4}, {2, 2})) ==
        "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]])");
  CHECK(text(Tensor(std::vector<float>{1, 2, 3}, {3})) == "tensor([1., 2., 3.])");
  CHECK(text(Tensor(std::vector<float>{1e-5f, 1}, {2})) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(text(Tensor(std::vector<float>{3.5f}, {})) == "tensor(3.5000)");
  CHECK(text(Tensor::arange(8).reshape({2, 2, 2}).cast(dtypes::int32)) ==
        "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], dtype=int32)");
  CHECK(text(Tensor(std::vector<float>{1, 0}, {2}).cast(dtypes::bool_)) == "tensor([ True, False])");
  CHECK(text(Tensor(std::vector<float>{NAN, -INFINITY, 2}, {3})) == "tensor([nan, -inf, 2.])");
  CHECK(text(Tensor::ones({2}, {.requires_grad = true})) == "tensor([1., 1.], requires_grad=True)");
  // A row wraps at 80 columns.
  CHECK(text(Tensor::arange(30.0)) ==
        "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
        "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
        "        28., 29.])");
  // Past 1000 elements: the first and last three of each dimension.
  CHECK(text(Tensor::arange(2000.0)) == "tensor([   0.,    1.,    2.,  ..., 1997., 1998., 1999.])");
  CHECK(text(Tensor::arange(10000.0).reshape({100, 100})) ==
        "tensor([[   0.,    1.,    2.,  ...,   97.,   98.,   99.],\n"
        "        [ 100.,  101.,  102.,  ...,  197.,  198.,  199.],\n"
        "        [ 200.,  201.,  202.,  ...,  297.,  298.,  299.],\n"
        "        ...,\n"
        "        [9700., 9701., 9702.,  ..., 9797., 9798., 9799.],\n"
        "        [9800., 9801., 9802.,  ..., 9897., 9898., 9899.],\n"
        "        [9900., 9901., 9902.,  ..., 9997., 9998., 9999.]])");
}

TEST_CASE("fixed::Tensor prints what Tensor prints for the same values", "[print]") {
  fixed::Tensor<float, 2, 3> a{0.5f, -1, 2, 3, 4e-3f, 5};
  std::vector<float> v(a.data(), a.data() + 6);
  CHECK(text(a) == text(Tensor(v, {2, 3})));
  fixed::Tensor<float, 2, 2, 2> b{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(text(b) == "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  fixed::Tensor<int, 3> c{1, -20, 300};
  CHECK(text(c) == "tensor([  1, -20, 300])");
}
