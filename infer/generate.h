// The generation loop of inference jobs and training samples: every prompt
// queued at once, then Scheduler steps (scheduler.h, the loop the server
// drives too) until all are done.
//
// Prompts queue in input order. Waiting prompts are admitted into the free
// slots together (one prefill_many, which gives each its first token); then
// every running sequence decodes one token in a single batched step.
// A sequence ends on a stop token, a stop string or max_new_tokens, freeing its
// slot for the next prompt. Each sequence samples with its own generator
// seeded by (seed, prompt index), so its tokens do not depend on batch size,
// on which prompts share its batch, or on the data-parallel split; all ranks
// of a tensor-parallel group see the same logits and so make the same choices.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/decode/engine.h"
#include "infer/prompts.h"
#include "models/token_sampler.h"

namespace cohort::infer {

struct GenerateOptions {
  int max_new_tokens = 64;
  models::SamplingParams sampling;
  // Makes the engine return full logits for every token even when decoding
  // greedily. Every rank of a tensor-parallel group must set it alike: an
  // engine gathers the logits with a collective, so a rank that asks for
  // them alone waits for its peers forever.
  bool return_logits = false;
  // Called, with return_logits, with the full logits each token of prompt
  // `index` was sampled from, in order (tests compare them across
  // tensor-parallel degrees). May be set on one rank of a group only.
  std::function<void(int index, const float* logits, int vocab)> on_logits;
  // SchedulerOptions::run_ahead: greedy steps launched before the last
  // one's tokens are read, where the engine can; alike on every rank.
  bool run_ahead = false;
};

struct SequenceOutput {
  int index = 0;
  int prompt_tokens = 0;
  std::vector<int32_t> tokens;  // generated ids, stop token included
  std::string finish_reason;    // "stop" (token or string) or "length"
  // Time to first token from the start of generation, when every prompt of
  // an offline job has arrived (so it includes waiting for a free slot), and
  // the prefill itself.
  double ttft_s = 0;
  double prefill_s = 0;
  double decode_s = 0;          // first token to last token
};

struct GenerateStats {
  double wall_s = 0;            // whole loop
  double prefill_s = 0;         // summed prefill time
  double decode_s = 0;          // summed batched decode-step time
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;    // tokens produced by decode steps (not prefills)
};

// Outputs in the order of `prompts`. Errors when a prompt plus max_new_tokens
// does not fit the engine's capacity.
Result<std::vector<SequenceOutput>> generate_all(models::decode::InferenceEngine& engine,
                                                 const std::vector<Prompt>& prompts,
                                                 const StopCondition& stop,
                                                 const GenerateOptions& options,
                                                 GenerateStats* stats);

}  // namespace cohort::infer
