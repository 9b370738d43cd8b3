// `cohort validate` opens the model as the worker will: what would fail at
// start (a folder that is no model folder, a safetensors file given as one,
// a train.seq_len beyond the model's max_seq, a tokenizer with more tokens
// than the model's vocabulary) fails here, at its key's file:line.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../data/data_fixture.h"
#include "../integration/cluster_harness.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;
using testing::run_cohort;
using testing::write_file;

const char* kConfig = R"({"model_type": "llama", "vocab_size": %d, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "max_position_embeddings": 512})";

std::string config_json(int vocab) {
  char text[512];
  std::snprintf(text, sizeof text, kConfig, vocab);
  return text;
}

// A train job on `model_lines` (the [model] table's body) with seq_len `seq_len`.
fs::path train_job(const fs::path& dir, const std::string& model_lines, int seq_len) {
  write_file((dir / "corpus.txt").string(), "hello world\n");
  write_file((dir / "job.toml").string(),
             "[job]\nname = \"v\"\nkind = \"train\"\n[model]\n" + model_lines + "\n[train]\ndata = \"corpus.txt\"\n"
             "steps = 1\nseq_len = " + std::to_string(seq_len) + "\n");
  return dir / "job.toml";
}

TEST(ValidateModel, AFolderWithoutConfigJsonIsNoModelFolder) {
  const fs::path dir = testing::data_scratch("validate_no_config");
  fs::create_directories(dir / "model");
  auto r = run_cohort({"validate", train_job(dir, "hf_dir = \"model\"", 64).string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("job.toml:5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has no config.json"), std::string::npos) << r.err;
}

TEST(ValidateModel, ASafetensorsFileIsNotAFolder) {
  const fs::path dir = testing::data_scratch("validate_file");
  write_file((dir / "model.safetensors").string(), "not a folder");
  auto r = run_cohort({"validate", train_job(dir, "hf_dir = \"model.safetensors\"", 64).string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("is not a folder"), std::string::npos) << r.err;
}

TEST(ValidateModel, ASeqLenBeyondTheModelsMaxSeqIsRefusedAtItsKey) {
  const fs::path dir = testing::data_scratch("validate_seq_len");
  fs::create_directories(dir / "model");
  write_file((dir / "model" / "config.json").string(), config_json(512));
  auto r = run_cohort({"validate", train_job(dir, "hf_dir = \"model\"", 1024).string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("train.seq_len: 1024 is beyond the model's max_seq 512"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("job.toml:9:"), std::string::npos) << r.err;
  // cohort run says the same before it starts anything.
  auto run = run_cohort({"run", (dir / "job.toml").string(), "--cpu-slots", "1"});
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.err.find("train.seq_len: 1024 is beyond the model's max_seq 512"), std::string::npos) << run.err;
}

// parallel.expert_parallel needs a model with experts, a whole number of
// them on each rank of a group: both fail validation at the key.
TEST(ValidateModel, ExpertParallelNeedsExpertsItCanSplit) {
  const fs::path dir = testing::data_scratch("validate_ep");
  write_file((dir / "corpus.txt").string(), "hello world\n");
  auto job = [&](const std::string& preset, int gpus, int ep) {
    write_file((dir / "job.toml").string(),
               "[job]\nname = \"v\"\nkind = \"train\"\ngpus_per_node = " + std::to_string(gpus) +
                   "\n[model]\npreset = \"" + preset + "\"\n[parallel]\nexpert_parallel = " + std::to_string(ep) +
                   "\n[train]\ndata = \"corpus.txt\"\nsteps = 1\nseq_len = 32\n");
    return run_cohort({"validate", (dir / "job.toml").string()});
  };
  auto dense = job("tiny", 2, 2);
  EXPECT_EQ(dense.exit_code, 2) << dense.out;
  EXPECT_NE(dense.err.find("parallel.expert_parallel: 2 needs a mixture-of-experts model; qwen3 is dense"),
            std::string::npos)
      << dense.err;
  auto uneven = job("tiny-moe", 6, 3);
  EXPECT_EQ(uneven.exit_code, 2) << uneven.out;
  EXPECT_NE(uneven.err.find("parallel.expert_parallel: 3 does not divide the model's 8 experts"), std::string::npos)
      << uneven.err;
  auto fine = job("tiny-moe", 4, 2);
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
}

// [model] adapter: a folder whose adapter_config.json describes what
// cohort's adapters are not (DoRA) fails validation at its key, naming the field.
TEST(ValidateModel, AnAdapterCohortCannotMergeIsRefusedAtItsKey) {
  const fs::path dir = testing::data_scratch("validate_adapter");
  fs::create_directories(dir / "model");
  fs::create_directories(dir / "adapter");
  write_file((dir / "model" / "config.json").string(), config_json(512));
  write_file((dir / "adapter" / "adapter_config.json").string(),
             R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "use_dora": true})");
  write_file((dir / "serve.toml").string(),
             "[job]\nname = \"s\"\nkind = \"serve\"\n[model]\nhf_dir = \"model\"\nadapter = \"adapter\"\n");
  auto r = run_cohort({"validate", (dir / "serve.toml").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("serve.toml:6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.adapter: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use_dora"), std::string::npos) << r.err;
}

TEST(ValidateModel, ATokenizerLargerThanTheVocabularyIsRefused) {
  const fs::path dir = testing::data_scratch("validate_vocab");
  fs::create_directories(dir / "model");
  write_file((dir / "model" / "config.json").string(), config_json(256));
  write_file((dir / "model" / "tokenizer.json").string(), testing::test_tokenizer_json());
  auto r = run_cohort({"validate", train_job(dir, "hf_dir = \"model\"", 64).string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("more than the model's vocab_size 256"), std::string::npos) << r.err;
  // The same folder with room for every token validates.
  write_file((dir / "model" / "config.json").string(), config_json(512));
  auto ok = run_cohort({"validate", (dir / "job.toml").string()});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// `cohort tokenize`: a --model folder without a tokenizer is said once,
// before any input is read; an unknown chat role names its line, message and
// role.
TEST(TokenizeModel, AFolderWithoutATokenizerIsSaidOnceAndAnUnknownRoleByName) {
  const fs::path dir = testing::data_scratch("tokenize_model");
  fs::create_directories(dir / "empty");
  write_file((dir / "a.jsonl").string(), "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n");
  auto r = run_cohort({"tokenize", (dir / "a.jsonl").string(), (dir / "a.jsonl").string(), "--model",
                       (dir / "empty").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("has no tokenizer.json or tokenizer.model"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("has no tokenizer.json"), r.err.rfind("has no tokenizer.json")) << r.err;
  fs::create_directories(dir / "model");
  write_file((dir / "model" / "tokenizer.json").string(), testing::test_tokenizer_json());
  write_file((dir / "chat.jsonl").string(),
             R"({"messages": [{"role": "user", "content": "a"}, {"role": "asistant", "content": "b"}]})" "\n");
  auto roles = run_cohort({"tokenize", (dir / "chat.jsonl").string(), "--model", (dir / "model").string(),
                           "--out", (dir / "out2").string()});
  EXPECT_NE(roles.exit_code, 0) << roles.out;
  EXPECT_NE((roles.out + roles.err).find("messages[1].role \"asistant\" is not a chat role"), std::string::npos)
      << roles.out << roles.err;
}

}  // namespace
}  // namespace cohort::hf
