#pragma once
// The examples' command-line flags: `Flags` binds --name=value flags to variables and parses each
// value whole: --epochs=2abc, --lr= and --lr=fast are errors that name the flag, not 2, 0 and 0. An
// unknown flag or a bad value prints the usage and exits with 2 (--help and -h: the usage, 0).
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace examples {

class Flags {
 public:
  explicit Flags(std::string program) : program_(std::move(program)) {}

  // Binds --name=VALUE to `var` (an integer, a floating-point number or a string); `what` names the
  // value in the usage ("N", "X", "DIR").
  template <class T>
  Flags& add(std::string name, T& var, std::string what) {
    flags_.push_back(
        {std::move(name), std::move(what), [&var](const std::string& v) { return read(v, var); }});
    return *this;
  }

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") usage(stdout, 0);
      const Flag* flag = nullptr;
      for (const Flag& f : flags_)
        if (a.rfind("--" + f.name + "=", 0) == 0) flag = &f;
      if (!flag) {
        std::fprintf(stderr, "%s: unknown option %s\n", program_.c_str(), a.c_str());
        usage(stderr, 2);
      }
      std::string value = a.substr(flag->name.size() + 3);
      if (!flag->set(value)) {
        std::fprintf(stderr, "%s: --%s=%s: not a valid %s\n", program_.c_str(), flag->name.c_str(),
                     value.c_str(), flag->what.c_str());
        usage(stderr, 2);
      }
    }
  }

  // Ends the program with the usage and `error` on stderr when `ok` is false (a value out of range).
  void require(bool ok, const char* error) const {
    if (ok) return;
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), error);
    usage(stderr, 2);
  }

 private:
  struct Flag {
    std::string name, what;
    std::function<bool(const std::string&)> set;
  };

  template <class T>
  static bool read(const std::string& v, T& out) {
    if constexpr (std::is_same_v<T, std::string>) {
      out = v;
      return true;
    } else if constexpr (std::is_integral_v<T>) {
      T x{};
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || ec != std::errc{} || end != v.data() + v.size()) return false;
      out = x;
      return true;
    } else {
      static_assert(std::is_floating_point_v<T>,
                    "Flags::add: an integer, a floating-point number or a string");
      char* end = nullptr;
      errno = 0;
      double x = std::strtod(v.c_str(), &end);
      if (v.empty() || errno != 0 || end != v.c_str() + v.size()) return false;
      out = static_cast<T>(x);
      return true;
    }
  }

  [[noreturn]] void usage(std::FILE* to, int code) const {
    std::fprintf(to, "usage: %s", program_.c_str());
    for (const Flag& f : flags_) std::fprintf(to, " [--%s=%s]", f.name.c_str(), f.what.c_str());
    std::fprintf(to, "\n");
    std::exit(code);
  }

  std::string program_;
  std::vector<Flag> flags_;
};

}  // namespace examples
