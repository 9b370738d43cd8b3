// Tensor-parallel and data-parallel inference as real ranks over Gloo: tp =
// 1, 2 and 4 (and dp replicas) give identical greedy tokens and logits within
// 1e-5, for the tiny preset and for Hugging Face folders written by cohort.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "models/backend.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "models/model.h"
#include "text/tokenizer.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

std::vector<std::vector<int>> random_prompts(int count, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int> p(3 + static_cast<int>(rng() % 17));
    for (int& t : p) t = static_cast<int>(rng() % static_cast<uint32_t>(vocab));
    prompts.push_back(p);
  }
  return prompts;
}

InferJob tiny_job(const std::string& name, int world, int tp) {
  InferJob job;
  job.name = name;
  job.world = world;
  job.tensor_parallel = tp;
  job.model_lines = "preset = \"tiny\"";
  job.prompts_path =
      write_token_prompts(scratch_dir("prompts") / "tiny.jsonl", random_prompts(5, 256, 7));
  job.max_new_tokens = 12;
  return job;
}

TEST(InferRanks, TinyPresetGivesTheSameTokensAndLogitsAtTp1_2_4) {
  const InferRun one = run_infer_job(tiny_job("tiny_tp1", 1, 1));
  ASSERT_EQ(one.error, "");
  ASSERT_EQ(one.outputs.size(), 5u);
  for (const auto& o : one.outputs) EXPECT_EQ(o.at("tokens").size(), 12u);
  EXPECT_EQ(one.summary.at("tensor_parallel"), 1);
  EXPECT_GT(one.summary.at("output_tokens_per_s").get<double>(), 0);
  EXPECT_EQ(one.logits.size(), 5u);
  expect_same_generation(one, run_infer_job(tiny_job("tiny_tp2", 2, 2)), "tp 2");
  expect_same_generation(one, run_infer_job(tiny_job("tiny_tp4", 4, 0)), "tp 4 (all ranks)");
}

TEST(InferRanks, DataParallelReplicasServeTheirShareAndRank0WritesInInputOrder) {
  const InferRun one = run_infer_job(tiny_job("dp_ref", 1, 1));
  ASSERT_EQ(one.error, "");
  const InferRun dp2 = run_infer_job(tiny_job("dp2_tp2", 4, 2));
  expect_same_generation(one, dp2, "tp 2 x dp 2");
  EXPECT_EQ(dp2.summary.at("data_parallel"), 2);
}

TEST(InferRanks, ReplicasWithoutPromptsStillJoinTheGather) {
  InferJob job = tiny_job("idle_replica", 3, 1);  // dp 3, two prompts
  job.prompts_path = write_token_prompts(scratch_dir("prompts") / "two.jsonl", {{1, 2}, {3}});
  const InferRun run = run_infer_job(job);
  ASSERT_EQ(run.error, "");
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[1].at("index"), 1);
  EXPECT_EQ(run.summary.at("data_parallel"), 3);
}

TEST(InferRanks, SampledTokensAreIdenticalAcrossTensorParallelDegrees) {
  InferJob job = tiny_job("sample_tp1", 1, 1);
  job.infer_lines = "temperature = 0.8\ntop_k = 40\ntop_p = 0.9\nseed = 99\n";
  const InferRun one = run_infer_job(job);
  job.name = "sample_tp2", job.world = 2, job.tensor_parallel = 2;
  expect_same_generation(one, run_infer_job(job), "sampled, tp 2");
}

TEST(InferRanks, StopTokenEndsOnlyTheSequenceThatProducedIt) {
  InferJob job = tiny_job("stop_ref", 1, 1);
  const InferRun ref = run_infer_job(job);
  ASSERT_EQ(ref.error, "");
  const auto tokens = ref.outputs[0].at("tokens").get<std::vector<int>>();
  const int stop = tokens[3];
  const size_t first = std::find(tokens.begin(), tokens.end(), stop) - tokens.begin();
  job.name = "stop_tp2", job.world = 2, job.tensor_parallel = 2;
  job.infer_lines = "stop = [" + std::to_string(stop) + "]\n";
  const InferRun stopped = run_infer_job(job);
  ASSERT_EQ(stopped.error, "");
  const auto got = stopped.outputs[0].at("tokens").get<std::vector<int>>();
  EXPECT_EQ(got, std::vector<int>(tokens.begin(), tokens.begin() + first + 1));
  EXPECT_EQ(stopped.outputs[0].at("finish_reason"), "stop");
}

TEST(InferRanks, TextPromptsGoThroughTheByteTokenizer) {
  InferJob job = tiny_job("text", 2, 2);
  const auto path = scratch_dir("prompts") / "text.jsonl";
  std::ofstream(path) << "{\"prompt\": \"The \", \"id\": \"a-1\"}\n\n{\"tokens\": [84, 104, 101, 32]}\n";
  job.prompts_path = path.string();
  const InferRun run = run_infer_job(job);
  ASSERT_EQ(run.error, "");
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[0].at("id"), "a-1");
  EXPECT_FALSE(run.outputs[1].contains("id"));
  // "The " and its byte ids are the same prompt.
  EXPECT_EQ(run.outputs[0].at("tokens"), run.outputs[1].at("tokens"));
  const auto tokens = run.outputs[0].at("tokens").get<std::vector<int>>();
  ASSERT_TRUE(run.outputs[0].at("text").is_string());
  if (std::all_of(tokens.begin(), tokens.end(), [](int t) { return t < 128; })) {
    EXPECT_EQ(run.outputs[0].at("text"), std::string(tokens.begin(), tokens.end()));
  }
}

TEST(InferRanks, APromptTooLongForTheModelFailsEveryRankWithItsIndex) {
  InferJob job = tiny_job("too_long", 2, 2);
  job.prompts_path = write_token_prompts(scratch_dir("prompts") / "long.jsonl",
                                         {{1, 2, 3}, std::vector<int>(120, 5)});
  job.max_new_tokens = 16;  // 120 + 16 > the tiny preset's 128 positions
  EXPECT_NE(run_infer_job(job).error, "");
}

// A Hugging Face folder written by cohort (sharded safetensors), loaded back
// by 1, 2 and 4 ranks each reading its own slices.
std::string write_hf_folder(const std::string& name, const models::ModelConfig& config) {
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(config, {0, 1}, backend.get());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  (*model)->init_weights(11, 0.2f);
  const auto dir = scratch_dir(name);
  const Status saved = hf::save_model_folder(**model, dir.string(), models::DType::kF32, 64 << 10);
  EXPECT_TRUE(saved.is_ok()) << saved.message();
  return dir.string();
}

void expect_hf_folder_equivalent(const std::string& name, const models::ModelConfig& config) {
  const std::string dir = write_hf_folder(name + "_hf", config);
  InferJob job;
  job.model_lines = "hf_dir = \"" + dir + "\"";
  job.prompts_path = write_token_prompts(scratch_dir("prompts") / (name + ".jsonl"),
                                         random_prompts(4, config.vocab_size, 3));
  job.max_new_tokens = 10;
  job.batch_size = 3;
  job.name = name + "_tp1", job.world = 1, job.tensor_parallel = 1;
  const InferRun one = run_infer_job(job);
  ASSERT_EQ(one.error, "");
  ASSERT_EQ(one.outputs.size(), 4u);
  EXPECT_FALSE(one.outputs[0].contains("text"));  // no tokenizer.json, not byte-level
  job.name = name + "_tp2", job.world = 2, job.tensor_parallel = 2;
  expect_same_generation(one, run_infer_job(job), name + " tp 2");
  job.name = name + "_tp4", job.world = 4, job.tensor_parallel = 4;
  expect_same_generation(one, run_infer_job(job), name + " tp 4");
}

TEST(InferRanks, Qwen3FolderWithTiedEmbeddingsAndReplicatedKvHeadsAgreesAtTp1_2_4) {
  models::ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 512, c.hidden = 64, c.layers = 2, c.heads = 8, c.kv_heads = 2, c.head_dim = 16;
  c.intermediate = 96, c.tie_embeddings = true, c.qk_norm = true, c.max_seq = 64;
  expect_hf_folder_equivalent("qwen3", c);
}

TEST(InferRanks, LlamaFolderWithLlama3RopeScalingAgreesAtTp1_2_4) {
  models::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 320, c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 4, c.head_dim = 16;
  c.intermediate = 128, c.tie_embeddings = false, c.qk_norm = false, c.max_seq = 64;
  c.rope_theta = 500000.0f;
  c.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 32};
  expect_hf_folder_equivalent("llama", c);
}

// A byte-level BPE tokenizer.json: the 256 byte tokens, "hello" and " world"
// merges, and one special token (id 265).
std::string tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(text::byte_to_unicode()[b], &s);
    vocab[s] = b;
  }
  const std::vector<std::string> merged = {"he", "ll", "hell", "hello", "\u0120w",
                                           "or", "\u0120wor", "ld", "\u0120world"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[nlohmann::json::parse("\"" + merged[i] + "\"").get<std::string>()] = 256 + static_cast<int>(i);
  nlohmann::json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", nlohmann::json::parse(R"(["h e", "l l", "he ll", "hell o", "\u0120 w",
                                                     "o r", "\u0120w or", "l d", "\u0120wor ld"])")}};
  j["added_tokens"] = {{{"id", 265}, {"content", "<|endoftext|>"}, {"special", true}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}};  // without one, HF joins token strings with spaces
  return j.dump();
}

TEST(InferRanks, HfTokenizerTextAndStopStringsAcrossTensorParallelRanks) {
  models::ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 272, c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 16;
  c.intermediate = 96, c.max_seq = 64;
  const std::string dir = write_hf_folder("tok_hf", c);
  std::ofstream(dir + "/tokenizer.json") << tiny_tokenizer_json();
  auto tokenizer = text::BpeTokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().message();
  InferJob job;
  job.model_lines = "hf_dir = \"" + dir + "\"";
  const auto prompts = scratch_dir("prompts") / "tok.jsonl";
  std::ofstream(prompts) << "{\"prompt\": \"hello world\"}\n{\"prompt\": \"hello\"}\n";
  job.prompts_path = prompts.string();
  job.max_new_tokens = 16;
  job.name = "tok_ref", job.world = 2, job.tensor_parallel = 2;
  const InferRun ref = run_infer_job(job);
  ASSERT_EQ(ref.error, "");
  ASSERT_EQ(ref.outputs.size(), 2u);
  EXPECT_EQ(ref.outputs[0].at("prompt_tokens"), 2);  // "hello", " world"
  const auto tokens = ref.outputs[0].at("tokens").get<std::vector<int32_t>>();
  const std::string text = (*tokenizer)->decode(tokens);
  // A stop string: the text of one printable ASCII byte token past the first.
  size_t pick = 1;
  while (pick < tokens.size() && !(tokens[pick] >= 33 && tokens[pick] < 127)) ++pick;
  if (pick == tokens.size()) GTEST_SKIP() << "no printable byte token was generated";
  const std::string stop(1, static_cast<char>(tokens[pick]));
  size_t k = 1;  // the first prefix whose text contains the stop string
  while ((*tokenizer)->decode({tokens.begin(), tokens.begin() + k}).find(stop) == std::string::npos) ++k;
  job.name = "tok_stop";
  job.infer_lines = "stop = [\"" + stop + "\"]\n";
  if (stop == "\"" || stop == "\\") job.infer_lines = "stop = ['" + stop + "']\n";
  const InferRun stopped = run_infer_job(job);
  ASSERT_EQ(stopped.error, "");
  EXPECT_EQ(stopped.outputs[0].at("tokens").get<std::vector<int32_t>>(),
            std::vector<int32_t>(tokens.begin(), tokens.begin() + k));
  EXPECT_EQ(stopped.outputs[0].at("finish_reason"), "stop");
  const std::string cut = text.substr(0, text.find(stop));
  if (nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) ==
      nlohmann::json(cut).dump(-1, ' ', false, nlohmann::json::error_handler_t::ignore)) {
    EXPECT_EQ(stopped.outputs[0].at("text"), cut);
  }
}

}  // namespace
}  // namespace cohort::testing
