// Drains with real processes: an agent sent SIGTERM leaves (its node is
// drained, then left; the elastic job shrinks off it without restart
// budget, and nothing reports it as a failure), and `cohort drain` /
// `cohort undrain` move work off a node and back.
#include <signal.h>

#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

nlohmann::json status_of(Cluster& c, const std::string& id) {
  auto j = nlohmann::json::parse(c.cli("status", {id, "--json"}, 10s).out, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

std::string node_state(Cluster& c, const std::string& name) {
  auto j = nlohmann::json::parse(c.cli("nodes", {"--json"}, 10s).out, nullptr, false);
  if (!j.is_array()) return "";
  for (const auto& n : j) {
    if (n.value("name", "") == name) return n.value("state", "");
  }
  return "";
}

// Whether attempt `number` of the job runs on `nodes` nodes.
bool runs_on(Cluster& c, const std::string& id, size_t number, int nodes) {
  auto s = status_of(c, id);
  return s["attempts"].size() == number + 1 && s["attempts"][number]["state"] == "running" &&
         s["attempts"][number]["nodes"].size() == size_t(nodes);
}

std::string elastic_job(Cluster& c, const std::string& name, const std::string& script) {
  return c.write_job(name, "[job]\nname = \"" + name + "\"\nkind = \"command\"\nnodes = \"1:2\"\n"
                           "max_restarts = 0\nstop_grace = 2.0\noutput_dir = \"" + c.dir() + "/" + name +
                           "\"\n[command]\nargv = [\"sh\", \"-c\", \"" + script + "\"]\n");
}

TEST(Drain, AnAgentSentSigtermLeavesAndTheElasticJobShrinksOffItWithoutBudget) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  c.add_agent("node-b", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(2, 10s));
  // Long enough to be running when node-b leaves; short once alone.
  auto job = elastic_job(c, "leave", "if [ $WORLD_SIZE = 2 ]; then sleep 60; fi; echo finished on $WORLD_SIZE");
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(wait_until([&] { return runs_on(c, id, 0, 2); }, 15s)) << status_of(c, id).dump(2);
  c.agent("node-b").signal(SIGTERM);
  EXPECT_EQ(c.agent("node-b").wait(15s), 0) << c.agent("node-b").output();
  EXPECT_EQ(node_state(c, "node-b"), "left");
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 20s)) << status_of(c, id).dump(2);
  auto s = status_of(c, id);
  EXPECT_EQ(s["restarts_used"], 0);
  EXPECT_FALSE(s.value("has_root_cause", true)) << s.dump(2);
  ASSERT_GE(s["attempts"].size(), 2u) << s.dump(2);
  EXPECT_EQ(s["attempts"][0]["state"], "stopped");
  EXPECT_FALSE(s["attempts"][0].value("has_root_cause", true)) << s.dump(2);
  EXPECT_NE(s["attempts"][0].value("reason", "").find("node node-b is leaving"), std::string::npos) << s.dump(2);
  EXPECT_EQ(s["attempts"].back()["nodes"], nlohmann::json::array({"node-a"}));
  auto logs = c.cli("logs", {id});
  EXPECT_NE(logs.out.find("finished on 1"), std::string::npos) << logs.out;
  // The leaving agent ran nothing new, and it stays left, never lost.
  EXPECT_EQ(c.agent("node-b").output().find("attempt 1: starting"), std::string::npos) << c.agent("node-b").output();
  std::this_thread::sleep_for(2s);  // past the harness's 1 s heartbeat timeout
  EXPECT_EQ(node_state(c, "node-b"), "left");
}

TEST(Drain, DrainStopRunningMovesTheJobAndUndrainGrowsItBack) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  c.add_agent("node-b", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(2, 10s));
  auto job = elastic_job(c, "moves", "sleep 60");
  auto r = c.cli("submit", {job});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(wait_until([&] { return runs_on(c, id, 0, 2); }, 15s)) << status_of(c, id).dump(2);
  auto drained = c.cli("drain", {"node-b", "--stop-running", "--wait"}, 30s);
  ASSERT_EQ(drained.exit_code, 0) << drained.out << drained.err;
  EXPECT_NE(drained.out.find("node node-b drained"), std::string::npos) << drained.out;
  EXPECT_NE(drained.out.find("node node-b is drained: nothing runs there"), std::string::npos) << drained.out;
  EXPECT_EQ(node_state(c, "node-b"), "drained");
  ASSERT_TRUE(wait_until([&] { return runs_on(c, id, 1, 1); }, 15s)) << status_of(c, id).dump(2);
  auto undrained = c.cli("undrain", {"node-b"});
  ASSERT_EQ(undrained.exit_code, 0) << undrained.err;
  EXPECT_NE(undrained.out.find("takes new work again"), std::string::npos) << undrained.out;
  EXPECT_TRUE(wait_until([&] { return runs_on(c, id, 2, 2); }, 15s)) << status_of(c, id).dump(2);
  EXPECT_EQ(status_of(c, id)["restarts_used"], 0);
  EXPECT_EQ(c.cli("uncordon", {"node-z"}).exit_code, 2);  // the alias, and an unknown node is bad usage
  c.cli("cancel", {id});
}

}  // namespace
}  // namespace cohort::testing
