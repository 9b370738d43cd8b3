// Each class of job-file error, with its exact file:line:column.
#include <gtest/gtest.h>

#include "tests/jobs/job_text.h"

namespace cohort::jobs {
namespace {
using testing::error_with;
using testing::load;

TEST(JobFileErrors, SyntaxErrorHasPosition) {
  auto r = load("[job\nname = 1\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 1);
  EXPECT_EQ(r.errors[0].column, 5);
  EXPECT_EQ(r.errors[0].to_string().rfind("job.toml:1:5: ", 0), 0u);
}

TEST(JobFileErrors, WrongTypeNamesKeyAndValue) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\ngpus_per_node = \"two\"\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.gpus_per_node: expected an integer, got string \"two\"");
  EXPECT_EQ(e.line, 4);
  EXPECT_EQ(e.column, 17);
}

TEST(JobFileErrors, OutOfRangeValue) {
  auto r = load(std::string(testing::kTrainJob) + "lr = -0.5\n");
  auto e = error_with(r, "train.lr: -0.5 is out of range");
  EXPECT_EQ(e.line, 10);
  EXPECT_EQ(e.column, 6);
}

TEST(JobFileErrors, UnknownKeySuggestsNearest) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\ngpus_per_nod = 2\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "unknown key 'gpus_per_nod' in [job]; did you mean gpus_per_node?");
  EXPECT_EQ(e.line, 4);
  EXPECT_EQ(e.column, 1);
}

TEST(JobFileErrors, KeyInWrongSectionPointsToItsSection) {
  auto r = load(std::string(testing::kTrainJob) + "strategy = \"ddp\"\n");
  error_with(r, "unknown key 'strategy' in [train]; did you mean [parallel] strategy?");
}

TEST(JobFileErrors, UnknownSectionSuggestsNearest) {
  auto r = load(std::string(testing::kTrainJob) + "[paralel]\nstrategy = \"ddp\"\n");
  auto e = error_with(r, "unknown section [paralel]; did you mean [parallel]?");
  EXPECT_EQ(e.line, 10);
}

TEST(JobFileErrors, UnknownEnumValueListsChoices) {
  auto r = load(std::string(testing::kTrainJob) + "[parallel]\nstrategy = \"fsdp\"\n");
  auto e = error_with(r, "parallel.strategy: unknown value \"fsdp\" (one of: ddp, zero1, zero2, zero3, fsdp2)");
  EXPECT_EQ(e.line, 11);
  EXPECT_EQ(e.column, 12);
}

TEST(JobFileErrors, APortRangeMustBeLoToHiAboveTheReservedPorts) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\nport_range = \"900-1000\"\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.port_range: \"900-1000\" must be LO-HI with 1024 <= LO <= HI <= 65535");
  EXPECT_EQ(e.line, 4);
  EXPECT_EQ(e.column, 14);
  error_with(load("[job]\nname = \"x\"\nkind = \"command\"\nport_range = \"30000:30010\"\n[command]\nargv = [\"true\"]\n"),
             "is not a port range like \"29500-29999\"");
  auto ok = load("[job]\nname = \"x\"\nkind = \"command\"\nport_range = \"30000-30010\"\n[command]\nargv = [\"true\"]\n");
  EXPECT_TRUE(ok.ok()) << ok.error_text();
  EXPECT_EQ(ok.spec.job.port_range, "30000-30010");
}

TEST(JobFileErrors, MissingKeysRequiredByKind) {
  auto r = load("[job]\nname = \"x\"\nkind = \"train\"\n[train]\nsteps = 5\n");
  error_with(r, "[train] is missing the required key 'data'");
  error_with(r, "needs [model] with one of preset, hf_dir or checkpoint");
  auto c = load("[job]\nname = \"x\"\nkind = \"command\"\n");
  auto e = error_with(c, "kind = \"command\" needs a [command] section");
  EXPECT_EQ(e.line, 3);
  auto i = load("[job]\nname = \"x\"\nkind = \"infer\"\n[model]\npreset = \"tiny\"\n[infer]\ntop_k = 3\n");
  error_with(i, "[infer] is missing the required key 'prompts'");
  auto j = load("[model]\npreset = \"tiny\"\n");
  error_with(j, "missing section [job]");
}

TEST(JobFileErrors, NodesRangeMustBeOrdered) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\nnodes = \"3:1\"\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.nodes: MIN 3 is larger than MAX 1");
  EXPECT_EQ(e.line, 4);
  auto bad = load("[job]\nname = \"x\"\nkind = \"command\"\nnodes = \"two\"\n[command]\nargv = [\"true\"]\n");
  error_with(bad, "is not \"MIN:MAX\"");
}

TEST(JobFileErrors, TensorParallelMustDivideTheNode) {
  auto r = load(std::string(testing::kTrainJob) + "[parallel]\ntensor_parallel = 3\n");
  auto e = error_with(r, "parallel.tensor_parallel: 3 does not divide gpus_per_node 4");
  EXPECT_EQ(e.line, 11);
  EXPECT_EQ(e.column, 19);
}

TEST(JobFileErrors, ExpertParallelNamesWhatItNeeds) {
  // 4 ranks, tp 2 → dp 2: ep 4 does not divide it.
  auto r = load(std::string(testing::kTrainJob) + "[parallel]\ntensor_parallel = 2\nexpert_parallel = 4\n");
  error_with(r, "parallel.expert_parallel: 4 does not divide the data-parallel degree 2 at 1 node(s)");
  auto sharded = load(std::string(testing::kTrainJob) + "[parallel]\nstrategy = \"fsdp2\"\nexpert_parallel = 2\n");
  EXPECT_TRUE(sharded.ok()) << sharded.error_text();
  auto lora = load(std::string(testing::kTrainJob) + "[parallel]\nexpert_parallel = 2\n[lora]\nrank = 8\n");
  EXPECT_TRUE(lora.ok()) << lora.error_text();
  auto good = load(std::string(testing::kTrainJob) + "[parallel]\nexpert_parallel = 4\n");
  EXPECT_TRUE(good.ok()) << good.error_text();
  EXPECT_EQ(good.spec.parallel.expert_parallel, 4);
}

TEST(JobFileErrors, GlobalBatchMustDivideByMicroBatchTimesDataParallel) {
  // 4 ranks, tp 2 → dp 2; micro 4 × dp 2 = 8 does not divide 12.
  auto r = load(std::string(testing::kTrainJob) + "micro_batch = 4\nglobal_batch = 12\n[parallel]\ntensor_parallel = 2\n");
  auto e = error_with(r, "train.global_batch: 12 is not divisible by micro_batch 4 × data-parallel degree 2 (= 8)");
  EXPECT_EQ(e.line, 11);
}

TEST(JobFileErrors, ElasticGlobalBatchIsCheckedAtEveryNodeCount) {
  auto text = std::string(testing::kTrainJob) + "micro_batch = 1\nglobal_batch = 8\n";
  text.replace(text.find("gpus_per_node = 4"), 17, "gpus_per_node = 1\nnodes = \"2:3\"");
  auto r = load(text);
  error_with(r, "data-parallel degree 3 at 3 nodes");
}

TEST(JobFileErrors, AllErrorsAreReportedInFileOrder) {
  auto r = load("[job]\nname = \"bad name\"\nkind = \"command\"\nmax_restarts = -2\ngpus = 1\n[command]\nargv = []\n");
  ASSERT_EQ(r.errors.size(), 4u) << r.error_text();
  for (size_t i = 1; i < r.errors.size(); ++i) EXPECT_LE(r.errors[i - 1].line, r.errors[i].line);
}

TEST(JobFileErrors, InvalidKindDoesNotCascade) {
  auto r = load("[job]\nname = \"x\"\nkind = \"trian\"\n");
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  error_with(r, "did you mean \"train\"?");
}

TEST(JobFileErrors, EnvMayNotOverrideTheLaunchContract) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\n[job.env]\nFOO = \"1\"\nRANK = \"3\"\n"
                "[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.env.RANK: RANK is set by cohort for every worker");
  EXPECT_EQ(e.line, 6);
  EXPECT_EQ(e.column, 8);
}

TEST(JobFileErrors, MissingFileIsAnError) {
  auto r = load_job_file("/nonexistent/job.toml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("cannot open the job file"), std::string::npos);
}

TEST(JobFileOverrides, BadOverrideIsReportedAsComingFromTheCommandLine) {
  auto r = load(testing::kTrainJob, {"train.lr=abc"});
  auto e = error_with(r, "train.lr: expected a number, got string \"abc\"");
  EXPECT_EQ(e.source, "--set train.lr=abc");
  EXPECT_EQ(e.line, 0);
  EXPECT_EQ(e.to_string(), "--set train.lr=abc: train.lr: expected a number, got string \"abc\"");
}

TEST(JobFileOverrides, UnknownOverrideKeySuggests) {
  auto r = load(testing::kTrainJob, {"train.stepz=3"});
  auto e = error_with(r, "unknown key 'stepz' in [train]; did you mean steps?");
  EXPECT_EQ(e.source, "--set train.stepz=3");
}

TEST(JobFileOverrides, MalformedOverrideIsRejected) {
  EXPECT_FALSE(parse_override("lr").is_ok());
  EXPECT_FALSE(parse_override("lr=3").is_ok());
  EXPECT_FALSE(parse_override("=3").is_ok());
  EXPECT_TRUE(parse_override("train.lr=3").is_ok());
}

// Keys that the chosen settings do not read are reported, not silently ignored.
TEST(JobFileWarnings, MixedPrecisionKeysThatHaveNoEffect) {
  auto r = load(std::string(testing::kTrainJob) + "initial_loss_scale = 1024\n[parallel]\nparam_dtype = \"bf16\"\n");
  EXPECT_TRUE(r.errors.empty()) << r.error_text();
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].find("parallel.param_dtype has no effect with strategy = \"ddp\""), std::string::npos)
      << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("train.initial_loss_scale has no effect with train.precision = \"bf16\""),
            std::string::npos)
      << r.warnings[1];
  auto used = load(std::string(testing::kTrainJob) +
                   "precision = \"fp16\"\ninitial_loss_scale = 1024\n[parallel]\nstrategy = \"fsdp2\"\n"
                   "param_dtype = \"fp16\"\n");
  EXPECT_TRUE(used.errors.empty()) << used.error_text();
  EXPECT_TRUE(used.warnings.empty()) << used.warnings[0];
  EXPECT_EQ(used.spec.train.precision, Precision::kFp16);
  EXPECT_EQ(used.spec.train.initial_loss_scale, 1024.0);
  EXPECT_EQ(used.spec.parallel.param_dtype, "fp16");
}

TEST(JobFileErrors, PrecisionOutsideItsChoices) {
  auto r = load(std::string(testing::kTrainJob) + "precision = \"fp8\"\n");
  error_with(r, "train.precision");
}

}  // namespace
}  // namespace cohort::jobs
