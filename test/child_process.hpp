#pragma once
// Tests that need other processes run this test binary again, limited to one hidden child test
// case, with some environment variables overridden; TempDir is a directory removed at scope exit.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace metagrad::test {

// Starts this binary running only the test case `name`, with `env` (NAME=value) overriding the environment.
inline pid_t spawn_child(const std::string& name, const std::vector<std::string>& env) {
  std::vector<std::string> vars = env;
  auto overridden = [&](const std::string& var) {
    for (const auto& v : env)
      if (var.compare(0, v.find('=') + 1, v, 0, v.find('=') + 1) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) vars.emplace_back(*e);
  std::vector<char*> envp, argv;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string(), test = name;
  argv = {self.data(), test.data(), nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(self.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// The child's exit code (-1 when it did not exit normally).
inline int wait_for(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (::mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace metagrad::test
