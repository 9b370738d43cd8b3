// `cohort submit --sweep`: one job per point of the grid, each with its
// overrides, its own name and its own output folder.
#include <set>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST(CliSweep, SubmitsOneJobPerPointEachInItsOwnFolder) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 4);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto job = c.write_job("grid", command_job(c, "grid", 1, "echo lr=$LR seed=$SEED"));
  auto r = c.cli("submit", {job, "--sweep", "job.env.LR=small,large", "--sweep", "job.env.SEED=1..2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto points = json_of(r);
  ASSERT_TRUE(points.is_array()) << r.out;
  ASSERT_EQ(points.size(), 4u);
  std::set<std::string> folders;
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    EXPECT_EQ(p["name"], "grid-" + std::to_string(i));
    folders.insert(p["output_dir"].get<std::string>());
    std::string id = p["job_id"];
    ASSERT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 20s)) << id;
    auto logs = c.cli("logs", {id});
    std::string lr = i < 2 ? "small" : "large", seed = std::to_string(i % 2 + 1);
    EXPECT_NE(logs.out.find("lr=" + lr + " seed=" + seed), std::string::npos) << logs.out;
  }
  EXPECT_EQ(folders.size(), 4u);
  EXPECT_EQ(points[3]["overrides"], "job.env.LR=large job.env.SEED=2");

  auto bad = c.cli("submit", {job, "--sweep", "job.env.LR"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--sweep job.env.LR: no KEY="), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace cohort::testing
