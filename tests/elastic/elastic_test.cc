// Elastic restarts and fault tolerance, by doing the faults: failing ranks,
// kill -9 of agents and of the coordinator, hung ranks, SIGTERM to
// `cohort run`. Real processes throughout (tests/integration/cluster_harness.h).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

nlohmann::json status_json(Cluster& c, const std::string& id) {
  auto r = c.cli("status", {id, "--json"}, 10s);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string job_toml(const Cluster& c, const std::string& name, const std::string& extra,
                     const std::string& script) {
  std::string quoted;
  for (char ch : script) quoted += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  return "[job]\nname = \"" + name + "\"\nkind = \"command\"\noutput_dir = \"" + c.dir() + "/" +
         name + "\"\nstop_grace = 2.0\n" + extra + "[command]\nargv = [\"sh\", \"-c\", \"" +
         quoted + "\"]\n";
}

// Pids recorded by workers as "attempt world_size pid" lines in DIR/pids-<rank>.
std::vector<pid_t> recorded_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("pids-", 0) != 0) continue;
    std::istringstream in(read_file(entry.path()));
    int attempt, world;
    pid_t pid;
    while (in >> attempt >> world >> pid) pids.push_back(pid);
  }
  return pids;
}

TEST(Elastic, ARankThatFailsOnTheFirstAttemptOnlySucceedsOnTheSecond) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  auto job = c.write_job("flaky", job_toml(c, "flaky", "gpus_per_node = 2\nmax_restarts = 2\n",
                                           "if [ $COHORT_ATTEMPT = 0 ] && [ $RANK = 1 ]; then exit 3; fi; "
                                           "echo attempt $COHORT_ATTEMPT restart $TORCHELASTIC_RESTART_COUNT"));
  auto r = c.cli("submit", {job, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 1] attempt 1 restart 1"), std::string::npos) << r.out;
  auto s = status_json(c, first_line(r.out));
  ASSERT_EQ(s["attempts"].size(), 2u) << s.dump(2);
  EXPECT_EQ(s["attempts"][0]["state"], "failed");
  EXPECT_EQ(s["attempts"][0]["root_cause"]["rank"], 1);
  EXPECT_EQ(s["attempts"][1]["state"], "succeeded");
  EXPECT_EQ(s["restarts_used"], 1);
}

TEST(Elastic, ARankThatAlwaysFailsFailsTheJobAfterThreeAttemptsWithItsRootCause) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 2);
  auto job = c.write_job("doomed", job_toml(c, "doomed", "gpus_per_node = 2\nmax_restarts = 2\n",
                                            "echo $COHORT_ATTEMPT $WORLD_SIZE $$ >> " + c.dir() +
                                                "/pids-$RANK; if [ $RANK = 1 ]; then echo dying on "
                                                "attempt $COHORT_ATTEMPT; exit 3; fi; sleep 30"));
  auto r = c.cli("submit", {job, "--wait"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("root cause: rank 1 on node node-a: exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dying on attempt 2"), std::string::npos) << r.err;
  auto s = status_json(c, first_line(r.out));
  ASSERT_EQ(s["attempts"].size(), 3u);
  for (const auto& a : s["attempts"]) EXPECT_EQ(a["state"], "failed");
  EXPECT_EQ(s["root_cause"]["exit_code"], 3);
  EXPECT_EQ(s["root_cause"]["node"], "node-a");
  auto text = c.cli("status", {first_line(r.out)});
  EXPECT_NE(text.out.find("attempt 2: failed"), std::string::npos) << text.out;
  auto pids = recorded_pids(c.dir());
  // Rank 1 records itself on each attempt; rank 0 may be stopped before it does.
  EXPECT_GE(pids.size(), 3u);
  for (pid_t p : pids) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << p;
}

TEST(Elastic, ALostNodeShrinksTheJobAndAJoiningNodeGrowsItBack) {
  Cluster c;
  c.start_coordinator();
  for (const char* n : {"node-a", "node-b", "node-c"}) c.add_agent(n, 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(3, 10s));
  std::string dir = c.dir();
  auto job = c.write_job("elastic", job_toml(c, "elastic", "nodes = \"2:3\"\nmax_restarts = 3\n",
                                             "echo $COHORT_ATTEMPT $WORLD_SIZE $$ >> " + dir +
                                                 "/pids-$RANK; echo up; sleep 300"));
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = first_line(r.out);
  auto attempt_shape = [&](size_t attempt, int nodes) {
    auto s = status_json(c, id);
    return s["attempts"].size() == attempt + 1 && s["attempts"][attempt]["state"] == "running" &&
           s["attempts"][attempt]["nodes"].size() == size_t(nodes) &&
           s["attempts"][attempt]["world_size"] == nodes;
  };
  ASSERT_TRUE(wait_until([&] { return attempt_shape(0, 3); }, 10s)) << status_json(c, id).dump(2);
  ASSERT_TRUE(wait_until([&] { return recorded_pids(dir).size() == 3; }, 10s));
  auto first_pids = recorded_pids(dir);

  int64_t killed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  c.agent("node-c").signal(SIGKILL);
  c.agent("node-c").wait(5s);
  ASSERT_TRUE(wait_until([&] { return attempt_shape(1, 2); }, 10s)) << status_json(c, id).dump(2);
  auto s = status_json(c, id);
  // When the coordinator noticed, from its event log: within heartbeat_timeout
  // (1 s in the harness) plus its 100 ms tick and some scheduling slack.
  int64_t noticed_ms = -1;
  for (const auto& e : s["events"]) {
    if (e["text"].get<std::string>().find("node node-c lost") != std::string::npos) {
      noticed_ms = e["time_ms"].get<int64_t>() - killed_ms;
      break;
    }
  }
  EXPECT_GE(noticed_ms, 0) << s.dump(2);
  EXPECT_LT(noticed_ms, 2000) << s.dump(2);
  EXPECT_NE(s["attempts"][0]["reason"].get<std::string>().find("node node-c lost"), std::string::npos);
  EXPECT_EQ(s["restarts_used"], 1);
  // The workers of attempt 0 are gone, including the one on the dead agent.
  for (pid_t p : first_pids) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << p;
  ASSERT_TRUE(wait_until([&] {
    auto text = read_file(dir + "/pids-1");
    return text.find("1 2 ") != std::string::npos;
  }, 10s)) << "rank 1 of attempt 1 should see WORLD_SIZE=2";

  c.add_agent("node-d", 1);
  ASSERT_TRUE(wait_until([&] { return attempt_shape(2, 3); }, 10s)) << status_json(c, id).dump(2);
  s = status_json(c, id);
  EXPECT_EQ(s["restarts_used"], 1);  // the scale-up used no restart
  EXPECT_FALSE(s["attempts"][2]["counts_as_restart"].get<bool>());
  EXPECT_NE(s["attempts"][1]["reason"].get<std::string>().find("scale-up"), std::string::npos);

  ASSERT_EQ(c.cli("cancel", {id}).exit_code, 0);
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "cancelled"; }, 10s));
  for (pid_t p : recorded_pids(dir)) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << p;
}

// Issue 35's scenario: kill -9 of node-b's agent under a "1:2" job with one
// restart. node-a's rank fails at once (what Gloo's "Connection reset by
// peer" looks like) before heartbeats notice node-b: one restart, on node-a
// alone, and attempt 0's root cause names node-b.
TEST(Elastic, ALostNodeIsOneRestartOnTheSurvivorAndTheRootCauseNamesIt) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  c.add_agent("node-b", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(2, 10s));
  std::string dir = c.dir();
  std::string reset = dir + "/peer-gone";
  auto job = c.write_job(
      "survivor", job_toml(c, "survivor", "nodes = \"1:2\"\nmax_restarts = 1\n",
                           "echo $COHORT_ATTEMPT $WORLD_SIZE $$ >> " + dir +
                               "/pids-$RANK; if [ $COHORT_ATTEMPT != 0 ]; then echo trained alone; exit 0; fi; "
                               "if [ $RANK = 1 ]; then sleep 300; fi; "
                               "while [ ! -e " + reset + " ]; do sleep 0.02; done; "
                               "echo 'gloo: Connection reset by peer'; exit 1"));
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = first_line(r.out);
  ASSERT_TRUE(wait_until([&] { return recorded_pids(dir).size() == 2; }, 10s)) << status_json(c, id).dump(2);
  c.agent("node-b").signal(SIGKILL);
  c.agent("node-b").wait(5s);
  write_file(reset, "");  // the survivor's connection to node-b resets now
  ASSERT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 20s)) << status_json(c, id).dump(2);
  auto s = status_json(c, id);
  EXPECT_EQ(s["restarts_used"], 1) << s.dump(2);
  ASSERT_EQ(s["attempts"].size(), 2u) << s.dump(2);
  EXPECT_EQ(s["attempts"][1]["nodes"], nlohmann::json::array({"node-a"})) << s.dump(2);
  EXPECT_EQ(s["attempts"][0]["root_cause"]["node"], "node-b") << s.dump(2);
  EXPECT_NE(s["attempts"][0]["reason"].get<std::string>().find("node node-b lost"), std::string::npos)
      << s.dump(2);
  EXPECT_NE(read_file(dir + "/pids-0").find("1 1 "), std::string::npos) << "attempt 1 on node-a alone";
}

TEST(Elastic, ARankThatStopsReportingProgressIsRestartedAfterHangTimeout) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  auto job = c.write_job("hang", job_toml(c, "hang", "hang_timeout = 1.0\nmax_restarts = 1\n",
                                          "echo $COHORT_ATTEMPT $WORLD_SIZE $$ >> " + c.dir() +
                                              "/pids-$RANK; touch $COHORT_PROGRESS_FILE; "
                                          "if [ $COHORT_ATTEMPT = 0 ]; then sleep 300; fi; echo fine"));
  auto started = std::chrono::steady_clock::now();
  auto r = c.cli("submit", {job, "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
  auto s = status_json(c, first_line(r.out));
  ASSERT_EQ(s["attempts"].size(), 2u);
  EXPECT_NE(s["attempts"][0]["root_cause"]["reason"].get<std::string>().find("hung"), std::string::npos)
      << s.dump(2);
  auto pids = recorded_pids(c.dir());
  EXPECT_EQ(pids.size(), 2u);
  for (pid_t p : pids) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << p;
}

TEST(Elastic, Kill9OfTheCoordinatorLosesNoJob) {
  Cluster c;
  std::string state = c.dir() + "/state";
  c.start_coordinator({"--state-dir", state});
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  std::string marker = c.dir() + "/first-started";
  auto first = c.write_job("first", job_toml(c, "first", "", "touch " + marker + "; sleep 3; echo first done"));
  auto second = c.write_job("second", job_toml(c, "second", "", "echo second done"));
  std::string a = first_line(c.cli("submit", {first}).out);
  std::string b = first_line(c.cli("submit", {second}).out);
  ASSERT_TRUE(wait_until([&] { return fs::exists(marker); }, 10s));
  EXPECT_EQ(c.job_state(b), "queued");
  c.kill_coordinator();
  c.start_coordinator({"--state-dir", state});
  EXPECT_TRUE(wait_until([&] { return c.job_state(a) == "succeeded"; }, 20s)) << c.job_state(a);
  EXPECT_TRUE(wait_until([&] { return c.job_state(b) == "succeeded"; }, 20s)) << c.job_state(b);
  // The running job carried on: one attempt, not a restart.
  EXPECT_EQ(status_json(c, a)["attempts"].size(), 1u) << status_json(c, a).dump(2);
}

TEST(Elastic, ARestartedAgentReRegistersAndItsLostWorkersAreRestarted) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  std::string dir = c.dir();
  auto job = c.write_job("phoenix", job_toml(c, "phoenix", "max_restarts = 1\n",
                                             "echo $COHORT_ATTEMPT $WORLD_SIZE $$ >> " + dir +
                                                 "/pids-$RANK; sleep 300"));
  std::string id = first_line(c.cli("submit", {job}).out);
  ASSERT_TRUE(wait_until([&] { return recorded_pids(dir).size() == 1; }, 10s));
  pid_t first = recorded_pids(dir).front();
  std::this_thread::sleep_for(2500ms);  // past the launch grace
  // kill -9 and an immediate restart, faster than the heartbeat timeout.
  c.agent("node-a").signal(SIGKILL);
  c.agent("node-a").wait(5s);
  c.add_agent("node-a", 1);
  EXPECT_TRUE(wait_until([&] { return !process_alive(first); }, 5s));  // died with its agent
  ASSERT_TRUE(wait_until([&] { return recorded_pids(dir).size() == 2; }, 15s)) << status_json(c, id).dump(2);
  auto s = status_json(c, id);
  EXPECT_EQ(s["attempts"].size(), 2u);
  EXPECT_EQ(s["attempts"][1]["state"], "running");
  ASSERT_EQ(c.cli("cancel", {id}).exit_code, 0);
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "cancelled"; }, 10s));
  for (pid_t p : recorded_pids(dir)) EXPECT_TRUE(wait_until([&] { return !process_alive(p); }, 5s)) << p;
}

TEST(Elastic, SigtermToCohortRunGivesWorkersSigtermFirst) {
  Cluster c;
  auto job = c.write_job("preempt", job_toml(c, "preempt", "",
                                             "trap 'echo got TERM, checkpointing; exit 0' TERM; "
                                             "echo ready; while true; do sleep 0.1; done"));
  auto run = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1"}, c.dir() + "/run.log");
  ASSERT_TRUE(run);
  ASSERT_TRUE(wait_until([&] { return run->output().find("[rank 0] ready") != std::string::npos; }, 10s))
      << run->output();
  run->signal(SIGTERM);
  int code = run->wait(20s);
  EXPECT_EQ(code, 130) << run->output();  // interrupted (DESIGN §5), whether by SIGINT or SIGTERM
  EXPECT_NE(run->output().find("[rank 0] got TERM, checkpointing"), std::string::npos) << run->output();
}

}  // namespace
}  // namespace cohort::testing
