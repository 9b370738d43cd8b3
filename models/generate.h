// Token sampling and batched generation over a KV cache.
//
// TokenSampler picks the next token from full-vocabulary logits: greedy when
// temperature is 0 (lowest id wins ties, as torch.argmax), otherwise softmax
// of logits / temperature restricted to the top_k largest (0 = all) and then
// to the smallest set whose probability reaches top_p (1 = all), drawn with a
// seeded generator. Each sequence has its own generator (seed + sequence
// index), so a sequence's tokens do not depend on what it is batched with,
// and tensor-parallel ranks, seeing identical logits, agree. It never sorts
// the whole vocabulary: top_k is a selection, top_p grows a sorted head
// until it holds the mass, and untruncated sampling walks the ids in order —
// microseconds rather than milliseconds per token at 152k-token vocabularies.
//
// generate() prefills each prompt into its own cache slot, then decodes all
// unfinished sequences together one token per step.
#pragma once

#include <cstdint>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"

namespace cohort::models {

struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

class TokenSampler {
 public:
  TokenSampler(const SamplingParams& params, uint64_t stream);
  int32_t sample(const float* logits, int vocab);
  double uniform();  // in [0, 1)

 private:
  SamplingParams params_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> candidates_;  // (probability weight, id)
};

struct GenerationOptions {
  int max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation of a sequence ends after one of these
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (including the stop token, if hit)
  bool stopped = false;         // ended on a stop token rather than max_new_tokens
  double prefill_seconds = 0;   // time to first token
  double decode_seconds = 0;
};

// Needs cache.slots() >= prompts.size(); resets the slots it uses. Errors on
// empty prompts or prompts that do not fit the cache.
Result<std::vector<GenerationResult>> generate(Model& model, KvCache& cache,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerationOptions& options);

}  // namespace cohort::models
