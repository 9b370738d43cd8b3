// Resume and elastic equivalence: a run whose worker is killed with -9 after a
// checkpoint, started again, ends with the same per-step losses and the same
// final parameters as a run that was never interrupted; and a 4-rank run that
// loses half its ranks carries on at 2 ranks on the same loss curve.
#include <signal.h>

#include <gtest/gtest.h>

#include "jobs/runners/checkpoint.h"
#include "tests/train/train_fixture.h"

namespace cohort::testing {
namespace {

struct Outcome {
  std::map<int, double> losses;
  std::map<std::string, std::vector<float>> final_state;
};

Outcome uninterrupted(const std::string& name, const TrainJob& job, int world) {
  fs::path dir = make_scratch(name);
  fs::path file = write_job(dir, job);
  RankGroup group = start_ranks(worker_binary(), {file.string()}, world, worker_env());
  EXPECT_EQ(wait_ranks(group), "");
  return {read_losses(dir / "out"), read_checkpoint(runners::latest_checkpoint((dir / "out").string()))};
}

// Kills rank `victim` with -9 once checkpoint `after_step` exists, waits for
// the survivors to fail on their own, then starts `world_after` ranks again.
Outcome interrupted(const std::string& name, const TrainJob& job, int world, int victim, int after_step,
                    int world_after) {
  fs::path dir = make_scratch(name);
  fs::path file = write_job(dir, job);
  RankGroup first = start_ranks(worker_binary(), {file.string()}, world, worker_env());
  EXPECT_TRUE(wait_for_checkpoint(dir / "out", after_step, std::chrono::seconds(120)));
  ::kill(first.pids[victim], SIGKILL);
  // The victim must have died of the kill (not finished first), and the
  // survivors must notice and fail by themselves rather than hang.
  int status = 0;
  ::waitpid(first.pids[victim], &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  first.pids.erase(first.pids.begin() + victim);
  std::string survivors = wait_ranks(first, std::chrono::seconds(60), /*expect_failure=*/true);
  EXPECT_NE(survivors, "") << "a rank whose peer died must fail";
  EXPECT_NE(survivors, "ranks did not finish within the deadline");
  RankGroup second = start_ranks(worker_binary(), {file.string()}, world_after, worker_env());
  EXPECT_EQ(wait_ranks(second), "");
  return {read_losses(dir / "out"), read_checkpoint(runners::latest_checkpoint((dir / "out").string()))};
}

void expect_same_losses(const Outcome& a, const Outcome& b, double relative) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (const auto& [step, loss] : a.losses) {
    ASSERT_TRUE(b.losses.count(step)) << "step " << step;
    EXPECT_NEAR(b.losses.at(step), loss, relative * loss) << "step " << step;
  }
}

class ResumeAfterKill : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeAfterKill, ContinuesExactlyWhereTheUninterruptedRunGoes) {
  TrainJob job;
  job.strategy = GetParam();
  job.steps = 24;
  Outcome straight = uninterrupted("straight_" + job.strategy, job, 2);
  Outcome resumed = interrupted("resumed_" + job.strategy, job, 2, /*victim=*/1, /*after_step=*/4, 2);
  ASSERT_EQ(straight.losses.size(), 24u);
  // Same world, same order of sums: the resumed run repeats the same arithmetic.
  expect_same_losses(straight, resumed, 1e-6);
  EXPECT_LE(max_difference(straight.final_state, resumed.final_state), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Strategies, ResumeAfterKill, ::testing::Values("ddp", "fsdp2"));

TEST(ElasticResume, FourRanksLoseTwoAndStayOnTheCurve) {
  TrainJob job;
  job.strategy = "ddp";
  job.micro_batch = 1;  // 4 ranks: accumulation 2; 2 ranks: accumulation 4
  job.checkpoint_every = 6;
  job.steps = 24;
  Outcome straight = uninterrupted("elastic_straight", job, 4);
  Outcome shrunk = interrupted("elastic_shrunk", job, 4, /*victim=*/3, /*after_step=*/6, 2);
  ASSERT_EQ(shrunk.losses.size(), 24u);
  // The same global batches; only the order of sums differs (dp 4 → 2), so the
  // curves agree to float rounding amplified by a few Adam steps: 1e-4 relative.
  expect_same_losses(straight, shrunk, 1e-4);
}

}  // namespace
}  // namespace cohort::testing
