// Cgroup containment with real processes and a real cgroup v2 hierarchy
// (agent/cgroup_containment.h): workers land in their own cgroups, a killed
// keeper no longer lets a setsid grandchild escape, leftovers of a dead
// instance are killed by the next one and live ones are left alone, with
// cgroup.kill and with the freezer. Skips, saying why, where this process's
// cgroup is not a writable cgroup v2 directory.
#include "agent/cgroup_containment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "agent/launch_env.h"
#include "agent/process_launcher.h"
#include "tests/proc_stat.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

bool dead(pid_t pid) {
  waitpid(pid, nullptr, WNOHANG);  // ours when reparented to this subreaper
  if (kill(pid, 0) != 0) return true;
  char state = cohort::testing::process_state(pid);
  return state == '\0' || state == 'Z';
}

bool wait_dead(pid_t pid, std::chrono::milliseconds timeout) {
  for (auto end = Clock::now() + timeout; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
    if (dead(pid)) return true;
  }
  return dead(pid);
}

pid_t parent_of(pid_t pid) {
  return cohort::testing::parent_pid(pid);
}

// "0::/path" of a process.
std::string cgroup_of(pid_t pid) {
  std::string text = cohort::testing::read_proc_file("/proc/" + std::to_string(pid) + "/cgroup");
  auto at = text.find("0::");
  return at == std::string::npos ? "" : text.substr(at + 3, text.find('\n', at) - at - 3);
}

// Lines of one worker, for the pids it prints.
struct Lines {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> out;
  SpawnOptions options(const std::string& script) {
    SpawnOptions o;
    o.argv = {"/bin/sh", "-c", script};
    o.env = current_environment();
    o.group = "job-7-1";
    o.name = "rank-3";
    o.on_line = [this](OutputStream, std::string_view line) {
      std::lock_guard lock(mutex);
      out.emplace_back(line);
      cv.notify_all();
    };
    return o;
  }
  pid_t pid(size_t i) {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, 5s, [&] { return out.size() > i; });
    return out.size() > i ? std::stoi(out[i]) : 0;
  }
};

// A private parent under this process's cgroup (not cohort-*, so agents
// started by other tests at the same time never take it for a leftover).
class CgroupTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    auto own = own_cgroup_dir();
    if (!own) GTEST_SKIP() << "no cgroup v2 here: " << own.status().message();
    parent_ = *own + "/test-containment-" + std::to_string(getpid());
    if (mkdir(parent_.c_str(), 0755) != 0 && errno != EEXIST) {
      GTEST_SKIP() << "cgroup v2 at " << *own << " is not writable here (" << strerror(errno)
                   << "); the launcher falls back to its child subreaper";
    }
    auto probe = CgroupContainment::open(options("probe"));
    if (!probe) GTEST_SKIP() << "cgroups cannot be used here: " << probe.status().message();
  }
  void TearDown() override {
    if (parent_.empty()) return;
    std::error_code ec;
    for (int i = 0; i < 100 && fs::exists(parent_, ec); ++i) {
      for (const auto& e : fs::directory_iterator(parent_, ec)) {
        if (e.is_directory()) rmdir(e.path().c_str());
      }
      if (rmdir(parent_.c_str()) == 0) break;
      std::this_thread::sleep_for(20ms);
    }
  }
  CgroupOptions options(const std::string& owner) const { return {parent_, owner, /*use_kill_file=*/GetParam()}; }
  std::unique_ptr<ProcessLauncher> launcher(Containment containment) const {
    LauncherOptions o;
    o.containment = containment;
    o.owner = "unit";
    o.cgroup_parent = parent_;
    o.use_kill_file = GetParam();
    auto l = make_posix_launcher(o);
    EXPECT_TRUE(l) << l.status().message();
    return l ? std::move(*l) : nullptr;
  }
  std::string instance_dir() const { return parent_ + "/cohort-unit-" + std::to_string(getpid()); }
  std::string parent_;
};

TEST(CgroupContainmentSetup, ADirectoryThatIsNoCgroupIsRefusedAndAutoFallsBack) {
  char dir[] = "/tmp/cohort-not-a-cgroup-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  auto c = CgroupContainment::open({dir, "x", true});
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("is not a cgroup v2 directory"), std::string::npos) << c.status().message();
  LauncherOptions o;
  o.cgroup_parent = dir;
  o.containment = Containment::kCgroup;
  EXPECT_FALSE(make_posix_launcher(o)) << "cgroup containment was asked for: no silent fallback";
  o.containment = Containment::kAuto;
  auto fallback = make_posix_launcher(o);
  ASSERT_TRUE(fallback);
  Lines lines;
  auto worker = (*fallback)->spawn(lines.options("exit 4"));
  ASSERT_TRUE(worker);
  ASSERT_TRUE((*worker)->wait_for_exit(5s));
  EXPECT_EQ((*worker)->exit_status(), ExitStatus::exited(4));
  rmdir(dir);
}

TEST_P(CgroupTest, AWorkerAndItsSetsidGrandchildRunInTheWorkersOwnCgroup) {
  auto l = launcher(Containment::kCgroup);
  ASSERT_TRUE(l);
  Lines lines;
  auto worker = l->spawn(lines.options("setsid sleep 60 & echo $!; echo $$; wait"));
  ASSERT_TRUE(worker) << worker.status().message();
  pid_t grandchild = lines.pid(0);
  ASSERT_GT(grandchild, 0);
  std::string leaf = instance_dir() + "/job-7-1/rank-3";
  EXPECT_TRUE(fs::is_directory(leaf));
  auto own = own_cgroup_dir();
  ASSERT_TRUE(own);
  std::string relative = leaf.substr(own->size());
  EXPECT_EQ(cgroup_of((*worker)->pid()), relative);
  EXPECT_EQ(cgroup_of(grandchild), relative);
  EXPECT_NE(cgroup_of(parent_of((*worker)->pid())), relative) << "the keeper stays outside, to report the exit";
  (*worker)->stop(100ms);
  ASSERT_TRUE((*worker)->wait_for_exit(5s));
  EXPECT_TRUE(wait_dead(grandchild, 3s));
  for (auto end = Clock::now() + 3s; fs::exists(leaf) && Clock::now() < end;) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(fs::exists(leaf)) << "an ended worker's cgroup is removed";
  EXPECT_FALSE(fs::exists(instance_dir() + "/job-7-1")) << "and its attempt's, once empty";
  l.reset();
  EXPECT_FALSE(fs::exists(instance_dir())) << "the launcher removes its group when it goes";
}

// The one thing the subreaper cannot do: once the keeper itself is
// SIGKILLed, its orphans go to init. The cgroup still holds them.
TEST_P(CgroupTest, ASetsidGrandchildDiesEvenWhenItsKeeperIsKilledOnlyWithCgroups) {
  for (Containment mode : {Containment::kCgroup, Containment::kSubreaper}) {
    SCOPED_TRACE(to_string(mode));
    auto l = launcher(mode);
    ASSERT_TRUE(l);
    Lines lines;
    auto worker = l->spawn(lines.options("setsid sleep 60 & echo $!; wait"));
    ASSERT_TRUE(worker);
    pid_t grandchild = lines.pid(0);
    ASSERT_GT(grandchild, 0);
    pid_t keeper = parent_of((*worker)->pid());
    ASSERT_GT(keeper, 1);
    ASSERT_EQ(kill(keeper, SIGKILL), 0);
    ASSERT_TRUE((*worker)->wait_for_exit(5s));
    if (mode == Containment::kCgroup) {
      EXPECT_TRUE(wait_dead(grandchild, 3s)) << "setsid grandchild " << grandchild << " escaped its cgroup";
    } else {
      std::this_thread::sleep_for(300ms);
      EXPECT_FALSE(dead(grandchild))
          << "without cgroups the orphan of a killed keeper survives (docs/security.md)";
      kill(grandchild, SIGKILL);
      EXPECT_TRUE(wait_dead(grandchild, 3s));
    }
  }
}

TEST_P(CgroupTest, TheNextInstanceKillsWhatADeadOneLeftAndLeavesLiveOnesAlone) {
  // A dead instance's group: nobody holds its lock, a process still inside.
  std::string dead_dir = parent_ + "/cohort-dead-1";
  ASSERT_EQ(mkdir(dead_dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dead_dir + "/job-1-0").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dead_dir + "/job-1-0/rank-0").c_str(), 0755), 0);
  int procs = open((dead_dir + "/job-1-0/rank-0/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(procs, 0);
  pid_t orphan = fork();
  if (orphan == 0) {
    if (write(procs, "0", 1) != 1) _exit(1);
    setsid();
    execl("/bin/sleep", "sleep", "60", nullptr);
    _exit(127);
  }
  close(procs);
  for (auto end = Clock::now() + 2s; slurp(dead_dir + "/job-1-0/rank-0/cgroup.procs").empty() && Clock::now() < end;) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(slurp(dead_dir + "/job-1-0/rank-0/cgroup.procs").empty());

  auto live = CgroupContainment::open(options("live"));
  ASSERT_TRUE(live) << live.status().message();
  EXPECT_EQ((*live)->leftovers_killed(), 1);
  EXPECT_TRUE(wait_dead(orphan, 3s)) << "the leftover process was not killed";
  EXPECT_FALSE(fs::exists(dead_dir));
  auto held = (*live)->create("job-2-0", "rank-0");
  ASSERT_TRUE(held);
  close(held->procs_fd);

  auto next = CgroupContainment::open(options("next"));
  ASSERT_TRUE(next) << next.status().message();
  EXPECT_EQ((*next)->leftovers_killed(), 0);
  EXPECT_TRUE(fs::is_directory(held->path)) << "a live instance's cgroups were taken for leftovers";
  EXPECT_NE((*live)->dir(), (*next)->dir());
  waitpid(orphan, nullptr, 0);
}

TEST_P(CgroupTest, KillReachesEveryProcessBelowAndRemoveWaitsForThemToGo) {
  auto c = CgroupContainment::open(options("kill"));
  ASSERT_TRUE(c) << c.status().message();
  auto cg = (*c)->create("job-3-0", "rank-0");
  ASSERT_TRUE(cg);
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      if (write(cg->procs_fd, "0", 1) != 1) _exit(1);
      signal(SIGTERM, SIG_IGN);
      if (i == 0) setsid();
      execl("/bin/sleep", "sleep", "60", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  close(cg->procs_fd);
  // Every child has moved itself in (populated() turns true with the first
  // one; a child still on its way in when the kill lands would escape it).
  auto members = [&] {
    std::ifstream in(cg->path + "/cgroup.procs");
    int n = 0;
    for (std::string line; std::getline(in, line);) n += !line.empty();
    return n;
  };
  for (auto end = Clock::now() + 2s; members() < 3 && Clock::now() < end;) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(members(), 3);
  EXPECT_TRUE((*c)->populated(cg->path));
  EXPECT_FALSE((*c)->remove(cg->path)) << "a cgroup with processes stays";
  ASSERT_TRUE((*c)->kill(cg->path));
  for (pid_t pid : pids) EXPECT_TRUE(wait_dead(pid, 3s)) << pid;
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  for (auto end = Clock::now() + 2s; (*c)->populated(cg->path) && Clock::now() < end;) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE((*c)->remove(cg->path));
  EXPECT_FALSE(fs::exists(cg->path));
}

INSTANTIATE_TEST_SUITE_P(KillMethods, CgroupTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "CgroupKill" : "FreezeAndKill"; });

}  // namespace
}  // namespace cohort::agent
