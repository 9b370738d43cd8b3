// Test helpers that read /proc/<pid>/... of processes that may exit at any
// moment. They use read(2): a process that vanishes mid-read makes the read
// fail with ESRCH, which std::ifstream's buffer turns into an exception.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace cohort::testing {

// The file's text; empty when it cannot be read (the process is gone).
inline std::string read_proc_file(const std::string& path) {
  std::string text;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  ::close(fd);
  return text;
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...); '\0' when gone.
inline char process_state(pid_t pid) {
  std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.size() < paren + 3 ? '\0' : stat[paren + 2];
}

// The parent pid from /proc/<pid>/stat; 0 when gone.
inline pid_t parent_pid(pid_t pid) {
  std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.size() < paren + 4 ? 0 : std::atoi(stat.c_str() + paren + 4);
}

}  // namespace cohort::testing
