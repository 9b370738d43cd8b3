// Helpers of the GPU engine tests (infer_gpu_test.cc, infer_gpu_formats_test.cc):
// a small model folder whose greedy choices bf16 rounding does not decide,
// greedy requests through a scheduler on an engine, and the check that two
// runs of different numerics part only where the reference saw a near tie;
// and the skip, saying why, where the graph engine cannot run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/scheduler.h"
#include "models/config.h"
#include "models/decode/cuda_graph_engine.h"
#include "models/decode/engine.h"

namespace cohort::testing {

// Why the graph engine's tests cannot run here (a build without CUDA, a
// machine without a GPU), or "" where they can.
std::string graph_engine_missing();

// Skips the calling test, saying why, where graph_engine_missing() says so.
#define COHORT_SKIP_WITHOUT_GRAPH_ENGINE()                                                           \
  do {                                                                                               \
    if (const std::string why = ::cohort::testing::graph_engine_missing(); !why.empty()) GTEST_SKIP() \
        << why;                                                                                      \
  } while (0)

using TokenRuns = std::map<int64_t, std::vector<int32_t>>;

// How many requests' greedy tokens part between a reference run (`want`,
// whose logits at each step are `logits`) and another; each must part only
// where the reference's logits show a near tie (within `tie`), and every
// request must have `length` tokens in both. `relative_tie`, where given,
// widens a step's tie to that share of its largest |logit| (the budget of a
// run whose activations are rounded too).
int parted_at_near_ties(const TokenRuns& want_runs, const TokenRuns& got_runs,
                        const std::map<int64_t, std::vector<std::vector<float>>>& logits, size_t length,
                        float tie = 0.15f, float relative_tie = 0.0f);

// A Qwen3-style model folder with peaked logits (init stddev 0.2), so greedy
// choices are not decided by bf16 rounding. head_dim 64 makes prompts take
// the prefill tiles (32: the decode kernel).
std::string gpu_model_dir(int head_dim = 32);

// The graph engine at tp 1 over the weights of folder `dir` as written
// (gpu_model_dir's), with `options`.
Result<std::unique_ptr<models::decode::InferenceEngine>> graph_engine_over(
    const std::string& dir, const models::ModelConfig& config, const models::decode::CudaEngineOptions& options);

// Steps `s` until it is idle (at most 10,000 steps), appending each token
// to its request's run in `into`; expects it idle at the end.
void drain_tokens(infer::Scheduler& s, TokenRuns& into);

// Five greedy requests of different lengths (12 new tokens each) through a
// scheduler on `engine`: each request's tokens, and with `logits` the
// logits each was chosen from; `adapters`, taken in turn, name each
// request's adapter.
TokenRuns five_greedy_requests(models::decode::InferenceEngine& engine,
                               std::map<int64_t, std::vector<std::vector<float>>>* logits,
                               const std::vector<int>& adapters = {});

}  // namespace cohort::testing
