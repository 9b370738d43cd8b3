#include "coordinator/open_files_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace cohort::coordinator {

namespace {

// setrlimit refuses a soft RLIMIT_NOFILE above fs.nr_open, even where the
// hard limit says unlimited.
rlim_t kernel_open_files_cap() {
  std::ifstream in("/proc/sys/fs/nr_open");
  unsigned long long n = 0;
  if (in >> n && n > 0) return rlim_t(n);
  return rlim_t(1) << 20;  // the kernel's default nr_open
}

uint64_t as_u64(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : uint64_t(v); }

}  // namespace

Result<OpenFilesLimit> raise_open_files_limit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return internal_error(std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
  }
  OpenFilesLimit out{as_u64(lim.rlim_cur), as_u64(lim.rlim_cur), as_u64(lim.rlim_max)};
  rlim_t target = lim.rlim_max == RLIM_INFINITY ? kernel_open_files_cap() : lim.rlim_max;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur >= target) return out;
  struct rlimit raised = lim;
  raised.rlim_cur = target;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    return internal_error("setrlimit(RLIMIT_NOFILE, soft " + std::to_string(target) +
                          "): " + std::strerror(errno));
  }
  out.after = as_u64(target);
  return out;
}

}  // namespace cohort::coordinator
