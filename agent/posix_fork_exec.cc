// fork + exec of one worker, with exec failures reported through a pipe.
//
// The child writes {stage, errno} to a CLOEXEC pipe when chdir or exec fails;
// a successful exec closes the pipe, so the parent reads either nothing (the
// program runs) or the reason it does not.
#include "agent/posix_fork_exec.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace cohort::agent {
namespace {

enum class ChildStage : int { kChdir = 1, kExec = 2 };
struct ChildFailure {
  ChildStage stage;
  int error;
};

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// argv[0] as execve needs it: a path. A bare name is looked up in the
// worker's own PATH (not the agent's), as a shell started with that
// environment would.
cohort::Result<std::string> resolve_program(const SpawnOptions& options) {
  const std::string& program = options.argv[0];
  if (program.find('/') != std::string::npos) return program;
  auto it = options.env.find("PATH");
  std::string path = it != options.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= path.size();) {
    size_t colon = path.find(':', start);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = colon > start ? path.substr(start, colon - start) : ".";
    std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return not_found(
      fmt::format("cannot run '{}': not found in the worker's PATH ({})", program, path));
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(pid_t parent, const char* path, char* const* argv, char* const* envp,
                             const char* working_dir, int stdin_fd, int stdout_fd, int stderr_fd,
                             int failure_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the agent died before prctl took effect
  // exec keeps the signal mask and ignored signals; the agent's (blocked
  // SIGTERM for signalfd, ignored SIGPIPE) must not leak into workers.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  dup2(stdin_fd, 0);
  dup2(stdout_fd, 1);
  dup2(stderr_fd, 2);
  // Descriptors other threads opened without O_CLOEXEC (sockets, files)
  // must not leak into workers; this marks them all close-on-exec.
  close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
  ChildFailure failure;
  if (working_dir[0] != '\0' && chdir(working_dir) != 0) {
    failure = {ChildStage::kChdir, errno};
  } else {
    execve(path, argv, envp);
    failure = {ChildStage::kExec, errno};
  }
  ssize_t ignored = write(failure_fd, &failure, sizeof failure);
  (void)ignored;
  _exit(127);
}

// Blocks until the child has exec'ed (the pipe closes: nullopt) or failed.
std::optional<ChildFailure> read_child_failure(int fd) {
  ChildFailure failure;
  ssize_t n;
  do {
    n = read(fd, &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof failure)) return failure;
  return std::nullopt;
}

cohort::Status describe_failure(const SpawnOptions& options, const std::string& path,
                                const ChildFailure& failure) {
  const std::string& program = options.argv[0];
  if (failure.stage == ChildStage::kChdir) {
    return io_error(fmt::format("cannot run '{}': working directory '{}': {}", program,
                                options.working_dir, strerror(failure.error)));
  }
  std::string resolved = path == program ? "" : " (" + path + ")";
  return io_error(fmt::format("cannot run '{}'{}: {}", program, resolved, strerror(failure.error)));
}

}  // namespace

cohort::Result<StartedProcess> fork_exec_worker(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return invalid_argument("cannot start a worker: the command (argv) is empty");
  }
  COHORT_ASSIGN_OR_RETURN(std::string path, resolve_program(options));

  std::vector<char*> argv;
  for (const auto& arg : options.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : options.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, failure[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &failure[0], &failure[1], &devnull}) {
      close_fd(*fd);
    }
  };
  if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(failure, O_CLOEXEC) != 0) {
    cohort::Status status = errno_error("creating pipes for worker '" + options.argv[0] + "'");
    close_all();
    return status;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    cohort::Status status = errno_error("fork for worker '" + options.argv[0] + "'");
    close_all();
    return status;
  }
  if (pid == 0) {
    exec_child(parent, path.c_str(), argv.data(), envp.data(), options.working_dir.c_str(), devnull,
               out[1], err[1], failure[1]);
  }
  // Also from the parent, so the group exists before anyone signals it.
  setpgid(pid, pid);
  close_fd(out[1]);
  close_fd(err[1]);
  close_fd(failure[1]);
  close_fd(devnull);

  std::optional<ChildFailure> child_failure = read_child_failure(failure[0]);
  close_fd(failure[0]);
  if (child_failure) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    close_all();
    return describe_failure(options, path, *child_failure);
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  return StartedProcess{pid, out[0], err[0]};
}

}  // namespace cohort::agent
