// A model folder may be anyone's. These run the real binaries on folders
// built to hang or crash them (a chat template that recurses, allocates or
// loops without end; a split pattern that backtracks exponentially; a
// config.json declaring sizes that would be terabytes) and check that each
// process ends within a second with an error naming the limit or field at
// fault, and never dies by a signal.
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../data/data_fixture.h"
#include "../integration/cluster_harness.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;
using testing::run_cohort;
using testing::run_command;
using testing::write_file;

struct Timed {
  testing::CommandResult result;
  double seconds = 0;
};

Timed timed(const std::vector<std::string>& argv) {
  const auto start = std::chrono::steady_clock::now();
  Timed t;
  t.result = run_command(argv, std::chrono::seconds(30));
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return t;
}

std::string bin(const std::string& name) {
  const char* dir = std::getenv("COHORT_BIN_DIR");
  return (dir ? std::string(dir) : std::string(COHORT_BINARY_DIR) + "/bin") + "/" + name;
}

// A tokenizer folder whose chat template is `source`, and a chat JSONL file.
fs::path template_folder(const std::string& name, const std::string& source) {
  const fs::path dir = testing::data_scratch("hostile_" + name);
  write_file((dir / "tokenizer.json").string(), testing::test_tokenizer_json());
  write_file((dir / "tokenizer_config.json").string(),
             nlohmann::json({{"eos_token", "<|im_end|>"}, {"chat_template", source}}).dump());
  write_file((dir / "chat.jsonl").string(),
             R"({"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]})"
             "\n");
  return dir;
}

class HostileTemplate : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(HostileTemplate, CohortTokenizeEndsWithinASecondNamingTheLimit) {
  const auto& [limit, source] = GetParam();
  const fs::path dir = template_folder(std::to_string(std::hash<std::string>()(source)), source);
  const Timed t = timed({bin("cohort"), "tokenize", (dir / "chat.jsonl").string(), "--model", dir.string(), "--out",
                         (dir / "shards").string()});
  EXPECT_NE(t.result.exit_code, 0) << t.result.out;
  EXPECT_LT(t.result.exit_code, 128) << "killed by a signal: " << t.result.err;
  EXPECT_LT(t.seconds, 1.0);
  const std::string said = t.result.out + t.result.err;
  EXPECT_TRUE(said.find(limit) != std::string::npos || said.find("kMaxMilliseconds") != std::string::npos)
      << said.substr(0, 400);
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, HostileTemplate,
    ::testing::Values(std::make_pair(std::string("kMaxItems"), std::string("{% for i in range(10**9) %}{{ i }}{% endfor %}")),
                      std::make_pair(std::string("kMaxCallDepth"),
                                     std::string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")),
                      std::make_pair(std::string("kMaxBytes"), std::string("{{ 'x' * 10**10 }}")),
                      std::make_pair(std::string("kMaxSteps"), std::string("{% for i in range(100000) %}{% for j in "
                                                              "range(100000) %}{% endfor %}{% endfor %}")),
                      std::make_pair(std::string("kMaxTokensPerTag"),
                                     "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}")),
    [](const auto& info) { return std::to_string(info.index) + "_" + info.param.first; });

TEST(HostileTokenizer, ACatastrophicSplitPatternDoesNotStallCohortTokenize) {
  const fs::path dir = testing::data_scratch("hostile_regex");
  auto j = nlohmann::json::parse(testing::test_tokenizer_json());
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\w+\\s?)*$";
  write_file((dir / "tokenizer.json").string(), j.dump());
  std::string text;
  while (text.size() < 32 * 1024) text += "hello world hello world hello!\n";
  write_file((dir / "corpus.txt").string(), text);
  const Timed t = timed({bin("cohort"), "tokenize", (dir / "corpus.txt").string(), "--model", dir.string(), "--out",
                         (dir / "shards").string()});
  EXPECT_EQ(t.result.exit_code, 0) << t.result.err;
  EXPECT_LT(t.seconds, 2.0);
}

// An infer job on a folder whose config.json declares sizes past the
// limits: the worker refuses it before allocating, naming the field.
class HostileConfig : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(HostileConfig, TheWorkerRefusesItNamingTheField) {
  const auto& [field, fields] = GetParam();
  const fs::path dir = testing::data_scratch(std::string("hostile_config_") + field);
  write_file((dir / "config.json").string(),
             R"({"model_type": "llama", "vocab_size": 512, "intermediate_size": 128, "num_key_value_heads": 2, )" +
                 fields + "}");
  write_file((dir / "prompts.jsonl").string(), "{\"tokens\": [1, 2, 3]}\n");
  write_file((dir / "job.toml").string(), "[job]\nname = \"hostile\"\nkind = \"infer\"\noutput_dir = \"" +
                                              (dir / "out").string() + "\"\n[model]\nhf_dir = \"" + dir.string() +
                                              "\"\n[infer]\nprompts = \"" + (dir / "prompts.jsonl").string() +
                                              "\"\nmax_new_tokens = 2\n");
  const Timed t = timed({bin("cohort-worker"), (dir / "job.toml").string()});
  EXPECT_NE(t.result.exit_code, 0) << t.result.out;
  EXPECT_LT(t.result.exit_code, 128) << "killed by a signal: " << t.result.err;
  // The refusal costs the process's start (about 1 s on a loaded 2-core
  // machine), not an allocation of the declared sizes (minutes, or the OOM
  // killer).
  EXPECT_LT(t.seconds, 5.0);
  EXPECT_NE((t.result.out + t.result.err).find(field), std::string::npos) << t.result.err.substr(0, 400);
}

INSTANTIATE_TEST_SUITE_P(
    Attacks, HostileConfig,
    ::testing::Values(
        std::make_pair(std::string("hidden_size"), std::string(R"("hidden_size": 1000000000, "num_attention_heads": 4, "num_hidden_layers": 2)")),
        std::make_pair(std::string("num_attention_heads * head_dim"),
                       std::string(R"("hidden_size": 64, "num_attention_heads": 1000, "head_dim": 1000, "num_hidden_layers": 2)")),
        std::make_pair(std::string("num_hidden_layers"),
                       std::string(R"("hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1000000)"))),
    [](const auto& info) { return std::to_string(info.index); });

}  // namespace
}  // namespace cohort::hf
