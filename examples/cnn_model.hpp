#pragma once
// The convolutional net of fashion_mnist_cnn (which trains it and saves its weights) and
// fashion_mnist_infer (which loads them and predicts): two 3x3 convolutions with 2x2 max pooling,
// then a linear classifier. Its layers are declared once, reflected with Boost.Hana: nn::state_dict
// names them ("c1.weight", ...), the safetensors file's names.
#include <metagrad/metagrad.hpp>

namespace examples {

struct CNN {
  BOOST_HANA_DEFINE_STRUCT(CNN, (metagrad::nn::Conv2d, c1), (metagrad::nn::Conv2d, c2),
                           (metagrad::nn::Linear, fc));
  CNN() : c1(1, 8, 3), c2(8, 16, 3), fc(16 * 5 * 5, 10) {}
  // x: (n, 784) pixels in [0, 1], standardised here with the training set's mean and deviation.
  metagrad::Tensor operator()(const metagrad::Tensor& x) const {
    metagrad::Tensor h = ((x - 0.2860) / 0.3530).reshape({-1, 1, 28, 28});
    h = c1(h).relu().max_pool2d();  // (n, 8, 13, 13)
    h = c2(h).relu().max_pool2d();  // (n, 16, 5, 5)
    return fc(h.flatten(1));
  }
};

}  // namespace examples
