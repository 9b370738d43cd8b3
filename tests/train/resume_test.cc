// Resume and elastic equivalence: a run whose worker is killed with -9 after a
// checkpoint, started again, ends with the same per-step losses and the same
// final parameters as a run that was never interrupted; and a 4-rank run that
// loses half its ranks carries on at 2 ranks on the same loss curve; fp16
// training with dynamic loss scaling skips overflowing steps, recovers, and
// resumes with its loss scale exactly where it was.
#include <signal.h>

#include <gtest/gtest.h>

#include "parallel/checkpoint.h"
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
  return {read_losses(dir / "out"), read_checkpoint(parallel::latest_checkpoint((dir / "out").string()))};
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
  return {read_losses(dir / "out"), read_checkpoint(parallel::latest_checkpoint((dir / "out").string()))};
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

// fp16 GEMM operands (emulated on CPU, as tensor cores round them) with a
// loss scale of 2^30: the first steps overflow, are skipped and halve the
// scale; after loss_scale_window finite steps it doubles again. fsdp2, so
// the parameter gathers are fp16 too.
// train.activation_checkpointing (and train.lm_head_chunk_tokens) through
// the whole worker: with FSDP2 (whose
// hooks gather each block's parameters again for its backward, where the
// recomputation runs) and with tensor parallelism (whose recomputed forward
// makes its all-reduces again), selective and full give the losses and final
// parameters of the run that keeps everything.
TEST(ActivationMemory, CheckpointingAndAChunkedHeadTrainOnTheSameCurve) {
  for (const auto& [strategy, tp] : {std::pair<std::string, int>{"fsdp2", 1}, {"ddp", 2}}) {
    TrainJob job;
    job.strategy = strategy;
    job.tp = tp;
    job.gpus_per_node = 2;
    job.steps = 6;
    const std::string base = "ckpt_" + strategy + std::to_string(tp);
    const Outcome none = uninterrupted(base + "_none", job, 2);
    double activation_mb = read_step_rows(scratch_dir(base + "_none") / "out").rbegin()->second["activation_mb"];
    for (const char* mode : {"selective", "full"}) {
      SCOPED_TRACE(strategy + ", tp " + std::to_string(tp) + ", " + mode);
      job.extra = std::string("activation_checkpointing = \"") + mode + "\"\n";
      const Outcome got = uninterrupted(base + "_" + mode, job, 2);
      expect_same_losses(none, got, 0.0);
      EXPECT_EQ(none.final_state, got.final_state);
      // metrics.jsonl's activation_mb: each mode keeps less than the last.
      const double mb = read_step_rows(scratch_dir(base + "_" + mode) / "out").rbegin()->second["activation_mb"];
      EXPECT_LT(mb, activation_mb);
      activation_mb = mb;
    }
    // train.lm_head_chunk_tokens: the head in chunks of 48 of the 128 tokens
    // (the head's gradient then adds chunk by chunk, so equal to rounding).
    job.extra = "lm_head_chunk_tokens = 48\n";
    const Outcome chunked = uninterrupted(base + "_chunked", job, 2);
    expect_same_losses(none, chunked, 1e-5);
    EXPECT_LT(read_step_rows(scratch_dir(base + "_chunked") / "out").rbegin()->second["activation_mb"],
              read_step_rows(scratch_dir(base + "_none") / "out").rbegin()->second["activation_mb"]);
  }
}

TEST(Fp16LossScaling, SkipsOverflowsTrainsAndResumesWithTheSameScale) {
  TrainJob job;
  job.strategy = "fsdp2";
  job.precision = "fp16";
  job.steps = 24;
  job.extra = "initial_loss_scale = 1073741824\nloss_scale_window = 3\n";
  Outcome straight = uninterrupted("fp16_straight", job, 2);
  auto rows = read_step_rows(scratch_dir("fp16_straight") / "out");
  ASSERT_EQ(rows.size(), 24u);
  int skipped = 0, first_applied = 0;
  double previous_scale = 0;
  for (const auto& [step, row] : rows) {
    ASSERT_TRUE(row.contains("loss_scale")) << row.dump();
    double scale = row["loss_scale"].get<double>();
    bool was_skipped = row.value("skipped", false);
    if (step > 1) {
      // The scale only halves after a skip, or doubles after a window of finite steps.
      bool halved = scale == previous_scale / 2, doubled = scale == previous_scale * 2;
      EXPECT_TRUE(scale == previous_scale || halved || doubled) << "step " << step << ": " << scale;
      if (halved) {
        EXPECT_TRUE(rows.at(step - 1).value("skipped", false)) << "step " << step;
      }
    }
    if (was_skipped) ++skipped;
    else if (!first_applied) first_applied = step;
    previous_scale = scale;
  }
  EXPECT_TRUE(rows.at(1).value("skipped", false)) << "2^30 must overflow fp16 at the first step";
  EXPECT_GE(skipped, 2);
  EXPECT_LT(skipped, 16);
  EXPECT_LT(rows.at(24)["loss"].get<double>(), 0.9 * rows.at(first_applied)["loss"].get<double>());
  // Skipped steps are not optimizer steps: AdamW's bias correction counts updates only.
  std::ifstream index_file(fs::path(parallel::latest_checkpoint((scratch_dir("fp16_straight") / "out").string())) /
                           "index.json");
  auto index = nlohmann::json::parse(index_file);
  EXPECT_EQ(index["step"].get<int>(), 24);
  EXPECT_EQ(index["optimizer_steps"].get<int>(), 24 - skipped);

  Outcome resumed = interrupted("fp16_resumed", job, 2, /*victim=*/1, /*after_step=*/8, 2);
  expect_same_losses(straight, resumed, 1e-6);
  EXPECT_LE(max_difference(straight.final_state, resumed.final_state), 1e-6);
  auto resumed_rows = read_step_rows(scratch_dir("fp16_resumed") / "out");
  for (const auto& [step, row] : rows)
    EXPECT_EQ(resumed_rows.at(step)["loss_scale"], row["loss_scale"]) << "step " << step;
}

// One worker rank, its output captured.
std::string run_one_rank(const fs::path& job, int* exit_code) {
  std::string command = "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                        std::to_string(pick_port());
  for (const auto& [k, v] : worker_env()) command += " " + k + "=" + v;
  command += " " + worker_binary() + " " + job.string() + " 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  *exit_code = ::pclose(pipe);
  return output;
}

// A damaged checkpoint index is refused with the file and field named, before
// anything is loaded or written: the checkpoint and `latest` stay as they were.
TEST(ResumeFromDamagedIndex, NamesTheFileAndFieldAndKeepsTheCheckpoint) {
  TrainJob job;
  job.precision = "fp16";
  job.steps = 4;
  uninterrupted("damaged_index", job, 1);
  fs::path out = scratch_dir("damaged_index") / "out";
  fs::path index_path = out / "checkpoints" / "step-4" / "index.json";
  nlohmann::json index = nlohmann::json::parse(std::ifstream(index_path));
  ASSERT_TRUE(index.contains("loss_scaler"));
  index["loss_scaler"]["scale"] = "large";
  std::ofstream(index_path) << index.dump(1);
  job.steps = 8;
  fs::path file = write_job(scratch_dir("damaged_index"), job);
  int exit_code = 0;
  std::string output = run_one_rank(file, &exit_code);
  EXPECT_NE(exit_code, 0) << output;
  EXPECT_NE(output.find("step-4/index.json: field 'loss_scaler'"), std::string::npos) << output;
  std::ifstream latest(out / "checkpoints" / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-4");
  EXPECT_FALSE(fs::exists(out / "checkpoints" / "step-8"));
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(index_path)), index);
}

}  // namespace
}  // namespace cohort::testing
