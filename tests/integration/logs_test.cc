// `cohort logs` across a coordinator killed with kill -9 and started again
// on its state directory, `--tail`, and the message when output is only on
// the nodes. Real processes.
#include <thread>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

std::string command_job(const Cluster& c, const std::string& name, const std::string& script) {
  return "[job]\nname = \"" + name + "\"\nkind = \"command\"\noutput_dir = \"" + c.dir() + "/" + name +
         "\"\n[command]\nargv = [\"sh\", \"-c\", \"" + script + "\"]\n";
}

TEST(Logs, SurviveACoordinatorKilledAndStartedAgainAndTailPrintsTheLast) {
  Cluster c;
  std::string state = c.dir() + "/state";
  c.start_coordinator({"--state-dir", state});
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto r = c.cli("submit", {c.write_job("talk", command_job(c, "talk", "echo one; echo two; echo three")), "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  std::this_thread::sleep_for(1500ms);  // the coordinator writes new lines once a second
  c.kill_coordinator();
  c.start_coordinator({"--state-dir", state});
  auto logs = c.cli("logs", {id});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "[rank 0] one\n[rank 0] two\n[rank 0] three\n");
  EXPECT_EQ(logs.err, "");
  auto tail = c.cli("logs", {id, "--tail", "1"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  EXPECT_EQ(tail.out, "[rank 0] three\n");
}

TEST(Logs, OutputThatNeverReachedTheCoordinatorIsPointedToOnTheNodes) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto r = c.cli("submit", {c.write_job("quiet", command_job(c, "quiet", "true")), "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  auto logs = c.cli("logs", {id});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_EQ(logs.out, "");
  EXPECT_NE(logs.err.find("no output of job " + id + " has reached the coordinator"), std::string::npos) << logs.err;
  EXPECT_NE(logs.err.find(c.dir() + "/quiet/logs/attempt-0/rank-<R>.log on each rank's node: node-a (rank 0)"),
            std::string::npos)
      << logs.err;
}

TEST(Logs, ControlCharactersAreEscapedUnlessRaw) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  // ESC ] 0 ; title BEL, a clear-screen CSI, a tab and a carriage return.
  auto r = c.cli("submit", {c.write_job("ansi", command_job(c, "ansi",
                                                             "printf 'a\\\\033]0;owned\\\\007b\\\\033[2Jc\\\\td\\\\re\\\\n'")),
                            "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  auto logs = c.cli("logs", {id});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "[rank 0] a\\x1b]0;owned\\x07b\\x1b[2Jc\td\\x0de\n");
  auto raw = c.cli("logs", {id, "--raw"});
  EXPECT_EQ(raw.out, "[rank 0] a\x1b]0;owned\x07" "b\x1b[2Jc\td\re\n");
}

// Lines printed while the coordinator is down wait on the agent and arrive
// once it is back; none is lost without a word.
TEST(Logs, LinesPrintedWhileTheCoordinatorIsDownArriveAfterItsRestart) {
  Cluster c;
  std::string state = c.dir() + "/state";
  c.start_coordinator({"--state-dir", state});
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto r = c.cli("submit", {c.write_job("count", command_job(c, "count",
                                                              "i=0; while [ $i -lt 120 ]; do i=$((i+1)); echo n$i; "
                                                              "sleep 0.05; done"))});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(wait_until([&] { return c.cli("logs", {id}).out.find("n10\n") != std::string::npos; }, 20s));
  c.kill_coordinator();
  std::this_thread::sleep_for(2500ms);
  c.start_coordinator({"--state-dir", state});
  ASSERT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 40s)) << c.job_state(id);
  std::string out;
  ASSERT_TRUE(wait_until([&] {
    out = c.cli("logs", {id}).out;
    return out.find("n120\n") != std::string::npos;
  }, 10s)) << out;
  // Every line is there, in order (a batch whose answer was lost may repeat).
  size_t at = 0;
  for (int i = 1; i <= 120; ++i) {
    size_t next = out.find("[rank 0] n" + std::to_string(i) + "\n", at);
    if (next == std::string::npos) next = out.find("[rank 0] n" + std::to_string(i) + "\n");
    ASSERT_NE(next, std::string::npos) << "line n" << i << " is missing:\n" << out;
    at = next;
  }
}

}  // namespace
}  // namespace cohort::testing
