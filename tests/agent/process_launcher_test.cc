// The POSIX launcher with real processes: output capture, exits, signals,
// process-group stop with grace, exec errors, and no orphans.
#include "agent/process_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "agent/launch_env.h"
#include "tests/proc_stat.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Collects one worker's lines and exit, in arrival order.
struct Capture {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> out, err, order;  // order: "out:x", "err:y", "exit"
  std::optional<ExitStatus> exit;

  SpawnOptions options(std::vector<std::string> argv) {
    SpawnOptions o;
    o.argv = std::move(argv);
    o.env = current_environment();
    o.on_line = [this](OutputStream stream, std::string_view line) {
      std::lock_guard lock(mutex);
      (stream == OutputStream::kStdout ? out : err).emplace_back(line);
      order.push_back(std::string(to_string(stream)) + ":" + std::string(line));
      cv.notify_all();
    };
    o.on_exit = [this](const ExitStatus& status) {
      std::lock_guard lock(mutex);
      exit = status;
      order.push_back("exit");
      cv.notify_all();
    };
    return o;
  }
  // Waits for the first stdout line (e.g. a pid the worker prints).
  std::string first_line(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, timeout, [&] { return !out.empty(); });
    return out.empty() ? "" : out[0];
  }
};

std::vector<std::string> sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

// True once `pid` is gone or a zombie (dead, not yet reaped by its parent).
bool is_dead(pid_t pid) {
  waitpid(pid, nullptr, WNOHANG);  // reap it if it became ours (we are a subreaper)
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char state = cohort::testing::process_state(pid);
  return state == '\0' || state == 'Z' || state == 'X';
}

bool wait_dead(pid_t pid, std::chrono::milliseconds timeout) {
  for (auto deadline = Clock::now() + timeout; Clock::now() < deadline;) {
    if (is_dead(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return is_dead(pid);
}

bool wait_until_lines(Capture& capture, size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(capture.mutex);
  return capture.cv.wait_for(lock, timeout, [&] { return capture.out.size() >= n; });
}

class PosixLauncher : public ::testing::Test {
 protected:
  // Orphans (a worker's children, a killed helper's worker) are re-parented
  // to this test process, so it can reap them and see them gone.
  void SetUp() override { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  std::shared_ptr<ProcessHandle> spawn(SpawnOptions options) {
    auto handle = launcher_->spawn(std::move(options));
    EXPECT_TRUE(handle.is_ok()) << handle.status().to_string();
    return handle.is_ok() ? *handle : nullptr;
  }
  std::unique_ptr<ProcessLauncher> launcher_ = make_posix_launcher();
};

TEST_F(PosixLauncher, DeliversStdoutAndStderrLineByLineBeforeTheExit) {
  Capture capture;
  auto worker = spawn(capture.options(
      sh("echo one; echo oops >&2; printf 'two\\n\\nthree'; printf 'no newline' >&2")));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  std::lock_guard lock(capture.mutex);
  EXPECT_EQ(capture.out, (std::vector<std::string>{"one", "two", "", "three"}));
  EXPECT_EQ(capture.err, (std::vector<std::string>{"oops", "no newline"}));
  EXPECT_EQ(capture.order.back(), "exit");
  EXPECT_EQ(worker->exit_status(), ExitStatus::exited(0));
}

TEST_F(PosixLauncher, ReportsTheExitCode) {
  Capture capture;
  auto worker = spawn(capture.options(sh("exit 3")));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_EQ(worker->exit_status(), ExitStatus::exited(3));
  EXPECT_EQ(worker->exit_status()->describe(), "exit code 3");
  std::lock_guard lock(capture.mutex);
  EXPECT_EQ(capture.exit, ExitStatus::exited(3));
}

TEST_F(PosixLauncher, ReportsTheSignalThatKilledTheWorker) {
  Capture capture;
  // SIGUSR1 terminates without leaving a core file behind.
  auto worker = spawn(capture.options(sh("kill -USR1 $$")));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  ASSERT_TRUE(worker->exit_status().has_value());
  EXPECT_EQ(worker->exit_status()->signal, SIGUSR1);
  EXPECT_EQ(worker->exit_status()->signal_name(), "SIGUSR1");
  EXPECT_EQ(worker->exit_status()->describe(), "signal 10 (SIGUSR1)");
}

TEST_F(PosixLauncher, GivesExactlyTheEnvironmentAndWorkingDirectory) {
  Capture capture;
  SpawnOptions options = capture.options({"env"});
  options.env = {{"PATH", "/usr/bin:/bin"}, {"RANK", "5"}};
  auto worker = spawn(std::move(options));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  {
    std::lock_guard lock(capture.mutex);
    EXPECT_EQ(capture.out, (std::vector<std::string>{"PATH=/usr/bin:/bin", "RANK=5"}));
  }
  Capture in_tmp;
  SpawnOptions pwd = in_tmp.options({"pwd"});
  pwd.working_dir = "/tmp";
  ASSERT_TRUE(spawn(std::move(pwd))->wait_for_exit(5s));
  std::lock_guard lock(in_tmp.mutex);
  EXPECT_EQ(in_tmp.out, (std::vector<std::string>{"/tmp"}));
}

TEST_F(PosixLauncher, RunsEachWorkerInItsOwnProcessGroup) {
  Capture capture;
  // Field 5 of /proc/PID/stat is the process group id.
  auto worker = spawn(capture.options(sh("cut -d' ' -f5 /proc/$$/stat")));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  std::lock_guard lock(capture.mutex);
  ASSERT_EQ(capture.out.size(), 1u);
  EXPECT_EQ(capture.out[0], std::to_string(worker->pid()));
  EXPECT_NE(worker->pid(), getpgrp());
}

TEST_F(PosixLauncher, StopKillsAWorkerThatIgnoresSigtermAfterTheGraceAndItsChildren) {
  Capture capture;
  auto worker = spawn(capture.options(sh("trap '' TERM; sleep 30 & echo $!; wait")));
  pid_t child = std::stoi(capture.first_line());
  auto stopped_at = Clock::now();
  worker->stop(500ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(is_dead(worker->pid())) << "SIGTERM is ignored: alive until the grace ends";
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_GE(Clock::now() - stopped_at, 500ms);
  EXPECT_EQ(worker->exit_status(), ExitStatus::killed(SIGKILL));
  EXPECT_EQ(worker->exit_status()->describe(), "signal 9 (SIGKILL)");
  EXPECT_TRUE(wait_dead(child, 2s)) << "child " << child << " of the group survived";
}

TEST_F(PosixLauncher, StopKillsChildrenLeftBehindByAWorkerThatHonouredSigterm) {
  Capture capture;
  // The shell dies on SIGTERM; its child ignores it and would linger. The
  // child prints its pid only once it ignores SIGTERM, so stop() cannot win.
  auto worker = spawn(capture.options(sh("sh -c 'trap \"\" TERM; echo $$; exec sleep 30' & wait")));
  pid_t child = std::stoi(capture.first_line());
  worker->stop(1s);
  ASSERT_TRUE(worker->wait_for_exit(900ms));
  EXPECT_EQ(worker->exit_status(), ExitStatus::killed(SIGTERM));
  EXPECT_FALSE(is_dead(child)) << "it ignores SIGTERM: alive until the grace ends";
  EXPECT_TRUE(wait_dead(child, 3s)) << "child " << child << " outlived the grace period";
}

TEST_F(PosixLauncher, StopEndsAWorkerThatHonoursSigtermWithoutWaitingForTheGrace) {
  Capture capture;
  auto worker = spawn(capture.options({"sleep", "30"}));
  auto stopped_at = Clock::now();
  worker->stop(10s);
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_LT(Clock::now() - stopped_at, 5s);
  EXPECT_EQ(worker->exit_status(), ExitStatus::killed(SIGTERM));
}

TEST_F(PosixLauncher, SignalGroupReachesTheWorker) {
  Capture capture;
  auto worker = spawn(capture.options(
      sh("trap 'echo got USR1; exit 0' USR1; echo ready; while :; do sleep 0.05; done")));
  ASSERT_EQ(capture.first_line(), "ready");
  ASSERT_TRUE(worker->signal_group(SIGUSR1).is_ok());
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_EQ(worker->exit_status(), ExitStatus::exited(0));
  std::lock_guard lock(capture.mutex);
  EXPECT_EQ(capture.out.back(), "got USR1");
  // After the exit there is nothing to signal, and that is not an error.
  EXPECT_TRUE(worker->signal_group(SIGTERM).is_ok());
}

TEST_F(PosixLauncher, AMissingProgramIsAnErrorNamingIt) {
  Capture capture;
  auto bare = launcher_->spawn(capture.options({"cohort-no-such-program", "--flag"}));
  ASSERT_FALSE(bare.is_ok());
  EXPECT_NE(bare.status().message().find("cohort-no-such-program"), std::string::npos)
      << bare.status().message();
  auto absolute = launcher_->spawn(capture.options({"/nonexistent/dir/train"}));
  ASSERT_FALSE(absolute.is_ok());
  EXPECT_NE(absolute.status().message().find("/nonexistent/dir/train"), std::string::npos);
  EXPECT_NE(absolute.status().message().find("No such file"), std::string::npos)
      << absolute.status().message();
  std::string data_file = "/tmp/cohort-not-a-program-" + std::to_string(getpid());
  std::ofstream(data_file) << "just data\n";
  std::filesystem::permissions(
      data_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto not_executable = launcher_->spawn(capture.options({data_file}));
  std::filesystem::remove(data_file);
  ASSERT_FALSE(not_executable.is_ok());
  EXPECT_NE(not_executable.status().message().find(data_file), std::string::npos);
  EXPECT_NE(not_executable.status().message().find("Permission denied"), std::string::npos)
      << not_executable.status().message();
}

TEST_F(PosixLauncher, ABadWorkingDirectoryOrEmptyCommandIsAnError) {
  Capture capture;
  SpawnOptions options = capture.options({"true"});
  options.working_dir = "/nonexistent/workdir";
  auto result = launcher_->spawn(std::move(options));
  ASSERT_FALSE(result.is_ok());
  EXPECT_NE(result.status().message().find("/nonexistent/workdir"), std::string::npos);
  EXPECT_FALSE(launcher_->spawn(capture.options({})).is_ok());
}

TEST_F(PosixLauncher, HandsOverARunawayLineInPieces) {
  Capture capture;
  auto worker = spawn(capture.options(sh("head -c 200000 /dev/zero | tr '\\0' a")));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  std::lock_guard lock(capture.mutex);
  size_t total = 0;
  for (const auto& piece : capture.out) {
    EXPECT_LE(piece.size(), kMaxLineBytes);
    total += piece.size();
  }
  EXPECT_EQ(total, 200000u);
  EXPECT_EQ(capture.out.size(), 4u);
}

TEST_F(PosixLauncher, RunsManyWorkersAtOnce) {
  constexpr int kWorkers = 8;
  std::vector<Capture> captures(kWorkers);
  std::vector<std::shared_ptr<ProcessHandle>> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    SpawnOptions options = captures[rank].options(sh("sleep 0.1; echo rank $RANK"));
    options.env["RANK"] = std::to_string(rank);
    workers.push_back(spawn(std::move(options)));
  }
  for (int rank = 0; rank < kWorkers; ++rank) {
    ASSERT_TRUE(workers[rank]->wait_for_exit(5s));
    std::lock_guard lock(captures[rank].mutex);
    EXPECT_EQ(captures[rank].out, (std::vector<std::string>{"rank " + std::to_string(rank)}));
  }
}

TEST_F(PosixLauncher, SpawnsFromManyThreadsAtOnce) {
  std::atomic<int> succeeded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 4; ++i) {
        Capture capture;
        auto worker = launcher_->spawn(capture.options({"true"}));
        if (worker.is_ok() && (*worker)->wait_for_exit(5s) &&
            (*worker)->exit_status() == ExitStatus::exited(0)) {
          ++succeeded;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(succeeded.load(), 16);
}

TEST_F(PosixLauncher, CanSpawnFromInsideACallback) {
  Capture second;
  std::shared_ptr<ProcessHandle> restarted;
  std::mutex mutex;
  SpawnOptions first = second.options({"true"});
  first.on_line = nullptr;
  first.on_exit = [&](const ExitStatus&) {
    auto handle = launcher_->spawn(second.options(sh("echo restarted")));
    std::lock_guard lock(mutex);
    if (handle.is_ok()) restarted = *handle;
  };
  auto worker = spawn(std::move(first));
  ASSERT_TRUE(worker->wait_for_exit(5s));
  std::lock_guard lock(mutex);
  ASSERT_NE(restarted, nullptr);
  ASSERT_TRUE(restarted->wait_for_exit(5s));
  EXPECT_EQ(second.first_line(), "restarted");
}

TEST_F(PosixLauncher, DestroyingTheLauncherKillsItsWorkers) {
  Capture capture;
  auto worker = spawn(capture.options(sh("trap '' TERM; sleep 30 & echo $!; wait")));
  pid_t child = std::stoi(capture.first_line());
  launcher_.reset();
  EXPECT_TRUE(is_dead(worker->pid()));
  EXPECT_EQ(worker->exit_status(), ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(wait_dead(child, 2s));
}

TEST_F(PosixLauncher, WorkersDieWithTheirAgentEvenOnSigkill) {
  Capture capture;
  auto agent = spawn(capture.options({LAUNCHER_ORPHAN_HELPER}));
  std::string line = capture.first_line();
  ASSERT_EQ(line.rfind("worker ", 0), 0u) << "helper said: " << line;
  pid_t worker = std::stoi(line.substr(7));
  EXPECT_FALSE(is_dead(worker));
  ASSERT_EQ(kill(agent->pid(), SIGKILL), 0);
  ASSERT_TRUE(agent->wait_for_exit(5s));
  EXPECT_TRUE(wait_dead(worker, 5s)) << "worker " << worker << " outlived its agent";
}

// Containment (issue 19): a grandchild in its own session, which the
// process group never reaches, dies with its agent's SIGKILL too.
TEST_F(PosixLauncher, SetsidGrandchildrenDieWithTheirAgentEvenOnSigkill) {
  Capture capture;
  auto agent = spawn(capture.options({LAUNCHER_ORPHAN_HELPER, "setsid"}));
  pid_t grandchild = 0, worker = 0;
  ASSERT_TRUE(wait_until_lines(capture, 2, 5s)) << "helper said too little";
  for (const auto& line : capture.out) {
    if (line.rfind("grandchild ", 0) == 0) grandchild = std::stoi(line.substr(11));
    if (line.rfind("worker ", 0) == 0) worker = std::stoi(line.substr(7));
  }
  ASSERT_GT(grandchild, 0);
  ASSERT_GT(worker, 0);
  // `echo $!` may run before the child's setsid(): wait for the new session.
  for (auto end = Clock::now() + 2s; getsid(grandchild) == getsid(worker) && Clock::now() < end;) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_NE(getsid(grandchild), getsid(worker)) << "the grandchild has its own session";
  ASSERT_EQ(kill(agent->pid(), SIGKILL), 0);
  ASSERT_TRUE(agent->wait_for_exit(5s));
  EXPECT_TRUE(wait_dead(worker, 5s)) << "worker " << worker << " outlived its agent";
  EXPECT_TRUE(wait_dead(grandchild, 5s)) << "setsid grandchild " << grandchild << " outlived its agent";
}

TEST_F(PosixLauncher, WhatAWorkerLeavesBehindDiesWhenItExitsSetsidIncluded) {
  Capture capture;
  auto worker = spawn(capture.options(sh("setsid sleep 60 & echo $!; exit 3")));
  pid_t grandchild = std::stoi(capture.first_line());
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_EQ(worker->exit_status(), ExitStatus::exited(3));
  EXPECT_TRUE(wait_dead(grandchild, 3s)) << "setsid grandchild " << grandchild << " outlived the worker";
}

TEST_F(PosixLauncher, StopReachesSetsidGrandchildrenAfterTheGrace) {
  Capture capture;
  auto worker = spawn(capture.options(sh("setsid sh -c 'trap \"\" TERM; echo $$; exec sleep 60' & wait")));
  pid_t grandchild = std::stoi(capture.first_line());
  worker->stop(300ms);
  ASSERT_TRUE(worker->wait_for_exit(5s));
  EXPECT_TRUE(wait_dead(grandchild, 3s)) << "setsid grandchild " << grandchild << " survived the stop";
}

TEST(ExitStatus, DescribesExitsAndSignals) {
  EXPECT_EQ(ExitStatus::exited(0).describe(), "exit code 0");
  EXPECT_TRUE(ExitStatus::exited(0).success());
  EXPECT_FALSE(ExitStatus::exited(1).success());
  EXPECT_FALSE(ExitStatus::killed(SIGKILL).success());
  EXPECT_EQ(ExitStatus::killed(SIGTERM).signal_name(), "SIGTERM");
  EXPECT_EQ(ExitStatus::killed(SIGRTMIN + 1).signal_name().rfind("SIG", 0), 0u);
  EXPECT_EQ(ExitStatus::exited(2).signal_name(), "");
}

}  // namespace
}  // namespace cohort::agent
