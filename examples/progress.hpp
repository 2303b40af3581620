#pragma once
// The examples' progress line. On a terminal it is redrawn in place (\r) at most ten times a second;
// anywhere else (a log file, a pipe, CI) nothing is written until the line is done, and then the
// finished line once, so logs hold one line per epoch and no carriage returns.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace examples {

class Progress {
 public:
  explicit Progress(std::FILE* to = stdout) : to_(to), tty_(::isatty(::fileno(to)) == 1) {}

  // A bar of `width` cells, `done` of `total` filled: "[#####.....]".
  static std::string bar(long done, long total, int width = 24) {
    int fill = static_cast<int>(width * std::clamp(done, 0L, std::max(total, 1L)) / std::max(total, 1L));
    return "[" + std::string(static_cast<std::size_t>(fill), '#') +
           std::string(static_cast<std::size_t>(width - fill), '.') + "]";
  }

  // Whether a redraw is due now (always for the last one): build the line only then.
  bool due(bool last = false) const {
    return last || (tty_ && std::chrono::steady_clock::now() - drawn_ >= std::chrono::milliseconds(100));
  }

  // Shows `line`; `last` ends it (a newline).
  void show(const std::string& line, bool last = false) {
    if (!due(last)) return;
    drawn_ = std::chrono::steady_clock::now();
    if (tty_)
      std::fprintf(to_, "\r%s%s", line.c_str(), last ? "\n" : " ");
    else if (last)
      std::fprintf(to_, "%s\n", line.c_str());
    std::fflush(to_);
  }

 private:
  std::FILE* to_;
  bool tty_;
  std::chrono::steady_clock::time_point drawn_{};
};

}  // namespace examples
