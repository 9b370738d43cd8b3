// Containment with real processes (issue 19): no process of a job outlives
// it when `cohort run` or the agent is killed with SIGKILL, a grandchild in
// its own session (setsid) included.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  size_t paren = text.rfind(')');
  return paren != std::string::npos && text.size() > paren + 2 && text[paren + 2] != 'Z';
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// A worker that leaves a grandchild in a new session and records its pid.
std::string job_leaving_a_setsid_grandchild(Cluster& c, const std::string& name) {
  std::string pid_file = c.dir() + "/" + name + ".pid";
  return c.write_job(name, "[job]\nname = \"" + name + "\"\nkind = \"command\"\noutput_dir = \"" + c.dir() +
                               "/" + name + "\"\n[command]\nargv = [\"sh\", \"-c\", \"setsid sleep 300 & echo $! > " +
                               pid_file + "; sleep 300\"]\n");
}

TEST(Containment, KillingCohortRunKillsASetsidGrandchild) {
  Cluster c;
  auto job = job_leaving_a_setsid_grandchild(c, "run-kill");
  auto run = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1"}, c.dir() + "/run.log");
  ASSERT_TRUE(run);
  std::string pid_file = c.dir() + "/run-kill.pid";
  ASSERT_TRUE(wait_until([&] { return read_pid(pid_file) > 0; }, 20s)) << run->output();
  pid_t grandchild = read_pid(pid_file);
  ASSERT_TRUE(alive(grandchild));
  run->signal(SIGKILL);
  run->wait(5s);
  EXPECT_TRUE(wait_until([&] { return !alive(grandchild); }, 5s))
      << "setsid grandchild " << grandchild << " outlived `cohort run` killed with SIGKILL";
}

TEST(Containment, KillingTheAgentKillsASetsidGrandchild) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
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
}

}  // namespace
}  // namespace cohort::testing
