// `cohort history` (finished jobs, as sacct shows them) and `cohort help
// [COMMAND]`.
#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST(CliHistory, ListsFinishedJobsWithTimesGpuHoursAndRootCause) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  std::string ok = submitted_id(c.cli("submit", {c.write_job("fine", command_job(c, "fine", 1, "echo fine"))}));
  std::string bad = submitted_id(c.cli("submit", {c.write_job("broken", command_job(c, "broken", 1, "exit 3"))}));
  std::string running =
      submitted_id(c.cli("submit", {c.write_job("later", command_job(c, "later", 1, "sleep 30"))}));
  ASSERT_TRUE(wait_until([&] { return c.job_state(bad) == "failed" && c.job_state(running) == "running"; }, 20s));
  auto r = c.cli("history", {"--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json_of(r);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_EQ(j.size(), 2u) << "only finished jobs: " << r.out;
  EXPECT_EQ(j[0]["id"], ok);
  EXPECT_EQ(j[0]["state"], "succeeded");
  EXPECT_GT(j[0]["started_ms"].get<int64_t>(), 0);
  EXPECT_GE(j[0]["ended_ms"].get<int64_t>(), j[0]["started_ms"].get<int64_t>());
  EXPECT_GE(j[0]["gpu_hours"].get<double>(), 0.0);
  EXPECT_EQ(j[1]["id"], bad);
  EXPECT_EQ(j[1]["root_cause"]["reason"], "exited with code 3");
  auto text = c.cli("history", {});
  EXPECT_NE(text.out.find("GPU-HOURS"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rank 0 on node-a: exited with code 3"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find(running), std::string::npos) << text.out;
  c.cli("cancel", {running});
}

TEST(CliHelp, HelpPrintsTheHelpOfCohortOrOfACommand) {
  auto all = run_cohort({"help"});
  EXPECT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("history"), std::string::npos) << all.out;
  auto submit = run_cohort({"help", "submit"});
  EXPECT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_NE(submit.out.find("--sweep"), std::string::npos) << submit.out;
  EXPECT_NE(submit.out.find("--cancel-on-interrupt"), std::string::npos) << submit.out;
  auto rm = run_cohort({"help", "jobs", "rm"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.out.find("forget finished jobs"), std::string::npos) << rm.out;
  auto nope = run_cohort({"help", "sumbit"});
  EXPECT_EQ(nope.exit_code, 2);
  EXPECT_NE(nope.err.find("cohort help: cohort has no command 'sumbit'"), std::string::npos) << nope.err;
}

}  // namespace
}  // namespace cohort::testing
