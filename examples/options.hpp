#pragma once
// The command line of the Fashion-MNIST examples on the dynamic path (fashion_mnist,
// fashion_mnist_ddp): --epochs=N --batch=N --subset=N --lr=X --device=NAME --data=DIR, each
// defaulting to its environment variable (EPOCHS, BS, SUBSET, LR, DEVICE, DATA; flags win), and
// --min-accuracy=X where the example checks one. Each example checks the values its own way.
#include <cstdio>
#include <cstdlib>
#include <metagrad/metagrad.hpp>
#include <string>

namespace examples {

struct Options {
  long epochs = metagrad::getenv_int("EPOCHS", 1), batch = metagrad::getenv_int("BS", 64),
       subset = metagrad::getenv_int("SUBSET", 30000);
  double lr = std::strtod(metagrad::getenv("LR", "0.004").c_str(), nullptr), min_accuracy = 0;
  std::string device = metagrad::getenv("DEVICE", metagrad::Device::DEFAULT),
              data = metagrad::getenv("DATA", metagrad::datasets::fashion_mnist_dir);
};

// The flags of argv over the environment's defaults; --min-accuracy only where `min_accuracy`. An
// unknown flag prints the usage and exits with 2 (--help and -h: 0).
inline Options parse_options(int argc, char** argv, bool min_accuracy) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      std::string f = metagrad::detail::cat("--", flag, "=");
      return a.rfind(f, 0) == 0 ? argv[i] + f.size() : nullptr;
    };
    if (const char* v = value("epochs"))
      o.epochs = std::atol(v);
    else if (const char* v = value("batch"))
      o.batch = std::atol(v);
    else if (const char* v = value("subset"))
      o.subset = std::atol(v);
    else if (const char* v = value("lr"))
      o.lr = std::atof(v);
    else if (const char* v = value("device"))
      o.device = metagrad::Device::canonicalize(v);
    else if (const char* v = value("data"))
      o.data = v;
    else if (const char* v = min_accuracy ? value("min-accuracy") : nullptr)
      o.min_accuracy = std::atof(v);
    else {
      std::fprintf(
          stderr, "usage: %s [--epochs=N] [--batch=N] [--subset=N] [--lr=X] [--device=NAME] [--data=DIR]%s\n",
          argv[0], min_accuracy ? " [--min-accuracy=X]" : "");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

}  // namespace examples
