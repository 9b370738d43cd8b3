// Each training data format end to end through a short training run of a
// Qwen3-shaped Hugging Face folder with its own tokenizer: text, JSONL,
// chat, prompt/completion, cohort shards, nanoGPT .bin, Megatron .bin/.idx
// and a weighted mixture; a run resumed from a checkpoint gives the same
// losses as an uninterrupted one for every format; a run over a 2 GB shard
// keeps its resident memory flat; and the export carries the tokenizer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "data/shard_format.h"
#include "data/tokenize.h"
#include "hf/load_quantization.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "parallel/checkpoint.h"
#include "models/model.h"
#include "tests/data/data_fixture.h"
#include "tests/hf/quantized_folder.h"
#include "tests/train/train_fixture.h"

namespace cohort::testing {
namespace {

// config.json + safetensors of a small Qwen3 (vocabulary 320, room for the
// test tokenizer's 272 ids) and the tokenizer files.
fs::path model_folder() {
  static const fs::path dir = [] {
    fs::path d = make_scratch("hf_model");
    models::ModelConfig c;
    c.model_type = "qwen3";
    c.vocab_size = 320, c.hidden = 32, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 8;
    c.intermediate = 64, c.tie_embeddings = true, c.qk_norm = true, c.max_seq = 64;
    auto backend = models::make_cpu_backend();
    auto model = models::Model::create(c, {0, 1}, backend.get());
    EXPECT_TRUE(model.is_ok());
    (*model)->init_weights(5, 0.05f);
    EXPECT_TRUE(hf::save_model_folder(**model, d.string(), models::DType::kF32).is_ok());
    write_tokenizer_folder(d);
    return d;
  }();
  return dir;
}

void write_inputs(const fs::path& dir) {
  {
    std::ofstream chat(dir / "chat.jsonl"), pc(dir / "pc.jsonl"), text(dir / "text.jsonl");
    for (int i = 0; i < 300; ++i) {
      chat << R"({"messages": [{"role": "user", "content": "hello )" << i % 17 << R"("}, {"role": "assistant", "content": "world )"
           << i % 5 << R"( hello"}]})" << "\n";
      pc << R"({"prompt": "hello )" << i % 13 << R"( ", "completion": "world )" << i % 3 << R"("})" << "\n";
      text << R"({"text": "hello world )" << i << R"( the end"})" << "\n";
    }
  }
  write_corpus(dir / "corpus.txt");
  data::TokenizeOptions t;
  t.inputs = {(dir / "chat.jsonl").string()};
  t.model_dir = model_folder().string();
  t.out_dir = (dir / "shards").string();
  ASSERT_TRUE(data::tokenize_inputs(t).is_ok());
  // nanoGPT and Megatron files of the same token stream.
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 20000; ++i) tokens.push_back(uint16_t((i * 7919) % 271));
  std::ofstream(dir / "train.bin", std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  std::ofstream(dir / "mega.bin", std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  std::string idx("MMIDIDX\0\0", 9);
  const uint64_t version = 1, n = 1, docs = 2;
  const int32_t size = int32_t(tokens.size());
  const int64_t pointer = 0, d0 = 0, d1 = 1;
  idx.append(reinterpret_cast<const char*>(&version), 8);
  idx.push_back(char(8));  // uint16
  idx.append(reinterpret_cast<const char*>(&n), 8).append(reinterpret_cast<const char*>(&docs), 8);
  idx.append(reinterpret_cast<const char*>(&size), 4).append(reinterpret_cast<const char*>(&pointer), 8);
  idx.append(reinterpret_cast<const char*>(&d0), 8).append(reinterpret_cast<const char*>(&d1), 8);
  std::ofstream(dir / "mega.idx", std::ios::binary) << idx;
}

fs::path inputs() {
  static const fs::path dir = [] {
    fs::path d = make_scratch("inputs");
    write_inputs(d);
    return d;
  }();
  return dir;
}

fs::path data_job(const std::string& name, const std::string& data, int steps, const std::string& extra = "") {
  fs::path dir = make_scratch(name);
  std::ofstream(dir / "job.toml") << "[job]\nname = \"" << name << "\"\nkind = \"train\"\noutput_dir = \""
                                  << (dir / "out").string() << "\"\n[model]\nhf_dir = \"" << model_folder().string()
                                  << "\"\n[train]\ndata = " << data << "\nsteps = " << steps
                                  << "\nmicro_batch = 2\nglobal_batch = 4\nseq_len = 32\nlr = 3e-3\nprecision = \"fp32\""
                                  << "\ncheckpoint_every = 3\neval_fraction = 0.0\n" << extra;
  return dir;
}

std::map<int, double> run_job(const fs::path& dir, std::string* error = nullptr) {
  RankGroup group = start_ranks(worker_binary(), {(dir / "job.toml").string()}, 1, worker_env());
  const std::string failed = wait_ranks(group, std::chrono::seconds(120), error != nullptr);
  if (error) *error = failed;
  else EXPECT_EQ(failed, "");
  return read_losses(dir / "out");
}

std::string quoted(const fs::path& p) {
  std::string out(1, '"');
  out.append(p.string()).push_back('"');
  return out;
}

struct FormatCase {
  const char* name;
  std::string data;
};

std::vector<FormatCase> format_cases() {
  const fs::path in = inputs();
  return {{"text", quoted(in / "corpus.txt")},
          {"jsonl", quoted(in / "text.jsonl")},
          {"chat", quoted(in / "chat.jsonl")},
          {"prompt_completion", quoted(in / "pc.jsonl")},
          {"shards", quoted(in / "shards")},
          {"nanogpt", quoted(in / "train.bin")},
          {"megatron", quoted(in / "mega.bin")},
          {"mixture", "[{path = " + quoted(in / "chat.jsonl") + ", weight = 3}, " + quoted(in / "train.bin") + "]"}};
}

TEST(TrainingData, EveryFormatTrainsAndResumesExactly) {
  for (const auto& c : format_cases()) {
    SCOPED_TRACE(c.name);
    const fs::path dir = data_job(std::string("fmt_") + c.name, c.data, 6);
    const auto straight = run_job(dir);
    ASSERT_EQ(straight.size(), 6u);
    for (const auto& [step, loss] : straight) EXPECT_TRUE(std::isfinite(loss) && loss > 0) << step;
    EXPECT_LT(straight.at(6), straight.at(1)) << "the loss goes down";
    // Back to the step-3 checkpoint, as if the run had stopped there; the
    // second start resumes from it and must retrace steps 4..6 exactly.
    fs::remove_all(dir / "out" / "checkpoints" / "step-6");
    std::ofstream(dir / "out" / "checkpoints" / "latest") << "step-3\n";
    fs::remove(dir / "out" / "metrics.jsonl");
    const auto resumed = run_job(dir);
    ASSERT_EQ(resumed.size(), 3u);
    for (int step = 4; step <= 6; ++step) EXPECT_DOUBLE_EQ(resumed.at(step), straight.at(step)) << "step " << step;
  }
}

TEST(TrainingData, TextForAModelWithoutATokenizerIsRefusedWithWhatToDo) {
  fs::path bare = make_scratch("bare_model");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(model_folder() / f, bare / f);
  fs::path dir = make_scratch("no_tokenizer");
  std::string job = read_text_file(data_job("no_tokenizer", quoted(inputs() / "corpus.txt"), 2) / "job.toml");
  job.replace(job.find(model_folder().string()), model_folder().string().size(), bare.string());
  std::ofstream(dir / "job.toml") << job;
  std::string error;
  run_job(dir, &error);
  EXPECT_NE(error, "");
}

TEST(TrainingData, ExportCarriesTheTokenizerAndGenerationConfig) {
  const fs::path dir = data_job("export", quoted(inputs() / "chat.jsonl"), 3);
  run_job(dir);
  const fs::path hf = dir / "hf";
  RankGroup exporter = start_ranks(worker_binary(), {"export", parallel::latest_checkpoint((dir / "out").string()),
                                                     "--to", hf.string(), "--dtype", "bf16"}, 1, worker_env());
  ASSERT_EQ(wait_ranks(exporter), "");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(fs::exists(hf / f)) << f;
  auto gen = nlohmann::json::parse(read_text_file(hf / "generation_config.json"));
  EXPECT_EQ(gen.value("eos_token_id", -1), 268);
  EXPECT_NE(read_text_file(hf / "config.json").find("bfloat16"), std::string::npos);
}

// A pre-quantized folder trains: a GPTQ act-order folder (packed by the
// tests' own packer) gives the losses of an f32 folder of its dequantized
// weights, step for step; so does [model] quantize against an f32 folder of
// the round-tripped weights.
TEST(TrainingData, QuantizedWeightsTrainAsTheirDequantizedValuesDo) {
  auto cpu = models::make_cpu_backend();
  auto model = hf::load_model(model_folder().string(), {}, cpu.get());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const fs::path quantized = make_scratch("gptq_model"), plain = make_scratch("gptq_dequantized");
  hf::testing::write_quantized_folder(quantized.string(), **model,
                                      {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", true}},
                                      hf::testing::gptq_store(32, true));
  ASSERT_TRUE(hf::save_model_folder(**model, plain.string(), models::DType::kF32).is_ok());
  write_tokenizer_folder(quantized);
  write_tokenizer_folder(plain);
  auto job_on = [&](const std::string& name, const fs::path& folder, const std::string& quantize) {
    std::string job = read_text_file(data_job(name, quoted(inputs() / "corpus.txt"), 4) / "job.toml");
    job.replace(job.find(model_folder().string()), model_folder().string().size(), folder.string());
    job.replace(job.find("[train]"), 7, "quantize = \"" + quantize + "\"\n[train]");
    std::ofstream(scratch_dir(name) / "job.toml") << job;
    return scratch_dir(name);
  };
  const auto from_gptq = run_job(job_on("train_gptq", quantized, "none"));
  ASSERT_EQ(from_gptq.size(), 4u);
  EXPECT_EQ(from_gptq, run_job(job_on("train_gptq_f32", plain, "none")));

  auto original = hf::load_model(model_folder().string(), {}, cpu.get());
  ASSERT_TRUE(original.is_ok());
  ASSERT_TRUE(hf::apply_quantize_option(**original, "int8", "").is_ok());
  const fs::path round_tripped = make_scratch("int8_round_trip");
  ASSERT_TRUE(hf::save_model_folder(**original, round_tripped.string(), models::DType::kF32).is_ok());
  write_tokenizer_folder(round_tripped);
  const auto with_option = run_job(job_on("train_int8", model_folder(), "int8"));
  ASSERT_EQ(with_option.size(), 4u);
  EXPECT_EQ(with_option, run_job(job_on("train_int8_f32", round_tripped, "none")));
}

// A 2 GiB cohort shard (sparse): the worker maps it and its peak resident
// set stays a few hundred MB, as it would for a file of any size.
TEST(TrainingData, ARunOverATwoGigabyteShardKeepsResidentMemoryFlat) {
  fs::path dir = make_scratch("large_run");
  const std::string path = (dir / "large.tokens").string();
  const uint64_t tokens = uint64_t(1) << 30;
  uint8_t head[64] = {0};
  auto put = [&](int at, uint64_t v, int n) { std::memcpy(head + at, &v, size_t(n)); };
  std::memcpy(head, data::kShardMagic, 8);
  put(8, 1, 4), put(12, 2, 4), put(16, 272, 4), put(24, tokens, 8), put(32, 1, 8), put(40, 64, 8);
  put(56, 64 + tokens * 2, 8);
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, head, 64, 0), 64);
  const uint64_t offsets[2] = {0, tokens};
  ASSERT_EQ(::pwrite(fd, offsets, 16, off_t(64 + tokens * 2)), 16);
  ::close(fd);
  const fs::path job = data_job("large_run_job", quoted(fs::path(path)), 4);
  run_job(job);
  const auto rows = read_step_rows(job / "out");
  ASSERT_EQ(rows.size(), 4u);
  const double peak_mb = rows.rbegin()->second.value("memory_mb", 1e9);
  std::printf("2 GiB shard run: peak resident memory %.0f MB\n", peak_mb);
  EXPECT_LT(peak_mb, 400);
  fs::remove(path);
}

}  // namespace
}  // namespace cohort::testing
