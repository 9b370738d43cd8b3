// Containment with real processes (issue 19): no process of a job outlives
// it when `cohort run` or the agent is killed with SIGKILL, a grandchild in
// its own session (setsid) included, with either containment (--containment
// cgroup, subreaper). With cgroups, even the processes of keepers killed
// along with their agent are killed, by the next agent or `cohort run` on
// the host. The cgroup cases skip, saying why, where this process's cgroup
// is not a writable cgroup v2 directory.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "agent/cgroup_containment.h"
#include "cluster_harness.h"
#include "tests/proc_stat.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  char state = process_state(pid);
  return state != '\0' && state != 'Z';
}

pid_t parent_of(pid_t pid) {
  return parent_pid(pid);
}

pid_t read_pid(const std::string& path, int line = 0) {
  std::ifstream in(path);
  pid_t pid = 0;
  for (int i = 0; i <= line; ++i) {
    pid = 0;
    in >> pid;
  }
  return pid;
}

// Why cgroup containment cannot be tested here; "" when it can.
std::string why_no_cgroups() {
  auto c = agent::CgroupContainment::open({"", "probe", true});
  return c ? "" : c.status().message();
}

// Moves this test process (and so every agent and run it starts) into a
// cgroup of its own for the test's length: other tests' agents, started at
// the same time under ctest -j, would otherwise clean up this test's
// leftovers before it looks at them.
class PrivateCgroup {
 public:
  PrivateCgroup() {
    auto own = agent::own_cgroup_dir();
    if (!own) return;
    home_ = *own;
    dir_ = home_ + "/test-containment-" + std::to_string(::getpid());
    std::error_code ec;
    fs::create_directory(dir_, ec);
    std::ofstream(dir_ + "/cgroup.procs") << "0" << std::flush;
  }
  ~PrivateCgroup() {
    if (dir_.empty()) return;
    std::ofstream(home_ + "/cgroup.procs") << "0" << std::flush;
    // What the test's processes left; again while a just-killed agent's
    // last child may still hold its lock.
    for (int i = 0; i < 100; ++i) {
      (void)agent::CgroupContainment::open({dir_, "cleanup", true});
      if (::rmdir(dir_.c_str()) == 0 || errno == ENOENT) break;
      std::this_thread::sleep_for(20ms);
    }
  }

 private:
  std::string home_, dir_;
};

// A worker that leaves a grandchild in a new session and records the
// grandchild's pid, then its own.
std::string job_leaving_a_setsid_grandchild(Cluster& c, const std::string& name) {
  std::string pid_file = c.dir() + "/" + name + ".pid";
  return c.write_job(name, "[job]\nname = \"" + name + "\"\nkind = \"command\"\noutput_dir = \"" + c.dir() +
                               "/" + name + "\"\n[command]\nargv = [\"sh\", \"-c\", \"setsid sleep 300 & echo $! > " +
                               pid_file + ".tmp; echo $$ >> " + pid_file + ".tmp; mv " + pid_file + ".tmp " +
                               pid_file + "; sleep 300\"]\n");
}

class Containment : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cgroup") {
      cgroup_ = std::make_unique<PrivateCgroup>();
      std::string why = why_no_cgroups();
      if (!why.empty()) GTEST_SKIP() << "no cgroup containment here (" << why << "); the subreaper cases still run";
    }
  }
  std::vector<std::string> flag() const { return {"--containment", GetParam()}; }
  std::unique_ptr<PrivateCgroup> cgroup_;
  // The killed instance's (emptied) cgroups stay until the next instance on
  // the host starts, which removes them.
  static void expect_next_instance_removes(const std::string& name) {
    auto own = agent::own_cgroup_dir();
    ASSERT_TRUE(own);
    EXPECT_TRUE(fs::is_directory(*own + "/" + name));
    EXPECT_EQ(why_no_cgroups(), "");
    EXPECT_FALSE(fs::exists(*own + "/" + name));
  }
};

TEST_P(Containment, KillingCohortRunKillsASetsidGrandchild) {
  Cluster c;
  auto job = job_leaving_a_setsid_grandchild(c, "run-kill");
  auto run = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1", "--containment", GetParam()},
                            c.dir() + "/run.log");
  ASSERT_TRUE(run);
  std::string pid_file = c.dir() + "/run-kill.pid";
  ASSERT_TRUE(wait_until([&] { return read_pid(pid_file) > 0; }, 20s)) << run->output();
  pid_t grandchild = read_pid(pid_file);
  ASSERT_TRUE(alive(grandchild));
  run->signal(SIGKILL);
  run->wait(5s);
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }, 5s))
      << "setsid grandchild " << grandchild << " outlived `cohort run` killed with SIGKILL";
  if (GetParam() == "cgroup") expect_next_instance_removes("cohort-run-" + std::to_string(run->pid()));
}

TEST_P(Containment, KillingTheAgentKillsASetsidGrandchild) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1, flag());
  auto job = job_leaving_a_setsid_grandchild(c, "agent-kill");
  ASSERT_EQ(c.cli("submit", {job}).exit_code, 0);
  std::string pid_file = c.dir() + "/agent-kill.pid";
  ASSERT_TRUE(wait_until([&] { return read_pid(pid_file) > 0; }, 20s));
  pid_t grandchild = read_pid(pid_file);
  ASSERT_TRUE(alive(grandchild));
  c.agent("node-a").signal(SIGKILL);
  c.agent("node-a").wait(5s);
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }, 5s))
      << "setsid grandchild " << grandchild << " outlived its agent killed with SIGKILL";
  if (GetParam() == "cgroup") expect_next_instance_removes("cohort-node-a-" + std::to_string(c.agent("node-a").pid()));
}

INSTANTIATE_TEST_SUITE_P(Modes, Containment, ::testing::Values("cgroup", "subreaper"),
                         [](const auto& info) { return info.param; });

// The agent and the worker's keeper both SIGKILLed (as `kill -9` of the
// agent's process group, or an OOM kill of both, would): the subreaper is gone, the orphan lives on
// in its cgroup, and the node's next agent kills it at start.
TEST(ContainmentCgroup, TheNextAgentKillsWhatAKilledAgentAndKeeperLeft) {
  PrivateCgroup isolated;
  if (std::string why = why_no_cgroups(); !why.empty()) GTEST_SKIP() << "no cgroup containment here: " << why;
  Cluster c;
  c.start_coordinator();
  pid_t old_agent = c.add_agent("node-a", 1, {"--containment", "cgroup"}).pid();
  auto job = job_leaving_a_setsid_grandchild(c, "leftover");
  ASSERT_EQ(c.cli("submit", {job}).exit_code, 0);
  std::string pid_file = c.dir() + "/leftover.pid";
  ASSERT_TRUE(wait_until([&] { return read_pid(pid_file, 1) > 0; }, 20s));
  pid_t grandchild = read_pid(pid_file), worker = read_pid(pid_file, 1);
  pid_t keeper = parent_of(worker);
  ASSERT_GT(keeper, 1);
  auto own = agent::own_cgroup_dir();
  ASSERT_TRUE(own);
  std::string old_group = *own + "/cohort-node-a-" + std::to_string(old_agent);
  ASSERT_TRUE(fs::is_directory(old_group + "/job-1-0/rank-0"));
  // Stopped first, the agent cannot see its keeper die (it would kill the
  // cgroup at once); then both go as one.
  c.agent("node-a").signal(SIGSTOP);
  ASSERT_EQ(::kill(keeper, SIGKILL), 0);
  c.agent("node-a").signal(SIGKILL);
  c.agent("node-a").wait(5s);
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(alive(grandchild)) << "expected the orphan to survive its killed keeper until the next agent";
  c.add_agent("node-a", 1, {"--containment", "cgroup"});
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }, 10s))
      << "the next agent did not kill setsid grandchild " << grandchild << " left in " << old_group;
  EXPECT_TRUE(wait_until([&] { return !fs::exists(old_group); }, 5s));
  EXPECT_TRUE(wait_until([&] { return read_file(c.dir() + "/agent-node-a.log").find("left behind by a dead cohort") !=
                                      std::string::npos; }, 5s))
      << read_file(c.dir() + "/agent-node-a.log");
}

// The same for `cohort run`: the next run on the host cleans up.
TEST(ContainmentCgroup, TheNextCohortRunKillsWhatAKilledRunAndKeeperLeft) {
  PrivateCgroup isolated;
  if (std::string why = why_no_cgroups(); !why.empty()) GTEST_SKIP() << "no cgroup containment here: " << why;
  Cluster c;
  auto job = job_leaving_a_setsid_grandchild(c, "run-leftover");
  auto run = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1", "--containment", "cgroup"},
                            c.dir() + "/run.log");
  std::string pid_file = c.dir() + "/run-leftover.pid";
  ASSERT_TRUE(wait_until([&] { return read_pid(pid_file, 1) > 0; }, 20s)) << run->output();
  pid_t grandchild = read_pid(pid_file), keeper = parent_of(read_pid(pid_file, 1));
  ASSERT_GT(keeper, 1);
  run->signal(SIGSTOP);
  ASSERT_EQ(::kill(keeper, SIGKILL), 0);
  run->signal(SIGKILL);
  run->wait(5s);
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(alive(grandchild));
  auto quick = c.write_job("quick", "[job]\nname = \"quick\"\nkind = \"command\"\noutput_dir = \"" + c.dir() +
                                        "/quick\"\n[command]\nargv = [\"true\"]\n");
  auto next = run_cohort({"run", quick, "--cpu-slots", "1", "--containment", "cgroup"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }, 5s))
      << "the next `cohort run` did not kill setsid grandchild " << grandchild;
}

}  // namespace
}  // namespace cohort::testing
