// Where a job's paths point: relative ones in the file (and the defaults)
// from the job file's folder, --set ones from the current directory, "~/"
// from home; and what check_job_paths says about missing ones, at the key's
// file:line:column.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "jobs/load.h"

namespace cohort::jobs {
namespace {

namespace fs = std::filesystem;

class JobPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cohort-jobpaths-" + std::to_string(::getpid()));
    fs::create_directories(root_ / "project/data");
    fs::create_directories(root_ / "elsewhere");
    std::ofstream(root_ / "project/data/corpus.txt") << "text\n";
    std::ofstream(root_ / "project/train.py") << "print(1)\n";
  }
  void TearDown() override { fs::remove_all(root_); }
  LoadResult load(const std::string& text, std::vector<std::string> sets = {}) {
    std::ofstream(root_ / "project/job.toml") << text;
    LoadOptions options;
    options.base_dir = (root_ / "elsewhere").string();  // where cohort was started
    for (const auto& s : sets) options.overrides.push_back(*parse_override(s));
    return load_job_file((root_ / "project/job.toml").string(), options);
  }
  std::string project(const std::string& rel = "") const {
    return rel.empty() ? (root_ / "project").string() : (root_ / "project" / rel).string();
  }
  fs::path root_;
};

constexpr const char* kTrain =
    "[job]\nname = \"t\"\nkind = \"train\"\noutput_dir = \"out\"\n[model]\npreset = \"tiny\"\n"
    "[train]\ndata = \"data/corpus.txt\"\nsteps = 1\n";

TEST_F(JobPaths, RelativePathsInTheFileAreTheJobFilesFolders) {
  auto r = load(kTrain);
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.job.output_dir, project("out"));
  EXPECT_EQ(r.spec.job.working_dir, project());
  EXPECT_EQ(r.spec.train.data[0].path, project("data/corpus.txt"));
  EXPECT_TRUE(check_job_paths(r).empty());
  // The default output_dir is the job file's folder's too.
  auto d = load("[job]\nname = \"d\"\nkind = \"command\"\n[command]\nargv = [\"true\"]\n");
  ASSERT_TRUE(d.ok()) << d.error_text();
  EXPECT_EQ(d.spec.job.output_dir, project("runs/d"));
}

TEST_F(JobPaths, SetValuesAreTheCurrentDirectorysAndTildeIsHome) {
  auto r = load(kTrain, {"job.output_dir=mine", "train.data=data.txt"});
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.job.output_dir, (root_ / "elsewhere/mine").string());
  EXPECT_EQ(r.spec.train.data[0].path, (root_ / "elsewhere/data.txt").string());
  const char* home = std::getenv("HOME");
  ASSERT_NE(home, nullptr);
  auto t = load("[job]\nname = \"h\"\nkind = \"infer\"\n[model]\nhf_dir = \"~/models/q\"\n[infer]\nprompts = \"p.jsonl\"\n");
  ASSERT_TRUE(t.ok()) << t.error_text();
  EXPECT_EQ(t.spec.model.hf_dir, (fs::path(home) / "models/q").lexically_normal().string());
}

TEST_F(JobPaths, AMissingDataFileOrScriptIsReportedAtItsKey) {
  auto r = load("[job]\nname = \"t\"\nkind = \"train\"\n[model]\npreset = \"tiny\"\n"
                "[train]\ndata = [\"data/corpus.txt\", \"data/gone.txt\"]\nsteps = 1\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  auto problems = check_job_paths(r);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], project("job.toml") + ":7:28: train.data[1]: " + project("data/gone.txt") + " does not exist");
  auto c = load("[job]\nname = \"c\"\nkind = \"command\"\n[command]\nargv = [\"python3\", \"-u\", \"trian.py\"]\n");
  ASSERT_TRUE(c.ok()) << c.error_text();
  auto missing = check_job_paths(c);
  ASSERT_FALSE(missing.empty());
  EXPECT_EQ(missing.back(), project("job.toml") + ":5:26: command.argv[2]: " + project("trian.py") + " does not exist");
  // The script beside the job file is found from anywhere; inline code is no file.
  EXPECT_TRUE(check_job_paths(load("[job]\nname = \"c\"\nkind = \"command\"\n[command]\nargv = [\"sh\", \"-c\", \"x.sh\"]\n")).empty());
  auto unknown = check_job_paths(load("[job]\nname = \"c\"\nkind = \"command\"\n[command]\nargv = [\"no-such-program-x\"]\n"));
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0], project("job.toml") + ":5:9: command.argv[0]: program 'no-such-program-x' is not on PATH");
}

TEST_F(JobPaths, EveryPathIsListedWithWhereItCameFrom) {
  auto r = load("[job]\nname = \"c\"\nkind = \"command\"\n[command]\nargv = [\"python3\", \"train.py\"]\n",
                {"job.output_dir=o"});
  ASSERT_TRUE(r.ok()) << r.error_text();
  auto paths = job_paths(r);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0].key, "job.output_dir");
  EXPECT_EQ(paths[0].origin, "--set job.output_dir=o");
  EXPECT_EQ(paths[1].key, "job.working_dir");
  EXPECT_EQ(paths[1].origin, "default");
  EXPECT_EQ(paths[3].key, "command.argv[1]");
  EXPECT_EQ(paths[3].path, project("train.py"));
  EXPECT_EQ(paths[3].origin, project("job.toml") + ":5:20");
}

}  // namespace
}  // namespace cohort::jobs
