#pragma once
// The Fashion-MNIST MLP of the AOT example (784 -> 128 relu -> 10), shared by its generator
// (gen.cpp) and its program (main.cpp): shapes and the generated entry points' batch sizes.
#include <cstdint>

namespace fmnist {

inline constexpr std::int64_t kPixels = 784, kHidden = 128, kClasses = 10;
inline constexpr std::int64_t kTrainBatch = 64, kEvalBatch = 1000;
// The training set's pixel mean and deviation (pixels in [0, 1]): the model standardises inputs.
inline constexpr double kMean = 0.2860, kStd = 0.3530;

}  // namespace fmnist
