// Whole-file writes by rename (see atomic_file.h).
#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace cohort {

Status write_file_atomically(const std::string& path, const std::string& text, unsigned mode) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return errno_error("cannot write " + tmp);
  size_t written = 0;
  bool ok = ::fchmod(fd, mode) == 0;  // the umask may have narrowed it; a leftover tmp may be wider
  while (ok && written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    ok = n > 0;
    if (ok) written += size_t(n);
  }
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    Status error = errno_error("cannot write " + tmp);
    ::unlink(tmp.c_str());
    return error;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status error = errno_error("cannot rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return error;
  }
  return Status::ok();
}

}  // namespace cohort
