// Every example job file is valid; docs/job-file.md documents exactly the schema's
// keys, in the words `cohort validate --reference` prints; `cohort validate`
// answers 0 for good files and 2 with positions for bad ones.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "jobs/load.h"
#include "jobs/schema.h"

namespace cohort::jobs {
namespace {

namespace fs = std::filesystem;

TEST(JobExamples, EveryExampleIsValid) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(COHORT_SOURCE_DIR) / "jobs/examples")) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    auto r = load_job_file(entry.path().string(), LoadOptions{{}, COHORT_SOURCE_DIR, ""});
    EXPECT_TRUE(r.ok()) << entry.path() << ":\n" << r.error_text();
    EXPECT_TRUE(r.warnings.empty()) << entry.path();
  }
  EXPECT_GE(count, 10);
}

TEST(JobExamples, TheJobFilePageDocumentsExactlyTheSchemaKeys) {
  std::ifstream in(fs::path(COHORT_SOURCE_DIR) / "docs/job-file.md");
  ASSERT_TRUE(in) << "docs/job-file.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  // Reference rows look like: | `key` | type | default | meaning |, under ### `[section]`.
  std::set<std::string> documented;
  std::string section;
  std::regex heading(R"(^### `\[([a-z.]+)\]`)"), row(R"(^\| `([a-z_0-9]+)` \|)");
  std::string line;
  while (std::getline(text, line)) {
    std::smatch m;
    if (std::regex_search(line, m, heading)) section = m[1];
    else if (!section.empty() && std::regex_search(line, m, row)) documented.insert(section + "." + std::string(m[1]));
  }
  std::set<std::string> schema;
  for (const auto& f : schema_fields())
    if (!f.key.empty()) schema.insert(f.section + "." + f.key);
  for (const auto& k : documented)
    EXPECT_TRUE(schema.count(k)) << "docs/job-file.md documents unknown key " << k;
  for (const auto& k : schema)
    EXPECT_TRUE(documented.count(k)) << "docs/job-file.md does not document " << k;
  // Types, defaults and meanings too: the page holds the generated tables verbatim.
  const std::string reference = job_file_reference_markdown();
  EXPECT_NE(text.str().find(reference), std::string::npos)
      << "docs/job-file.md's tables differ from the schema; paste `cohort validate --reference`:\n"
      << reference;
}

int run(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output->append(buffer, n);
  int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ValidateCommand, ExitsZeroWithRankPlanAndTwoWithPositions) {
  std::string cohort = std::string(COHORT_BINARY_DIR) + "/bin/cohort";
  ASSERT_TRUE(fs::exists(cohort)) << cohort << " is not built";
  std::string out;
  EXPECT_EQ(run(cohort + " validate " + COHORT_SOURCE_DIR + "/jobs/examples/fsdp2_tp.toml --nodes 2 --gpus-per-node 4", &out), 0) << out;
  EXPECT_NE(out.find("8 ranks = data-parallel 4 × tensor-parallel 2"), std::string::npos) << out;
  fs::path bad = fs::temp_directory_path() / "cohort_validate_bad.toml";
  std::ofstream(bad) << "[job]\nname = \"x\"\nkind = \"command\"\ngpus_per_nod = 2\n[command]\nargv = [\"true\"]\n";
  out.clear();
  EXPECT_EQ(run(cohort + " validate " + bad.string(), &out), 2);
  EXPECT_NE(out.find(bad.string() + ":4:1: unknown key 'gpus_per_nod' in [job]; did you mean gpus_per_node?"),
            std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(cohort + " validate " + COHORT_SOURCE_DIR + "/jobs/examples/ddp.toml --set train.lr=abc", &out), 2);
  EXPECT_NE(out.find("--set train.lr=abc: train.lr: expected a number"), std::string::npos) << out;
}

}  // namespace
}  // namespace cohort::jobs
