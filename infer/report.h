// Results of an inference job: each data-parallel replica's outputs gathered
// to rank 0, which writes `<output_dir>/outputs.jsonl` (one line per prompt,
// in input order) and `<output_dir>/summary.json` (time to first token,
// output tokens/s, the mesh and the engine), and logs the headline figures.
//
// outputs.jsonl, one object per prompt: index (its line among the prompts),
// id (the prompt line's "id", when it has one),
// prompt_tokens, tokens (generated ids, a stop token included), text (when
// the model has a tokenizer; cut before a stop string; invalid UTF-8 becomes
// U+FFFD), finish_reason ("stop" or "length"), ttft_s (from the start of
// generation, slot waits included), prefill_s, decode_s (first to last
// token), tokens_per_s (this sequence).
// summary.json: model, engine, weights (count of weights per storage
// format: {"fp8-block 128x128": 196, "bf16": 57}), quantize ([model]
// quantize), world, tensor_parallel, data_parallel, batch_size, max_new_tokens, prompts, prompt_tokens, output_tokens, load_s,
// generate_s, ttft_s_mean/p50/p90, prefill_s_mean, output_tokens_per_s (all output tokens
// over the generation wall time, prefills included) and decode_tokens_per_s
// (decode-step tokens over decode-step time, summed over replicas).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "infer/generate.h"
#include "infer/prompts.h"

namespace cohort::infer {

// What one replica contributes; `texts` is empty when there is no tokenizer.
struct ReplicaResults {
  std::vector<SequenceOutput> outputs;
  std::vector<std::string> texts;
  GenerateStats stats;
};

struct RunFacts {
  std::string output_dir;
  std::string model;   // model_source()
  std::string engine;  // models::decode::InferenceEngine::describe()
  std::map<std::string, int> weights;  // weight_formats(): count per storage format
  std::string quantize = "none";       // [model] quantize
  std::string kv_cache_dtype = "bf16"; // infer.kv_cache_dtype
  int world = 1, tp = 1, dp = 1;
  int batch_size = 1;
  int max_new_tokens = 0;
  double load_s = 0;   // model build and weight load
  std::vector<std::string> prompt_ids;  // Prompt::id_json by prompt index
};

// Collective over `world` (every rank calls it). Ranks that are not their
// replica's reporter (tp rank != 0) pass `reporter` false and contribute
// nothing. Rank 0 writes the files; every rank returns the same status.
Status gather_and_write_results(collective::Communicator& world, bool reporter,
                                const ReplicaResults& mine, const RunFacts& facts);

}  // namespace cohort::infer
