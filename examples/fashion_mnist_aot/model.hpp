#pragma once
// The Fashion-MNIST MLP of the AOT example (784 -> 128 relu -> 10): shapes, shared by the generator
// (gen.cpp) and the program (main.cpp), and the static model itself (for the generator).
#include <cstdint>

namespace fmnist {

inline constexpr std::int64_t kPixels = 784, kHidden = 128, kClasses = 10;
inline constexpr std::int64_t kTrainBatch = 64, kEvalBatch = 1000;
// The training set's pixel mean and deviation (pixels in [0, 1]): the model standardises inputs.
inline constexpr float kMean = 0.2860f, kStd = 0.3530f;

}  // namespace fmnist
