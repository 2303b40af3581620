#pragma once
// StderrCapture: what the library writes to stderr (fd 2, so child processes' output too) while it
// lives, with DEBUG set to a value for that time.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace metagrad::test {

// Sets DEBUG for a scope and collects what is written to stderr meanwhile (fd 2, through a file).
class StderrCapture {
 public:
  explicit StderrCapture(const char* debug) : file_(std::tmpfile()) {
    if (const char* d = std::getenv("DEBUG")) saved_debug_ = d;
    ::setenv("DEBUG", debug, 1);
    std::fflush(stderr);
    saved_fd_ = ::dup(2);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    restore();
    if (file_) std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  // Ends the capture; the lines written.
  std::vector<std::string> lines() {
    restore();
    std::rewind(file_);
    std::vector<std::string> out;
    std::string line;
    for (int c; (c = std::fgetc(file_)) != EOF;)
      if (c == '\n')
        out.push_back(std::exchange(line, ""));
      else
        line += static_cast<char>(c);
    if (!line.empty()) out.push_back(line);
    std::fclose(std::exchange(file_, nullptr));
    return out;
  }

 private:
  void restore() {
    if (saved_fd_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_fd_, 2);
      ::close(std::exchange(saved_fd_, -1));
      saved_debug_.empty() ? ::unsetenv("DEBUG") : ::setenv("DEBUG", saved_debug_.c_str(), 1);
    }
  }
  std::FILE* file_;
  int saved_fd_ = -1;
  std::string saved_debug_;
};

}  // namespace metagrad::test
