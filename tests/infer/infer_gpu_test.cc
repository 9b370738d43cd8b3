// Inference on GPUs (label gpu): the bf16 CUDA-graph engine at tp = 2 on two
// GPUs gives the tokens it gives at tp = 1; graph replay equals eager
// execution bit for bit; the fp32 models engine on CUDA matches the CPU
// reference; chunked prefill and prompts past a cached prefix give the
// tokens of whole prefill. The model forms are infer_gpu_formats_test.cc's.
// Skips, saying why, without enough GPUs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "models/decode/cuda_graph_engine.h"
#include "infer/scheduler.h"
#include "models/backend.h"
#include "models/cuda_backend.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "models/model.h"
#include "tests/infer/gpu_engine_checks.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

InferJob gpu_job(const std::string& name, const std::string& dir, int world) {
  InferJob job;
  job.name = name;
  job.world = world;
  job.tensor_parallel = world;
  job.device = "cuda";
  job.model_lines = "hf_dir = \"" + dir + "\"";
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int> p;
    for (int t = 0; t < 5 + 7 * i; ++t) p.push_back((31 * i + 17 * t) % 1024);
    prompts.push_back(p);
  }
  job.prompts_path = write_token_prompts(scratch_dir("prompts") / (name + ".jsonl"), prompts);
  job.max_new_tokens = 24;
  job.batch_size = 4;
  return job;
}

// Largest logit difference; with first_step_only, over each prompt's first
// generated token (later steps may follow different tokens).
float max_abs_diff(const InferRun& a, const InferRun& b, bool first_step_only = false) {
  float worst = 0;
  for (const auto& [i, v] : a.logits) {
    const auto& w = b.logits.at(i);
    size_t n = std::min(v.size(), w.size());
    if (first_step_only) n = std::min(n, v.size() / a.outputs.at(i).at("tokens").size());
    for (size_t k = 0; k < n; ++k) worst = std::max(worst, std::fabs(v[k] - w[k]));
  }
  return worst;
}

void expect_same_tokens(const InferRun& a, const InferRun& b, const std::string& what) {
  ASSERT_EQ(a.error, "") << what;
  ASSERT_EQ(b.error, "") << what;
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.outputs[i].at("tokens"), b.outputs[i].at("tokens")) << what << ", prompt " << i;
  }
}

// Tokens agree, except that where two runs of different numerics (bf16 vs
// fp32, or another summation order) part ways, the reference must have seen
// a near tie there: its logits for the two choices within `tie`.
void expect_tokens_agree_up_to_ties(const InferRun& ref, const InferRun& got, float tie,
                                    const std::string& what) {
  ASSERT_EQ(ref.error, "") << what;
  ASSERT_EQ(got.error, "") << what;
  ASSERT_EQ(ref.outputs.size(), got.outputs.size()) << what;
  int diverged = 0;
  for (size_t i = 0; i < ref.outputs.size(); ++i) {
    const auto a = ref.outputs[i].at("tokens").get<std::vector<int>>();
    const auto b = got.outputs[i].at("tokens").get<std::vector<int>>();
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    if (k == a.size() && k == b.size()) continue;
    ASSERT_TRUE(k < a.size() && k < b.size()) << what << ", prompt " << i << ": lengths differ";
    ++diverged;
    const auto& logits = ref.logits.at(static_cast<int>(i));
    const size_t V = logits.size() / a.size();
    const float gap = logits[k * V + a[k]] - logits[k * V + b[k]];
    EXPECT_LE(gap, tie) << what << ", prompt " << i << " step " << k << ": " << a[k] << " vs "
                        << b[k] << " is not a near tie";
  }
  std::printf("%s: %d of %zu prompts parted at a near tie\n", what.c_str(), diverged,
              ref.outputs.size());
}

TEST(InferGpu, TensorParallelOnTwoGpusGivesTheTokensOfOne) {
  if (models::cuda_device_count() < 2) {
    GTEST_SKIP() << "needs 2 GPUs, found " << models::cuda_device_count()
                 << " (run on the GPU machine: ctest -L gpu)";
  }
  const std::string dir = gpu_model_dir();
  const InferRun one = run_infer_job(gpu_job("gpu_tp1", dir, 1));
  const InferRun two = run_infer_job(gpu_job("gpu_tp2", dir, 2));
  expect_tokens_agree_up_to_ties(one, two, 0.05f, "graphs, tp 2 vs tp 1");
  EXPECT_LE(max_abs_diff(one, two, true), 0.1f);
  EXPECT_NE(one.summary.at("engine").get<std::string>().find("graph"), std::string::npos);
}

TEST(InferGpu, GraphReplayEqualsEagerAndTheFp32EngineMatchesTheCpu) {
  if (models::cuda_device_count() < 1) {
    GTEST_SKIP() << "needs a GPU, found none (run on the GPU machine: ctest -L gpu)";
  }
  const std::string dir = gpu_model_dir();
  // Graph warm-up measures which projection family serves each decode
  // bucket, which an eager run cannot: both runs take the same family, each
  // in turn.
  for (const char* family : {"skinny", "cublaslt"}) {
    SCOPED_TRACE(family);
    ::setenv("COHORT_INFER_PROJECTIONS", family, 1);
    const InferRun graphs = run_infer_job(gpu_job("gpu_graphs", dir, 1));
    InferJob eager_job = gpu_job("gpu_eager", dir, 1);
    eager_job.infer_lines = "cuda_graphs = false\n";
    const InferRun eager = run_infer_job(eager_job);
    ::unsetenv("COHORT_INFER_PROJECTIONS");
    expect_same_tokens(graphs, eager, std::string("graphs vs eager, ") + family);
    EXPECT_EQ(max_abs_diff(graphs, eager), 0.0f);
  }
  const InferRun graphs = run_infer_job(gpu_job("gpu_graphs", dir, 1));  // measured families

  InferJob cpu_job = gpu_job("gpu_cpu_ref", dir, 1);
  cpu_job.device = "cpu";
  const InferRun cpu = run_infer_job(cpu_job);
  InferJob fp32_job = gpu_job("gpu_fp32", dir, 1);
  fp32_job.engine = "model";
  const InferRun fp32 = run_infer_job(fp32_job);
  expect_tokens_agree_up_to_ties(cpu, fp32, 0.1f, "fp32 CUDA models engine vs CPU");
  // The models CUDA backend multiplies on bf16 tensor cores (fp32 accumulate).
  EXPECT_LE(max_abs_diff(cpu, fp32, true), 0.1f);
  EXPECT_LE(max_abs_diff(cpu, graphs, true), 0.25f);
  expect_tokens_agree_up_to_ties(cpu, graphs, 0.15f, "bf16 graph engine vs CPU");
}

// The serve path's steps on the bf16 engine: forwards of at most 10 rows,
// running streams' decode rows beside chunks of other prompts (head_dim 64:
// their attention is the prefill tiles'), give the greedy tokens of prompts
// prefilled whole, as on the CPU engine (infer_scheduler_test.cc). A chunk's
// projections run with other row counts, so their bf16 sums may round
// differently: where the two part ways, whole prefill's logits must show a
// near tie.
TEST(InferGpu, ChunkedPrefillOfTheGraphEngineGivesTheTokensOfWholePrefill) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  const std::string dir = gpu_model_dir(64);
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  std::map<int64_t, std::vector<int32_t>> by_chunk[2];
  std::map<int64_t, std::vector<std::vector<float>>> whole_logits;
  const int chunks[2] = {0, 10};  // 0: whole prompts; 10: up to 3 decode rows and chunks of the rest
  for (int c = 0; c < 2; ++c) {
    models::decode::CudaEngineOptions options;
    options.slots = 3;
    options.capacity = 128;
    auto engine = graph_engine_over(dir, *config, options);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    infer::SchedulerOptions o;
    o.max_batched_tokens = chunks[c];
    o.return_logits = true;
    o.on_logits = [&, c](int64_t id, const float* row, int vocab) {
      if (c == 0) whole_logits[id].emplace_back(row, row + vocab);
    };
    infer::Scheduler s(**engine, o);
    for (int id = 0; id < 6; ++id) {
      infer::SequenceRequest r;
      r.id = id;
      for (int t = 0; t < 4 + 9 * id; ++t) r.prompt.push_back((37 * id + 11 * t) % 1024);
      r.max_new_tokens = 12;
      ASSERT_TRUE(s.add(std::move(r)).is_ok());
    }
    drain_tokens(s, by_chunk[c]);
  }
  ASSERT_EQ(by_chunk[0].size(), 6u);
  const int parted = parted_at_near_ties(by_chunk[0], by_chunk[1], whole_logits, 12);
  std::printf("chunked vs whole prefill: %d of 6 requests parted at a near tie\n", parted);
}

// Prefix caching on the bf16 engine: requests that share a 40-token prefix
// with one that finished (and with each other) start past its cached
// blocks, and give the tokens of computing the prefix again; where the two
// part ways, the uncached run's logits must show a near tie (the cached
// K/V came from a forward of other row counts).
TEST(InferGpu, APromptStartedPastACachedPrefixGivesTheTokensOfComputingIt) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  const std::string dir = gpu_model_dir(64);
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  std::map<int64_t, std::vector<int32_t>> tokens[2];
  std::map<int64_t, std::vector<std::vector<float>>> uncached_logits;
  int64_t hits = 0;
  for (int cached = 0; cached < 2; ++cached) {
    models::decode::CudaEngineOptions options;
    options.slots = 3;
    options.capacity = 128;
    options.prefix_caching = cached;
    auto engine = graph_engine_over(dir, *config, options);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    infer::SchedulerOptions o;
    o.max_batched_tokens = 24;
    o.return_logits = true;
    o.on_logits = [&, cached](int64_t id, const float* row, int vocab) {
      if (!cached) uncached_logits[id].emplace_back(row, row + vocab);
    };
    infer::Scheduler s(**engine, o);
    auto add = [&](int id) {
      infer::SequenceRequest r;
      r.id = id;
      for (int t = 0; t < 40; ++t) r.prompt.push_back((13 * t + 5) % 1024);  // the shared prefix
      for (int t = 0; t < 3 + 5 * id; ++t) r.prompt.push_back((37 * id + 11 * t) % 1024);
      r.max_new_tokens = 12;
      ASSERT_TRUE(s.add(std::move(r)).is_ok());
    };
    add(0);
    drain_tokens(s, tokens[cached]);
    for (int id = 1; id < 4; ++id) add(id);
    drain_tokens(s, tokens[cached]);
    if (cached) hits = s.prefix_hit_tokens();
  }
  // Requests 1 to 3 each found the prefix's two full blocks.
  EXPECT_GE(hits, 3 * 32);
  const int parted = parted_at_near_ties(tokens[0], tokens[1], uncached_logits, 12);
  std::printf("prefix cached vs computed: %d of 4 requests parted at a near tie, %lld positions reused\n", parted,
              static_cast<long long>(hits));
}


// A server's steps launched ahead (SchedulerOptions::run_ahead) on the
// graph engine: decode rows take the previous step's picks on the device,
// mixed steps and graph steps alike, with prefix caching (a fed row's key
// comes later) and more requests than slots. The tokens are those of plain
// steps; where they part (a slot freed by a finished request is taken a
// step later, so batches differ), the plain run's logits show a near tie.
TEST(InferGpu, StepsLaunchedAheadGiveThePlainStepsTokens) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  const std::string dir = gpu_model_dir(64);
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  std::map<int64_t, std::vector<int32_t>> tokens[2];
  std::map<int64_t, std::vector<std::vector<float>>> plain_logits;
  int64_t hits[2] = {0, 0};
  for (int ahead = 0; ahead < 2; ++ahead) {
    models::decode::CudaEngineOptions options;
    options.slots = 4;
    options.capacity = 160;
    options.prefix_caching = true;
    auto engine = graph_engine_over(dir, *config, options);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    ASSERT_TRUE((*engine)->can_run_ahead());
    infer::SchedulerOptions o;
    o.max_batched_tokens = 20;
    o.run_ahead = ahead;
    if (!ahead) {
      o.return_logits = true;
      o.on_logits = [&](int64_t id, const float* row, int vocab) { plain_logits[id].emplace_back(row, row + vocab); };
    }
    infer::Scheduler s(**engine, o);
    for (int id = 0; id < 9; ++id) {
      infer::SequenceRequest r;
      r.id = id;
      if (id >= 5) {
        for (int t = 0; t < 34; ++t) r.prompt.push_back((13 * t + 5) % 1024);  // a prefix 5 to 8 share
      }
      for (int t = 0; t < 3 + 6 * (id % 5); ++t) r.prompt.push_back((37 * id + 11 * t) % 1024);
      r.max_new_tokens = 20;
      ASSERT_TRUE(s.add(std::move(r)).is_ok());
    }
    drain_tokens(s, tokens[ahead]);
    hits[ahead] = s.prefix_hit_tokens();
  }
  ASSERT_EQ(tokens[1].size(), 9u);
  EXPECT_GT(hits[1], 0) << "no prompt started past a cached prefix";
  const int parted = parted_at_near_ties(tokens[0], tokens[1], plain_logits, 20);
  std::printf("launched ahead vs plain steps: %d of 9 requests parted at a near tie; prefix hits %lld and %lld\n",
              parted, static_cast<long long>(hits[0]), static_cast<long long>(hits[1]));
}

}  // namespace
}  // namespace cohort::testing
