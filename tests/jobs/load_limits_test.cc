// Job files that crashed or slipped through the loader (issue 19): each is
// now a clear error with a position, never a crash.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/jobs/job_text.h"

namespace cohort::jobs {
namespace {
using testing::error_with;
using testing::load;

std::string command_job(const std::string& job_lines, const std::string& argv = "[\"true\"]") {
  return "[job]\nname = \"x\"\nkind = \"command\"\n" + job_lines + "[command]\nargv = " + argv + "\n";
}

TEST(JobFileLimits, VeryLongNameIsAnErrorNotAStackOverflow) {
  // std::regex_match recursed once per character and died past ~30,000.
  auto r = load("[job]\nname = \"" + std::string(50000, 'a') + "\"\nkind = \"command\"\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.name: 50000 characters long; at most 128");
  EXPECT_EQ(e.line, 2);
  auto bad = load("[job]\nname = \"" + std::string(100, 'a') + " b\"\nkind = \"command\"\n[command]\nargv = [\"true\"]\n");
  error_with(bad, "may use only letters, digits");
}

TEST(JobFileLimits, MicroBatchTimesDataParallelDoesNotOverflow) {
  // 8 nodes × 1024 ranks × micro 524288 wrapped to 0 in an int, then `% 0`.
  auto r = load(std::string(testing::kTrainJob) + "micro_batch = 524288\nglobal_batch = 1\n",
                {"job.nodes=8", "job.gpus_per_node=1024"});
  error_with(r, "sequences per step; at most 1000000000");
}

TEST(JobFileLimits, ElasticNodesStringIsCappedLikeTheInteger) {
  auto r = load(command_job("nodes = \"1:2147483647\"\n"));
  auto e = error_with(r, "job.nodes: MAX 2147483647 in \"1:2147483647\" is out of range (at most 100000 nodes)");
  EXPECT_EQ(e.line, 4);
  auto i = load(command_job("nodes = 100001\n"));
  error_with(i, "job.nodes: 100001 is out of range (must be between 1 and 100000)");
}

TEST(JobFileLimits, WorldSizeIsCapped) {
  auto r = load(command_job("nodes = 100000\ngpus_per_node = 1024\n"));
  error_with(r, "ranks; at most 1048576");
}

TEST(JobFileLimits, NanTimeoutsAreRefused) {
  for (const char* key : {"stop_grace", "hang_timeout", "placement_timeout"}) {
    auto r = load(command_job(std::string(key) + " = nan\n"));
    auto e = error_with(r, std::string("job.") + key + ": nan is not a number");
    EXPECT_EQ(e.line, 4) << key;
  }
  auto negative = load(command_job("stop_grace = -1.0\n"));
  error_with(negative, "job.stop_grace: -1 is out of range");
}

TEST(JobFileLimits, EnvironmentNamesMustBeNames) {
  auto r = load("[job]\nname = \"x\"\nkind = \"command\"\n[job.env]\n\"\" = \"1\"\n\"A=B\" = \"2\"\n"
                "\"9X\" = \"3\"\nGOOD_1 = \"4\"\n[command]\nargv = [\"true\"]\n");
  error_with(r, "job.env.: \"\" is not an environment variable name");
  error_with(r, "job.env.A=B: \"A=B\" is not an environment variable name");
  error_with(r, "job.env.9X: \"9X\" is not an environment variable name");
  EXPECT_EQ(r.errors.size(), 3u) << r.error_text();
}

TEST(JobFileLimits, SeqLenLongerThanThePresetIsAnError) {
  auto r = load(std::string(testing::kTrainJob) + "seq_len = 256\n");
  error_with(r, "train.seq_len: 256 is longer than preset \"tiny\"'s max_seq 128");
  // The default (256) is lowered to what the preset supports.
  auto d = load(testing::kTrainJob);
  ASSERT_TRUE(d.ok()) << d.error_text();
  EXPECT_EQ(d.spec.train.seq_len, 128);
  auto with_max = load(std::string(testing::kTrainJob) + "seq_len = 256\n", {"model.max_seq=512"});
  EXPECT_TRUE(with_max.ok()) << with_max.error_text();
}

TEST(JobFileLimits, ArgvOfIntegersIsOneError) {
  auto r = load(command_job("", "[1, 2]"));
  ASSERT_EQ(r.errors.size(), 1u) << r.error_text();
  error_with(r, "command.argv: expected an array of strings");
}

TEST(JobFileLimits, MissingSectionErrorHasALine) {
  auto r = load("[model]\npreset = \"tiny\"\n");
  auto e = error_with(r, "missing section [job]");
  EXPECT_EQ(e.to_string().rfind("job.toml:1:1: missing section [job]", 0), 0u) << e.to_string();
}

TEST(JobFileLimits, HugeStringValuesAreShortenedInMessages) {
  auto r = load(command_job("gpus_per_node = \"" + std::string(100000, 'g') + "\"\n"));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_LT(r.errors[0].message.size(), 200u);
}

TEST(JobFilePaths, OutputDirThatIsAFileAndMissingWorkingDirAreReported) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("cohort-paths-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  LoadResult r;
  r.spec.source_path = "job.toml";
  r.spec.job.output_dir = (dir / "file").string();
  r.spec.job.working_dir = (dir / "missing").string();
  r.key_positions["job.output_dir"] = "job.toml:3:14";
  auto problems = check_job_paths(r);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "job.toml:3:14: job.output_dir: " + (dir / "file").string() + " exists and is not a directory");
  EXPECT_EQ(problems[1], "job.toml: job.working_dir: " + (dir / "missing").string() + " does not exist");
  r.spec.job.output_dir = (dir / "out").string();
  r.spec.job.working_dir = dir.string();
  EXPECT_TRUE(check_job_paths(r).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::jobs
