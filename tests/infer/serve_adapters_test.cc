// Serving several LoRA adapters over one base ([serve.adapters]): a server
// with two PEFT adapter folders beside the base answers requests for the
// base and each adapter, sent at once so that they share the engine's
// batches, with the greedy tokens an offline job gives on that adapter's
// merged weights (W + scale · B A); /v1/models lists the three, and an
// unknown model is a 404 naming them; an adapter loaded at run time serves
// until it is unloaded. A real server process on CPU ranks.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <gtest/gtest.h>

#include "hf/weights.h"
#include "models/backend.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

using nlohmann::json;
using tcp = boost::asio::ip::tcp;

// Writes a PEFT folder of random adapters (seeded) on `model` and the merged
// weights' folder; returns {adapter folder, merged folder}.
std::pair<std::string, std::string> make_adapter(const std::string& name, const std::string& base_dir,
                                                 uint32_t seed) {
  auto cpu = models::make_cpu_backend();
  auto model = std::move(models::Model::create(*models::preset_config("tiny"), {}, cpu.get()).value());
  EXPECT_TRUE(hf::load_weights(*model, base_dir).is_ok());
  const std::string folder = scratch_dir("serve_" + name).string();
  write_random_adapter(*model, base_dir, seed, 0.3f, folder);
  const std::string merged = scratch_dir("serve_" + name + "_merged").string();
  EXPECT_TRUE(hf::save_model_folder(*model, merged, models::DType::kF32).is_ok());
  return {folder, merged};
}

// One HTTP exchange with the server (it closes after each reply): the status
// and the JSON body.
std::pair<int, json> http(int port, const std::string& method, const std::string& target, const json& body = {},
                          const std::string& key = "k") {
  boost::asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
  const std::string text = body.is_null() ? "" : body.dump();
  const std::string auth = key.empty() ? "" : "Authorization: Bearer " + key + "\r\n";
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                              "Content-Length: " + std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n" + text;
  boost::asio::write(s, boost::asio::buffer(request));
  std::string reply;
  boost::system::error_code ec;
  boost::asio::read(s, boost::asio::dynamic_buffer(reply), ec);
  const int status = std::stoi(reply.substr(reply.find(' ') + 1, 3));
  const size_t at = reply.find("\r\n\r\n");
  return {status, json::parse(reply.substr(at + 4), nullptr, false)};
}

TEST(ServeAdapters, EachAdapterGivesItsMergedModelsTokensInSharedBatches) {
  auto cpu = models::make_cpu_backend();
  auto model = std::move(models::Model::create(*models::preset_config("tiny"), {}, cpu.get()).value());
  model->init_weights(31);
  const std::string base = scratch_dir("serve_adapter_base").string();
  ASSERT_TRUE(hf::save_model_folder(*model, base, models::DType::kF32).is_ok());
  const auto [alpha, alpha_merged] = make_adapter("alpha", base, 5);
  const auto [beta, beta_merged] = make_adapter("beta", base, 6);

  // What each model generates offline: three prompts, 6 greedy tokens.
  const std::vector<std::vector<int>> prompts = {{1, 2, 3}, {40, 41, 42, 43, 44}, {200, 7}};
  std::map<std::string, InferRun> offline;
  for (const auto& [name, dir] : std::map<std::string, std::string>{{"base", base}, {"alpha", alpha_merged},
                                                                    {"beta", beta_merged}}) {
    offline[name] = run_infer_job(three_prompt_job("serve_ref_" + name, "hf_dir = \"" + dir + "\"", 1));
    ASSERT_EQ(offline[name].error, "") << name;
  }
  ASSERT_NE(offline["alpha"].outputs[1]["tokens"], offline["base"].outputs[1]["tokens"]) << "the adapter changes nothing";

  const std::filesystem::path out = scratch_dir("serve_adapters_run");
  const std::filesystem::path job = out / "job.toml";
  std::ofstream(job) << "[job]\nname = \"tiny\"\nkind = \"serve\"\noutput_dir = \"" << (out / "out").string()
                     << "\"\n[model]\nhf_dir = \"" << base << "\"\n[serve]\nport = 0\nmax_running = 16\napi_key = \"k\"\n"
                     << "temperature = 0.0\n[serve.adapters]\nalpha = \"" << alpha << "\"\nbeta = \"" << beta
                     << "\"\n";
  const pid_t server = ::fork();
  if (server == 0) {
    ::setenv("COHORT_DEVICE", "cpu", 1);
    ::execl(test_worker_path().c_str(), "infer_test_worker", job.c_str(), nullptr);
    ::_exit(127);
  }
  // The server goes with the test, however it ends (a failed ASSERT
  // returns early; a server left running holds ctest's output open).
  struct Stop {
    pid_t pid;
    ~Stop() {
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } stop{server};
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::ifstream endpoint(out / "out" / "endpoint.json");
    json e = json::parse(endpoint, nullptr, false);
    if (!e.is_discarded() && e.contains("port")) port = e["port"].get<int>();
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(port, 0) << "the server wrote no endpoint.json";
  // The endpoint is written before the model loads (requests get 503
  // "still loading" until then): wait for /health.
  int health = 0;
  for (int i = 0; i < 1200 && health != 200; ++i) {
    health = http(port, "GET", "/health").first;
    if (health != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(health, 200) << "the server never became ready";

  const auto [listed, models_body] = http(port, "GET", "/v1/models");
  ASSERT_EQ(listed, 200);
  ASSERT_EQ(models_body["data"].size(), 3u) << models_body.dump();
  EXPECT_EQ(models_body["data"][1]["id"], "alpha");
  EXPECT_EQ(models_body["data"][2]["parent"], "tiny");

  // Nine requests at once: three prompts for each of base, alpha and beta.
  std::vector<std::thread> clients;
  std::map<std::pair<std::string, int>, json> answers;
  std::mutex mu;
  for (const std::string name : {"tiny", "alpha", "beta"}) {
    for (int p = 0; p < 3; ++p) {
      clients.emplace_back([&, name, p] {
        const json body = {{"model", name}, {"prompt", prompts[size_t(p)]}, {"max_tokens", 6},
                           {"temperature", 0}, {"return_token_ids", true}, {"ignore_eos", true}};
        auto [status, reply] = http(port, "POST", "/v1/completions", body);
        std::lock_guard<std::mutex> lock(mu);
        answers[{name, p}] = status == 200 ? reply : json{{"status", status}, {"reply", reply}};
      });
    }
  }
  for (auto& c : clients) c.join();
  for (const std::string name : {"tiny", "alpha", "beta"}) {
    const InferRun& want = offline[name == "tiny" ? "base" : name];
    for (int p = 0; p < 3; ++p) {
      const json& got = answers[{name, p}];
      ASSERT_TRUE(got.contains("choices")) << name << " " << p << ": " << got.dump();
      EXPECT_EQ(got["model"], name);
      EXPECT_EQ(got["choices"][0]["token_ids"], want.outputs[size_t(p)]["tokens"]) << name << ", prompt " << p;
    }
  }
  const auto [missing, error] = http(port, "POST", "/v1/completions", {{"model", "gamma"}, {"prompt", {1, 2}}});
  EXPECT_EQ(missing, 404);
  EXPECT_NE(error.dump().find("'alpha', 'beta'"), std::string::npos) << error.dump();

  // At run time: beta's folder loaded again as gamma answers as beta does,
  // until it is unloaded. The endpoints take the key and plain names.
  const json load = {{"lora_name", "gamma"}, {"lora_path", beta}};
  EXPECT_EQ(http(port, "POST", "/v1/load_lora_adapter", load, "").first, 401);
  EXPECT_EQ(http(port, "POST", "/v1/load_lora_adapter", {{"lora_name", "../x"}, {"lora_path", beta}}).first, 400);
  EXPECT_EQ(http(port, "POST", "/v1/load_lora_adapter", {{"lora_name", "delta"}, {"lora_path", "/no/such"}}).first,
            404);
  const auto [loaded, loaded_body] = http(port, "POST", "/v1/load_lora_adapter", load);
  ASSERT_EQ(loaded, 200) << loaded_body.dump();
  EXPECT_EQ(http(port, "POST", "/v1/load_lora_adapter", load).first, 409) << "the name is taken";
  EXPECT_EQ(http(port, "GET", "/v1/models").second["data"].size(), 4u);
  const json ask = {{"model", "gamma"}, {"prompt", prompts[1]}, {"max_tokens", 6}, {"temperature", 0},
                    {"return_token_ids", true}, {"ignore_eos", true}};
  const auto [asked, answer] = http(port, "POST", "/v1/completions", ask);
  ASSERT_EQ(asked, 200) << answer.dump();
  EXPECT_EQ(answer["choices"][0]["token_ids"], offline["beta"].outputs[1]["tokens"]);
  EXPECT_EQ(http(port, "POST", "/v1/unload_lora_adapter", {{"lora_name", "gamma"}}).first, 200);
  EXPECT_EQ(http(port, "POST", "/v1/unload_lora_adapter", {{"lora_name", "gamma"}}).first, 404);
  EXPECT_EQ(http(port, "POST", "/v1/completions", ask).first, 404);
  EXPECT_EQ(http(port, "GET", "/v1/models").second["data"].size(), 3u);
  // At most 64 adapters at once: with alpha and beta, 62 more load and the next is refused.
  int loaded_more = 0;
  for (int i = 0; i < 70; ++i) {
    const auto [status, reply] =
        http(port, "POST", "/v1/load_lora_adapter", {{"lora_name", "a" + std::to_string(i)}, {"lora_path", alpha}});
    if (status != 200) {
      EXPECT_EQ(status, 409) << reply.dump();
      EXPECT_NE(reply.dump().find("64 adapters are loaded"), std::string::npos) << reply.dump();
      break;
    }
    ++loaded_more;
  }
  EXPECT_EQ(loaded_more, 62);
}

}  // namespace
}  // namespace cohort::testing
