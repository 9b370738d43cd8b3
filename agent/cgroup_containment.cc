// Worker cgroups under the agent's own delegated cgroup v2 (see the header):
// finding that cgroup, the instance's locked group, leftovers of dead
// instances, killing and removing.
#include "agent/cgroup_containment.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr const char* kPrefix = "cohort-";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Status write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening " + path);
  ssize_t n = ::write(fd, text.data(), text.size());
  int saved = errno;
  ::close(fd);
  errno = saved;
  if (n != static_cast<ssize_t>(text.size())) return errno_error("writing '" + text + "' to " + path);
  return Status::ok();
}

bool is_cgroup2(const std::string& path) {
  struct statfs fs{};
  return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && std::isdigit(uint8_t(s[i + 1])) && std::isdigit(uint8_t(s[i + 2])) &&
        std::isdigit(uint8_t(s[i + 3]))) {
      out += char(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Sub-cgroup directories of `path` (not recursive).
std::vector<std::string> child_dirs(const std::string& path) {
  std::vector<std::string> out;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return out;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.push_back(path + "/" + e->d_name);
    }
  }
  ::closedir(dir);
  return out;
}

// Every pid in the cgroup at `path` and below.
void collect_pids(const std::string& path, std::vector<pid_t>* out) {
  std::istringstream procs(read_file(path + "/cgroup.procs"));
  for (pid_t pid; procs >> pid;) out->push_back(pid);
  for (const auto& child : child_dirs(path)) collect_pids(child, out);
}

// Removes the cgroup at `path` and every one below it, children first;
// false when one still has processes.
bool remove_tree(const std::string& path) {
  bool ok = true;
  for (const auto& child : child_dirs(path)) ok = remove_tree(child) && ok;
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) ok = false;
  return ok;
}

// Path-safe: letters, digits, '.', '_' and '-', starting with a letter or
// digit (a name like "cgroup.procs" would clash with the control files).
std::string safe_name(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 96)) out += std::isalnum(uint8_t(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  if (out.empty() || !std::isalnum(uint8_t(out[0]))) out = "w" + out;
  return out;
}

bool cgroup_populated(const std::string& path) {
  std::string events = read_file(path + "/cgroup.events");
  return events.find("populated 1") != std::string::npos;
}

// SIGKILLs every process in the cgroup at `path` and below.
Status kill_cgroup(const std::string& path, bool use_kill_file) {
  if (use_kill_file) {
    Status s = write_file(path + "/cgroup.kill", "1");
    if (s || !cgroup_populated(path)) return Status::ok();
    // Before Linux 5.14 there is no cgroup.kill: freeze and kill.
  }
  // Frozen, nothing in the tree can fork a process the loop below misses.
  bool frozen = write_file(path + "/cgroup.freeze", "1").is_ok();
  if (frozen) {
    for (auto end = Clock::now() + 1s; Clock::now() < end;) {
      if (read_file(path + "/cgroup.events").find("frozen 1") != std::string::npos) break;
      std::this_thread::sleep_for(1ms);
    }
  }
  // Without a freezer (before 5.2), rounds until no process is left.
  for (int round = 0; round < (frozen ? 1 : 20); ++round) {
    std::vector<pid_t> pids;
    collect_pids(path, &pids);
    if (pids.empty()) break;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
  }
  // SIGKILL ends frozen processes too; thawing lets the kernel finish them
  // on kernels where it would not, and leaves the group usable.
  if (frozen) (void)write_file(path + "/cgroup.freeze", "0");
  return Status::ok();
}

// Forks a child that moves itself into `probe` and exits: the one way to
// know that this process may move processes there, which delegation decides
// (root in a container may create cgroups it cannot move anything into).
// The child closes `lock_fd` first: a copy of it would hold the instance's
// lock past the instance's death.
Status probe_moving_into(const std::string& probe, int lock_fd) {
  std::string procs = probe + "/cgroup.procs";
  int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("opening " + procs);
  pid_t child = ::fork();
  if (child == 0) {  // async-signal-safe calls only
    ::close(lock_fd);
    _exit(::write(fd, "0", 1) == 1 ? 0 : (errno & 0x7f));
  }
  ::close(fd);
  if (child < 0) return errno_error("fork");
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  int err = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
  return permission_denied("cannot move a process into " + probe + ": " + std::strerror(err));
}

}  // namespace

Result<std::string> own_cgroup_dir() {
  std::string relative;
  bool found = false;
  std::istringstream cgroups(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(cgroups, line);) {
    if (line.rfind("0::", 0) == 0) {
      relative = line.substr(3);
      found = true;
    }
  }
  if (!found) return not_found("this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)");
  std::istringstream mounts(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    // id parent major:minor root mount-point options [optional...] - type source super-options
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    root = unescape_mount_path(root);
    point = unescape_mount_path(point);
    if (root == "/") return relative == "/" ? point : point + relative;
    if (relative == root) return point;
    if (relative.rfind(root + "/", 0) == 0) return point + relative.substr(root.size());
  }
  return not_found("no cgroup v2 mount shows this process's cgroup " + relative + " (/proc/self/mountinfo)");
}

Result<std::unique_ptr<CgroupContainment>> CgroupContainment::open(const CgroupOptions& options) {
  std::string parent = options.parent;
  if (parent.empty()) {
    COHORT_ASSIGN_OR_RETURN(parent, own_cgroup_dir());
  }
  if (!is_cgroup2(parent)) return failed_precondition(parent + " is not a cgroup v2 directory");

  // Leftovers first: groups of instances that are gone.
  int leftovers = 0;
  for (const auto& path : child_dirs(parent)) {
    if (path.rfind(parent + "/" + kPrefix, 0) != 0) continue;
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      std::vector<pid_t> pids;
      collect_pids(path, &pids);
      (void)kill_cgroup(path, options.use_kill_file);
      for (auto end = Clock::now() + 5s; cgroup_populated(path) && Clock::now() < end;) {
        std::this_thread::sleep_for(5ms);
      }
      if (remove_tree(path)) {
        leftovers += int(pids.size());
        if (!pids.empty()) spdlog::warn("killed {} process(es) left behind by a dead cohort agent or run in {}", pids.size(), path);
      } else {
        spdlog::warn("cannot remove the leftover cgroup {}: processes remain", path);
      }
    }
    ::close(fd);
  }

  std::string dir = parent + "/" + kPrefix + safe_name(options.owner) + "-" + std::to_string(::getpid());
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return errno_error("cannot create the cgroup " + dir + " (the host does not delegate " + parent + " to cohort)");
    }
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::faccessat(fd, "cgroup.procs", F_OK, 0) == 0) {
      std::unique_ptr<CgroupContainment> c(new CgroupContainment(dir, fd, options.use_kill_file));
      c->leftovers_killed_ = leftovers;
      // A probe worker cgroup: creating one and moving a process there.
      COHORT_ASSIGN_OR_RETURN(WorkerCgroup probe, c->create("probe", "probe"));
      ::close(probe.procs_fd);
      Status moved = probe_moving_into(probe.path, fd);
      (void)c->remove(probe.path);
      if (!moved) return moved;
      return c;
    }
    // Another instance's clean-up took it between mkdir and flock: again.
    if (fd >= 0) ::close(fd);
    std::this_thread::sleep_for(10ms);
  }
  return unavailable("cannot hold the cgroup " + dir + ": another process keeps removing it");
}

CgroupContainment::~CgroupContainment() {
  if (!dir_.empty()) {
    (void)kill(dir_);
    for (auto end = Clock::now() + 5s; populated(dir_) && Clock::now() < end;) std::this_thread::sleep_for(5ms);
    if (!remove_tree(dir_)) spdlog::warn("cannot remove the cgroup {}: processes remain", dir_);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<WorkerCgroup> CgroupContainment::create(const std::string& group, const std::string& name) {
  std::string group_dir = dir_ + "/" + safe_name(group);
  if (::mkdir(group_dir.c_str(), 0755) != 0 && errno != EEXIST) return errno_error("creating the cgroup " + group_dir);
  std::string base = group_dir + "/" + safe_name(name);
  for (int n = 1; n <= 1000; ++n) {
    std::string path = n == 1 ? base : base + "." + std::to_string(n);
    if (::mkdir(path.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;
      return errno_error("creating the cgroup " + path);
    }
    std::string procs = path + "/cgroup.procs";
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      Status s = errno_error("opening " + procs);
      ::rmdir(path.c_str());
      return s;
    }
    return WorkerCgroup{path, fd};
  }
  return failed_precondition("1000 cgroups named " + base + " exist already");
}

Status CgroupContainment::kill(const std::string& path) const { return kill_cgroup(path, use_kill_file_); }

bool CgroupContainment::populated(const std::string& path) const { return cgroup_populated(path); }

bool CgroupContainment::remove(const std::string& path) const {
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return false;
  auto slash = path.rfind('/');
  std::string group = path.substr(0, slash);
  if (group != dir_) ::rmdir(group.c_str());  // fails while other workers of the attempt are there
  return true;
}

}  // namespace cohort::agent
