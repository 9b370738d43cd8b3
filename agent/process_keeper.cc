// The keeper: subreaper of one worker's process tree. Async-signal-safe code
// only (it runs in a child of the threaded agent): syscalls, stack buffers.
//
// Descriptors, fixed so both sides know them: 0-2 the worker's stdio,
// 3 the lifeline (read end), 4 the report pipe (write end), 5 the exec pipe
// (write end, handed to the worker; it closes at a successful exec), 6 the
// worker's cgroup.procs where it has a cgroup (cgroup_containment.h).
#include "agent/process_keeper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "agent/posix_fork_exec.h"

namespace cohort::agent {
namespace {

constexpr int kLifelineFd = 3;
constexpr int kReportFd = 4;
constexpr int kExecFd = 5;
constexpr int kCgroupFd = 6;

void put(int fd, int kind, int value) {
  KeeperRecord r{kind, value};
  ssize_t n = write(fd, &r, sizeof r);
  (void)n;
}

void on_child(int) {}  // only to interrupt ppoll

// "/proc/self/task/<pid>/children" into `out` (the keeper is one thread).
void children_path(char* out) {
  const char head[] = "/proc/self/task/";
  int i = 0;
  for (; head[i]; ++i) out[i] = head[i];
  char digits[16];
  int n = 0;
  for (pid_t p = getpid(); p > 0; p /= 10) digits[n++] = char('0' + p % 10);
  while (n > 0) out[i++] = digits[--n];
  const char tail[] = "/children";
  for (int k = 0; tail[k]; ++k) out[i++] = tail[k];
  out[i] = '\0';
}

// SIGKILLs every direct child (and its group, for setsid'd leaders).
// Descendants further down come back to the keeper as their parents die.
void kill_children() {
  char path[64];
  children_path(path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[8192];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  pid_t pid = 0;
  for (ssize_t i = 0; i <= n; ++i) {
    char c = i < n ? buf[i] : ' ';
    if (c >= '0' && c <= '9') {
      pid = pid * 10 + (c - '0');
    } else if (pid > 0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      pid = 0;
    }
  }
}

// Kills the worker's group and every descendant, reaping until the keeper
// has no child left (bounded: 10 s of 5 ms rounds).
void kill_tree(pid_t worker, bool* worker_done, int* worker_status) {
  for (int round = 0; round < 2000; ++round) {
    kill(-worker, SIGKILL);
    kill_children();
    int st = 0;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == worker && !*worker_done) {
        *worker_done = true;
        *worker_status = st;
        put(kReportFd, KeeperRecord::kExited, st);
      }
    }
    if (r < 0 && errno == ECHILD) return;
    timespec pause{0, 5 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
}

// Exits the way the worker did, so the agent's waitpid on the keeper sees
// the worker's own status even if the report pipe was lost.
[[noreturn]] void mirror(int status) {
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  kill(getpid(), sig);
  _exit(128 + sig);
}

[[noreturn]] void exec_worker(pid_t keeper, const KeeperArgs& a) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != keeper) _exit(127);  // the keeper died before prctl took effect
  // Into its cgroup before anything else, so all it starts is in there too.
  // The keeper stays outside: it reports the exit even when the cgroup is
  // killed.
  if (a.cgroup_fd >= 0) {
    if (write(kCgroupFd, "0", 1) != 1) {
      put(kExecFd, KeeperRecord::kCgroupFailed, errno);
      _exit(127);
    }
    close(kCgroupFd);
  }
  // exec keeps the signal mask and ignored signals; the agent's and the
  // keeper's must not leak into workers.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  close(kLifelineFd);
  close(kReportFd);
  close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);  // the exec pipe closes at exec
  if (a.working_dir[0] != '\0' && chdir(a.working_dir) != 0) {
    put(kExecFd, KeeperRecord::kChdirFailed, errno);
    _exit(127);
  }
  execve(a.path, a.argv, a.envp);
  put(kExecFd, KeeperRecord::kExecFailed, errno);
  _exit(127);
}

// Puts the descriptors at 0..6 and closes everything else: other workers'
// lifelines inherited through fork would keep them open forever.
void arrange_descriptors(const KeeperArgs& a) {
  int from[7] = {a.stdin_fd, a.stdout_fd, a.stderr_fd, a.lifeline_fd, a.report_fd, a.exec_fd, a.cgroup_fd};
  int high[7];
  for (int i = 0; i < 7; ++i) high[i] = from[i] >= 0 ? fcntl(from[i], F_DUPFD, 16) : -1;
  for (int i = 0; i < 7; ++i) {
    if (high[i] >= 0) {
      dup2(high[i], i);
    } else {
      close(i);
    }
  }
  close_range(7, ~0u, 0);
}

}  // namespace

[[noreturn]] void run_keeper(const KeeperArgs& a) {
  arrange_descriptors(a);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Group and terminal signals (Ctrl-C on `cohort run`) are for the agent
  // and the workers; the keeper ends only through its lifeline.
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU}) {
    sigaction(sig, &ignore, nullptr);
  }
  struct sigaction child = {};
  child.sa_handler = on_child;
  sigaction(SIGCHLD, &child, nullptr);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigprocmask(SIG_SETMASK, &blocked, nullptr);  // delivered only inside ppoll
  if (getppid() != a.agent) _exit(127);

  pid_t keeper = getpid();
  pid_t worker = fork();
  if (worker < 0) {
    put(kReportFd, KeeperRecord::kForkFailed, errno);
    _exit(127);
  }
  if (worker == 0) exec_worker(keeper, a);
  setpgid(worker, worker);  // also here, so the group exists before anyone signals it
  close(kExecFd);
  // The worker's output pipes must reach end of file when it (and what it
  // left behind) is gone, so the keeper keeps no copy of them.
  for (int fd = 0; fd <= 2; ++fd) close(fd);
  put(kReportFd, KeeperRecord::kWorkerPid, worker);

  bool worker_done = false;
  int worker_status = 0;
  sigset_t open_mask;
  sigemptyset(&open_mask);
  for (;;) {
    int st = 0;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == worker && !worker_done) {
        worker_done = true;
        worker_status = st;
        put(kReportFd, KeeperRecord::kExited, st);
      }
    }
    pollfd p{kLifelineFd, POLLIN, 0};
    timespec wait{1, 0};
    int n = ppoll(&p, 1, &wait, &open_mask);
    if (n > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN))) break;
  }
  kill_tree(worker, &worker_done, &worker_status);
  close(kReportFd);
  mirror(worker_done ? worker_status : SIGKILL);
}

}  // namespace cohort::agent
