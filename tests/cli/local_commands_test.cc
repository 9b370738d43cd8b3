// Commands that need no coordinator, as a user runs them: --version, "did
// you mean", the exit codes of bad usage and invalid files, and --json of
// validate, keygen, export and tokenize.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using nlohmann::json;

std::string worker_binary() {
  return std::filesystem::path(cohort_binary()).parent_path() / "cohort-worker";
}

bool in_git_checkout() {
  return run_program({"git", "-C", COHORT_SOURCE_DIR, "rev-parse", "HEAD"}).exit_code == 0;
}

// True when `commit` is HEAD or one of its ancestors: the build's commit is
// real and of this history (HEAD may have moved on since the last build).
bool is_commit_of_this_history(const std::string& commit) {
  return run_program(
             {"git", "-C", COHORT_SOURCE_DIR, "merge-base", "--is-ancestor", commit, "HEAD"})
             .exit_code == 0;
}

TEST(CliVersion, PrintsTheProjectVersionAndTheCommitBuilt) {
  const std::regex form(
      "(cohort|cohort-worker) ([0-9]+\\.[0-9]+\\.[0-9]+)( \\(commit "
      "([0-9a-f]{12})(-dirty)?\\))?\n");
  std::vector<std::vector<std::string>> commands = {{cohort_binary(), "--version"},
                                                    {cohort_binary(), "status", "--version"}};
  if (std::filesystem::exists(worker_binary())) commands.push_back({worker_binary(), "--version"});
  for (const auto& argv : commands) {
    auto r = run_program(argv);
    EXPECT_EQ(r.exit_code, 0) << argv[0] << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.out, m, form)) << r.out;
    EXPECT_EQ(m[2], COHORT_PROJECT_VERSION);
    if (in_git_checkout()) {
      ASSERT_TRUE(m[4].matched) << "built in a git checkout, the version names the commit: "
                                << r.out;
      EXPECT_TRUE(is_commit_of_this_history(m[4])) << m[4] << " is not HEAD or an ancestor of it";
    }
  }
}

TEST(CliUsage, AMistypedSubcommandOrFlagExitsTwoWithDidYouMean) {
  auto sub = run_cohort({"sumbit", "job.toml"});
  EXPECT_EQ(sub.exit_code, 2);
  EXPECT_NE(sub.err.find("did you mean 'submit'?"), std::string::npos) << sub.err;
  auto flag = run_cohort({"jobs", "--stat", "running"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("unknown flag --stat; did you mean --state?"), std::string::npos)
      << flag.err;
  auto none = run_cohort({});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("a command is required"), std::string::npos) << none.err;
}

TEST(CliUsage, JsonOnACommandThatPrintsNoneIsRefused) {
  for (const char* command : {"agent", "coordinator"}) {
    auto r = run_cohort({"--json", command});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(
        r.err.find(std::string("cohort ") + command + ": --json: this command prints no JSON"),
        std::string::npos)
        << r.err;
  }
}

TEST(CliExitCodes, BadAddressesAndMissingFilesAreUsageErrorsNotUnreachable) {
  EXPECT_EQ(run_cohort({"jobs", "--coordinator", "10.0.0.1"}).exit_code, 2);
  EXPECT_EQ(
      run_program({cohort_binary(), "status"}, {{"COHORT_COORDINATOR", "http://h:1"}}).exit_code,
      2);
  EXPECT_EQ(run_cohort({"coordinator", "--listen", "localhost"}).exit_code, 2);
  auto missing = run_cohort({"export", "nope", "--to", "/tmp/cohort-export-never"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("nope: no such folder"), std::string::npos) << missing.err;
  Cluster c;  // for its folder
  auto empty = run_cohort({"export", c.dir(), "--to", c.dir() + "/hf"});
  if (std::filesystem::exists(worker_binary())) {
    EXPECT_EQ(empty.exit_code, 2) << "a folder without index.json is not a checkpoint: "
                                  << empty.err;
    EXPECT_NE(empty.err.find("has no index.json"), std::string::npos) << empty.err;
  }
  auto tokenize = run_cohort({"tokenize", c.dir() + "/absent.txt", "--out", c.dir() + "/shards"});
  EXPECT_EQ(tokenize.exit_code, 2) << tokenize.err;
}

TEST(CliValidate, JsonDescribesAValidFileAndItsRankPlan) {
  const std::string example = std::string(COHORT_SOURCE_DIR) + "/jobs/examples/print_env.toml";
  auto r = run_cohort({"validate", example, "--nodes", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json_of(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["valid"], true);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["world_size"], 4);
  ASSERT_EQ(j["rank_plan"].size(), 4u);
  EXPECT_EQ(j["rank_plan"][3]["node_rank"], 1);
  EXPECT_EQ(j["rank_plan"][3]["local_rank"], 1);
  EXPECT_NE(j["resolved_toml"].get<std::string>().find("print-env"), std::string::npos);
}

TEST(CliValidate, JsonListsEachErrorWithItsLineAndColumn) {
  Cluster c;
  auto file = c.write_job(
      "bad",
      "[job]\nname = \"bad\"\nkind = \"command\"\nnodez = 2\n[command]\nargv = [\"true\"]\n");
  auto r = run_cohort({"--json", "validate", file});
  EXPECT_EQ(r.exit_code, 2);
  auto j = json_of(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["valid"], false);
  ASSERT_EQ(j["errors"].size(), 1u) << j;
  EXPECT_EQ(j["errors"][0]["line"], 4);
  EXPECT_EQ(j["errors"][0]["column"], 1);
  EXPECT_NE(j["errors"][0]["message"].get<std::string>().find("did you mean nodes?"),
            std::string::npos)
      << j;
}

TEST(CliKeygen, JsonNamesTheKeyFileAndWhereItIsAuthorized) {
  Cluster c;
  auto server = json_of(run_cohort({"keygen", c.dir() + "/coord", "--json"}));
  ASSERT_TRUE(server.is_object()) << server;
  EXPECT_EQ(server["role"], "coordinator");
  EXPECT_EQ(server["public_key"].get<std::string>().size(), 40u) << "a Z85 CURVE key";
  EXPECT_TRUE(server["authorized_in"].is_null());
  auto client = json_of(run_cohort({"keygen", c.dir() + "/me", "--role", "client", "--authorize",
                                    c.dir() + "/coord", "--json"}));
  ASSERT_TRUE(client.is_object()) << client;
  EXPECT_EQ(client["role"], "client");
  EXPECT_EQ(client["public_key_file"], c.dir() + "/me/client.public");
  EXPECT_EQ(client["authorized_in"], c.dir() + "/coord");
  EXPECT_NE(read_file(c.dir() + "/coord/authorized_clients")
                .find(client["public_key"].get<std::string>()),
            std::string::npos);
}

TEST(CliRunAndExport, JsonGivesTheFinishedJobThenTheExportedFiles) {
  if (!std::filesystem::exists(worker_binary()))
    GTEST_SKIP() << "cohort-worker is not built in this tree";
  Cluster c;
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write_file(c.dir() + "/corpus.txt", corpus);
  const std::string out = c.dir() + "/qs";
  auto run = run_cohort({"run",
                         std::string(COHORT_SOURCE_DIR) + "/jobs/examples/quickstart.toml",
                         "--json",
                         "--cpu-slots",
                         "2",
                         "--set",
                         "job.output_dir=" + out,
                         "--set",
                         "train.data=" + c.dir() + "/corpus.txt",
                         "--set",
                         "train.steps=2",
                         "--set",
                         "train.warmup_steps=1",
                         "--set",
                         "train.eval_every=0",
                         "--set",
                         "train.checkpoint_every=2",
                         "--set",
                         "train.sample_tokens=0",
                         "--set",
                         "train.precision=fp32"},
                        std::chrono::seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto job = json_of(run);
  ASSERT_TRUE(job.is_object()) << "stdout must be one document:\n" << run.out;
  EXPECT_EQ(job["state"], "succeeded");
  EXPECT_EQ(job["kind"], "train");
  EXPECT_GT(job["gpu_hours"].get<double>(), 0);
  EXPECT_NE(run.err.find("[rank 0]"), std::string::npos) << "the worker's lines go to stderr";

  auto exported = run_cohort({"export", out, "--to", c.dir() + "/hf", "--json"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  auto e = json_of(exported);
  ASSERT_TRUE(e.is_object()) << exported.out;
  EXPECT_EQ(e["to"], c.dir() + "/hf");
  EXPECT_EQ(e["dtype"], "fp32");
  const auto files = e["files"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(files.begin(), files.end(), "config.json"), files.end()) << e;
  EXPECT_NE(std::find(files.begin(), files.end(), "model.safetensors"), files.end()) << e;
}

TEST(CliTokenize, JsonCountsTheDocumentsAndNamesTheShards) {
  Cluster c;
  write_file(c.dir() + "/a.txt", "one small document\n");
  write_file(c.dir() + "/b.txt", "and another one\n");
  auto r = run_cohort(
      {"tokenize", c.dir() + "/a.txt", c.dir() + "/b.txt", "--out", c.dir() + "/shards", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = json_of(r);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["documents"], 2);
  EXPECT_GT(j["tokens"].get<int64_t>(), 20);
  EXPECT_EQ(j["bad_lines"], 0);
  EXPECT_FALSE(j["shards"].empty());
  EXPECT_EQ(j["out"], c.dir() + "/shards");
}

}  // namespace
}  // namespace cohort::testing
