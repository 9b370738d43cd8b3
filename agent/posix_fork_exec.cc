// fork of the keeper (agent/process_keeper.cc), which forks and execs the
// worker; exec failures come back through a pipe.
//
// The worker writes {stage, errno} to a CLOEXEC pipe when chdir or exec
// fails; a successful exec closes it, so the agent reads either nothing (the
// program runs) or the reason it does not. The worker's pid comes first, on
// the report pipe, which later carries its exit.
#include "agent/posix_fork_exec.h"

#include "agent/process_keeper.h"

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

// Reads one record; false at end of file (or an error that ends it).
bool read_record(int fd, KeeperRecord* record) {
  ssize_t n;
  do {
    n = read(fd, record, sizeof *record);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof *record);
}

cohort::Status describe_failure(const SpawnOptions& options, const std::string& path,
                                const WorkerCgroup* cgroup, const KeeperRecord& failure) {
  const std::string& program = options.argv[0];
  if (failure.kind == KeeperRecord::kCgroupFailed) {
    return io_error(fmt::format("cannot run '{}': cannot move it into the cgroup {}: {}", program,
                                cgroup ? cgroup->path : "?", strerror(failure.value)));
  }
  if (failure.kind == KeeperRecord::kChdirFailed) {
    return io_error(fmt::format("cannot run '{}': working directory '{}': {}", program,
                                options.working_dir, strerror(failure.value)));
  }
  if (failure.kind == KeeperRecord::kForkFailed) {
    return io_error(fmt::format("cannot run '{}': fork: {}", program, strerror(failure.value)));
  }
  std::string resolved = path == program ? "" : " (" + path + ")";
  return io_error(fmt::format("cannot run '{}'{}: {}", program, resolved, strerror(failure.value)));
}

}  // namespace

cohort::Result<StartedProcess> fork_exec_worker(const SpawnOptions& options, const WorkerCgroup* cgroup) {
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

  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1}, exec[2] = {-1, -1},
      lifeline[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &report[0], &report[1], &exec[0], &exec[1],
                    &lifeline[0], &lifeline[1], &devnull}) {
      close_fd(*fd);
    }
  };
  if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(report, O_CLOEXEC) != 0 || pipe2(exec, O_CLOEXEC) != 0 ||
      pipe2(lifeline, O_CLOEXEC) != 0) {
    cohort::Status status = errno_error("creating pipes for worker '" + options.argv[0] + "'");
    close_all();
    return status;
  }
  KeeperArgs args{getpid(), path.c_str(), argv.data(), envp.data(), options.working_dir.c_str(),
                  devnull,  out[1],       err[1],      report[1],   lifeline[0], exec[1],
                  cgroup ? cgroup->procs_fd : -1};
  pid_t keeper = fork();
  if (keeper < 0) {
    cohort::Status status = errno_error("fork for worker '" + options.argv[0] + "'");
    close_all();
    return status;
  }
  if (keeper == 0) run_keeper(args);
  for (int* fd : {&out[1], &err[1], &report[1], &exec[1], &lifeline[0], &devnull}) close_fd(*fd);

  auto fail = [&](cohort::Status status) {
    close_fd(lifeline[1]);  // the keeper cleans up and exits
    int wait_status;
    while (waitpid(keeper, &wait_status, 0) < 0 && errno == EINTR) {
    }
    close_all();
    return status;
  };
  KeeperRecord first{};
  if (!read_record(report[0], &first) || first.kind != KeeperRecord::kWorkerPid) {
    if (first.kind == KeeperRecord::kForkFailed) return fail(describe_failure(options, path, cgroup, first));
    return fail(io_error("cannot run '" + options.argv[0] + "': its keeper process died at start"));
  }
  KeeperRecord failure{};
  bool failed = read_record(exec[0], &failure);  // end of file: exec succeeded
  close_fd(exec[0]);
  if (failed) return fail(describe_failure(options, path, cgroup, failure));
  for (int fd : {out[0], err[0], report[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return StartedProcess{first.value, keeper, out[0], err[0], report[0], lifeline[1]};
}

}  // namespace cohort::agent
