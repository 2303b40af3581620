// Inference only: loads the CNN's weights (examples/cnn_model.hpp) from a safetensors file that
// fashion_mnist_cnn --save=FILE wrote, and predicts Fashion-MNIST test images: no gradients, no
// optimiser, one forward pass per batch.
//
//   fashion_mnist_infer --weights=FILE [--device=NAME] [--data=DIR] [--test=N] [--show=N]
//                       [--min-accuracy=X]
//
// Prints the first --show predictions with their labels and the accuracy over --test images (0:
// all 10000). --min-accuracy makes a lower accuracy an error (exit status 3), for tests.
#include <cstdio>
#include <string>

#include "cnn_model.hpp"
#include "flags.hpp"

using namespace metagrad;

namespace {
const char* kClasses[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

int main(int argc, char** argv) try {
  std::string weights, device = getenv("DEVICE", Device::DEFAULT),
                       data = getenv("DATA", datasets::fashion_mnist_dir);
  long test_n = 0, show = 5;
  double min_accuracy = 0;
  examples::Flags flags(argv[0]);
  flags.add("weights", weights, "FILE").add("device", device, "NAME").add("data", data, "DIR");
  flags.add("test", test_n, "N").add("show", show, "N").add("min-accuracy", min_accuracy, "X");
  flags.parse(argc, argv);
  flags.require(!weights.empty(), "--weights=FILE is needed (fashion_mnist_cnn --save=FILE writes one)");
  flags.require(test_n >= 0 && show >= 0, "test and show must be >= 0");
  Device::DEFAULT = Device::canonicalize(device);

  examples::CNN model;  // initialised at random, then every tensor replaced by the file's
  std::printf("weights %s (%s)\n", weights.c_str(), nn::safe_load_metadata(weights)["model"].c_str());
  nn::load_state_dict(model, nn::safe_load(weights));

  datasets::FashionMNIST ds = datasets::load_fashion_mnist(data);
  datasets::ImageSet test = test_n ? ds.test.head(test_n) : ds.test;
  Tensor::NoGradGuard no_grad;
  long correct = 0;
  for (std::int64_t start = 0; start < test.size(); start += 500) {
    datasets::Batch b = test.batch(start, 500);
    Tensor probs = model(b.X).softmax(-1);
    std::vector<std::int32_t> pred = probs.argmax(-1).cast(dtypes::int32).to_vector<std::int32_t>();
    std::vector<float> best = probs.max(-1).to_vector<float>();
    std::vector<std::int32_t> label = b.Y.to_vector<std::int32_t>();
    for (std::size_t i = 0; i < pred.size(); ++i) {
      correct += pred[i] == label[i];
      if (start + static_cast<std::int64_t>(i) < show)
        std::printf("image %lld: %s (%.0f%%), labelled %s\n",
                    static_cast<long long>(start) + static_cast<long long>(i), kClasses[pred[i]],
                    100.0 * best[i], kClasses[label[i]]);
    }
  }
  double acc = double(correct) / double(test.size());
  std::printf("test accuracy %.2f%% (%ld/%ld)\n", 100 * acc, correct, test.size());
  if (acc < min_accuracy) {
    std::fprintf(stderr, "fashion_mnist_infer: accuracy %.4f is below --min-accuracy=%g\n", acc,
                 min_accuracy);
    return 3;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_infer: %s\n", e.what());
  return 1;
}
