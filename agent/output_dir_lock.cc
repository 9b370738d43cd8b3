// OutputDirLock: flock(2) on OUTPUT_DIR/.cohort.lock, with the holder's
// description in the file.
#include "agent/output_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace cohort::agent {
namespace {

std::string lock_path(const std::string& output_dir) {
  return output_dir + (output_dir.empty() || output_dir.back() != '/' ? "/" : "") + OutputDirLock::kFileName;
}

std::string read_holder(int fd) {
  char buffer[512];
  ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "";
  std::string text(buffer, size_t(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

std::string output_dir_in_use(const std::string& output_dir, const std::string& holder) {
  return "output_dir " + output_dir + " is in use by " + (holder.empty() ? "another process" : holder) +
         " (it holds " + lock_path(output_dir) +
         "); two runs writing one folder interleave their checkpoints and metrics: wait for it to end, "
         "or set job.output_dir (--set job.output_dir=...)";
}

Result<OutputDirLock> OutputDirLock::acquire(const std::string& output_dir, const std::string& holder) {
  const std::string path = lock_path(output_dir);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  // A few tries: holder_of's probe holds the lock for microseconds.
  int tries = 0;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (err == EWOULDBLOCK && ++tries < 5) {
      ::usleep(10000);
      continue;
    }
    std::string current = read_holder(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) return failed_precondition(output_dir_in_use(output_dir, current));
    return io_error("cannot lock " + path + ": " + std::strerror(err));
  }
  std::string text = holder + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
    int err = errno;
    ::close(fd);
    return io_error("cannot write " + path + ": " + std::strerror(err));
  }
  return OutputDirLock(fd, output_dir);
}

std::string OutputDirLock::holder_of(const std::string& output_dir) {
  const std::string path = lock_path(output_dir);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);  // free: nobody holds it
  } else {
    holder = read_holder(fd);
    if (holder.empty()) holder = "another process";
  }
  ::close(fd);
  return holder;
}

OutputDirLock::OutputDirLock(OutputDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), output_dir_(std::move(other.output_dir_)) {}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    output_dir_ = std::move(other.output_dir_);
  }
  return *this;
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace cohort::agent
