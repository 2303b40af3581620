#pragma once
// The Fashion-MNIST examples' command line on the dynamic path (fashion_mnist, fashion_mnist_ddp):
// --epochs=N --batch=N --subset=N --lr=X --device=NAME --data=DIR, each defaulting to its
// environment variable (EPOCHS, BS, SUBSET, LR, DEVICE, DATA; flags win), and --min-accuracy=X
// where the example checks one. Parsed by examples::Flags (flags.hpp).
#include <cstdlib>
#include <metagrad/metagrad.hpp>
#include <string>

#include "flags.hpp"

namespace examples {

struct Options {
  long epochs = metagrad::getenv_int("EPOCHS", 1), batch = metagrad::getenv_int("BS", 64),
       subset = metagrad::getenv_int("SUBSET", 30000);
  double lr = std::strtod(metagrad::getenv("LR", "0.004").c_str(), nullptr), min_accuracy = 0;
  std::string device = metagrad::getenv("DEVICE", metagrad::Device::DEFAULT),
              data = metagrad::getenv("DATA", metagrad::datasets::fashion_mnist_dir);
};

// The Fashion-MNIST flags over the environment's defaults; --min-accuracy only where `min_accuracy`.
// Each example checks the ranges its own way (Flags::require).
inline Options parse_options(int argc, char** argv, bool min_accuracy) {
  Options o;
  Flags flags(argv[0]);
  flags.add("epochs", o.epochs, "N").add("batch", o.batch, "N").add("subset", o.subset, "N");
  flags.add("lr", o.lr, "X").add("device", o.device, "NAME").add("data", o.data, "DIR");
  if (min_accuracy) flags.add("min-accuracy", o.min_accuracy, "X");
  flags.parse(argc, argv);
  o.device = metagrad::Device::canonicalize(o.device);
  return o;
}

}  // namespace examples
