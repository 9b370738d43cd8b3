// Token sampling: the next token from full-vocabulary logits.
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
// The generation loop that uses it (for inference jobs and training samples
// alike) is infer::generate_all.
#pragma once

#include <cstdint>
#include <vector>


namespace cohort::models {

struct SamplingParams {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  // OpenAI's penalties on the tokens generated so far: presence subtracts
  // once from every token that has appeared, frequency once per appearance.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // transformers' and vLLM's repetition penalty over the prompt and the
  // generated tokens: a positive logit is divided by it, a negative one
  // multiplied (1: none).
  float repetition_penalty = 1.0f;
  // No stop token may be chosen before this many tokens are generated.
  int min_tokens = 0;

  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// The penalties and min_tokens of `params` applied to `logits` [vocab] in
// place, given the sequence's prompt and its tokens so far; `stop_ids` are
// masked (-inf) while fewer than min_tokens are generated. Identical inputs
// give identical logits, so tensor-parallel ranks still agree.
void apply_penalties(float* logits, int vocab, const SamplingParams& params, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& generated, const std::vector<int32_t>& stop_ids);

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

}  // namespace cohort::models
