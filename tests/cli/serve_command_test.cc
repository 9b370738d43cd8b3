// `cohort serve MODEL [flags]`: a serve job from the command line, as
// `vllm serve` users start one, with no job file: the job file it stands for,
// then a real server on CPU slots answering the OpenAI API.
#include <signal.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "cli_test_util.h"
#include "hf/weights.h"
#include "jobs/command_line_job.h"
#include "jobs/load.h"
#include "models/model.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A tiny Qwen3-shaped model folder (byte vocabulary: no tokenizer needed
// for token-id prompts).
std::string tiny_model_folder(const std::string& dir) {
  models::ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 256, c.hidden = 32, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.head_dim = 16;
  c.intermediate = 64, c.max_seq = 128;
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(c, {}, backend.get(), {}, models::Model::Buffers::kParamsOnly);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  (*model)->init_weights(3);
  const std::string folder = dir + "/tiny-model";
  EXPECT_TRUE(hf::save_model_folder(**model, folder).is_ok());
  return folder;
}

TEST(CliServe, TheCommandLineStandsForAServeJob) {
  Cluster scratch;
  const std::string model = tiny_model_folder(scratch.dir());
  jobs::ServeCommandLine line;
  line.model = model;
  line.port = 0;
  line.tensor_parallel = 2;
  line.api_key = "k";
  line.served_model_name = "tiny";
  line.max_running = 8;
  line.context = 96;
  line.adapter = scratch.dir() + "/adapter";
  line.lora_modules = {"sql=" + scratch.dir() + "/sql", "chat=" + scratch.dir() + "/chat"};
  auto loaded = jobs::load_job_text(jobs::serve_job_toml(line), "cohort serve", {});
  ASSERT_TRUE(loaded.ok()) << loaded.error_text();
  const jobs::JobSpec& spec = loaded.spec;
  EXPECT_TRUE(spec.has_serve);
  EXPECT_EQ(spec.job.name, "serve-tiny-model");
  EXPECT_EQ(spec.job.gpus_per_node, 2);
  EXPECT_EQ(spec.model.hf_dir, model);
  EXPECT_EQ(spec.serve.port, 0);
  EXPECT_EQ(spec.serve.api_key, "k");
  EXPECT_EQ(spec.serve.model_name, "tiny");
  EXPECT_EQ(spec.serve.max_running, 8);
  EXPECT_EQ(spec.serve.context, 96);
  EXPECT_EQ(spec.model.adapter, line.adapter);
  EXPECT_EQ(spec.serve.adapters, (std::map<std::string, std::string>{{"sql", scratch.dir() + "/sql"},
                                                                     {"chat", scratch.dir() + "/chat"}}));
  // A run's output_dir (or a checkpoint folder) is a checkpoint, not hf_dir.
  fs::create_directories(scratch.dir() + "/run/checkpoints");
  write_file(scratch.dir() + "/run/checkpoints/latest", "step-2\n");
  line.model = scratch.dir() + "/run";
  EXPECT_NE(jobs::serve_job_toml(line).find("checkpoint = \"" + line.model + "\""), std::string::npos);
}

TEST(CliServe, ServesTheOpenAiApiUntilInterrupted) {
  Cluster scratch;
  const std::string model = tiny_model_folder(scratch.dir());
  const std::string out = scratch.dir() + "/out";
  auto server = Process::start({cohort_binary(), "serve", model, "--port", "0", "--cpu-slots", "1",
                                "--served-model-name", "tiny", "--set", "job.output_dir=" + out},
                               scratch.dir() + "/serve.log");
  const std::string endpoint = out + "/endpoint.json";
  ASSERT_TRUE(wait_until([&] { return fs::exists(endpoint) || !server->running(); }, 60s)) << server->output();
  ASSERT_TRUE(fs::exists(endpoint)) << server->output();
  const auto where = nlohmann::json::parse(read_file(endpoint));
  const std::string base = where.at("url").get<std::string>();
  auto models = run_program({"curl", "-sS", "--max-time", "20", base + "/models"});
  ASSERT_EQ(models.exit_code, 0) << models.err;
  const auto listed = nlohmann::json::parse(models.out, nullptr, false);
  ASSERT_TRUE(listed.is_object() && listed.contains("data")) << models.out << "\n" << server->output();
  EXPECT_EQ(listed["data"][0]["id"], "tiny") << models.out;
  // endpoint.json comes before the model has loaded: /health says when.
  const std::string root = base.substr(0, base.size() - 3);
  ASSERT_TRUE(wait_until([&] {
    return run_program({"curl", "-sf", "--max-time", "5", root + "/health"}).exit_code == 0;
  }, 60s)) << server->output();
  auto completion = run_program({"curl", "-sS", "--max-time", "30", base + "/completions", "-H",
                                 "content-type: application/json", "-d",
                                 R"({"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 5, "temperature": 0})"});
  ASSERT_EQ(completion.exit_code, 0) << completion.err;
  const auto reply = nlohmann::json::parse(completion.out, nullptr, false);
  ASSERT_TRUE(reply.is_object() && reply.contains("usage")) << completion.out << "\n" << server->output();
  EXPECT_EQ(reply["usage"]["completion_tokens"], 5) << completion.out;
  server->signal(SIGINT);
  EXPECT_EQ(server->wait(30s), 130) << server->output();
}

TEST(CliServe, AModelThatIsNotThereIsNamed) {
  auto r = run_cohort({"serve", "/nonexistent/model-folder", "--cpu-slots", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("/nonexistent/model-folder"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cohort::testing
