// What an inference job generates from: the prompts file, the tokenizer and
// the stop conditions.
//
// The prompts file is JSONL, one object per line: {"prompt": "text"} (run
// through the model's tokenizer with its post-processor, so Llama 3 prompts
// start with <|begin_of_text|> as in transformers) or {"tokens": [ids]}, optionally with an
// "id" (any JSON value) that outputs.jsonl echoes; blank lines are skipped. The tokenizer is the Hugging Face tokenizer.json of an hf_dir
// when there is one, else the byte tokenizer for cohort's byte-vocabulary
// models (vocab_size 256), else none, and then only {"tokens": ...} prompts
// are accepted. Errors name the file and line at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "jobs/spec.h"
#include "models/config.h"
#include "text/tokenizer.h"

namespace cohort::infer {

struct Prompt {
  int index = 0;                // position in the file (0-based, blank lines skipped)
  std::vector<int32_t> tokens;  // never empty
  std::string id_json;          // the line's "id" as JSON text; empty when absent
};

// The tokenizer for a job's model; null when the model has none.
Result<std::unique_ptr<text::Tokenizer>> open_tokenizer(const jobs::ModelSection& model,
                                                          const models::ModelConfig& config);

// Parses JSONL text; `source` names the file in errors. Token ids must lie in
// [0, vocab_size).
Result<std::vector<Prompt>> parse_prompts(const std::string& text, const std::string& source,
                                          text::Tokenizer* tokenizer, int vocab_size);
Result<std::vector<Prompt>> load_prompts(const std::string& path, text::Tokenizer* tokenizer,
                                         int vocab_size);

// The end-of-sequence ids of a Hugging Face folder (hf::ModelFolder::stop_ids:
// eos_token_id of generation_config.json, else config.json, and the
// tokenizer's eos_token when `tokenizer` is given), which end generation by
// default as they do in vLLM. Empty for presets, checkpoints, folders
// without one, and when COHORT_INFER_IGNORE_EOS=1 (for benchmarks and parity
// runs that must decode max_new_tokens).
std::vector<int32_t> model_eos_tokens(const jobs::ModelSection& model, const text::Tokenizer* tokenizer = nullptr);

// Ends a sequence on a stop token id, or once its decoded text contains a
// stop string (then the text is cut before the string; the tokens are kept
// up to and including the one that completed it, as vLLM does).
class StopCondition {
 public:
  // Stop strings need a tokenizer; errors otherwise. `eos` joins infer.stop's ids.
  static Result<StopCondition> create(const jobs::InferSection& infer,
                                      const text::Tokenizer* tokenizer,
                                      const std::vector<int32_t>& eos = {});
  bool is_stop_token(int32_t id) const;
  // Whether `generated` (this sequence's tokens so far) now contains a stop
  // string that ends in its last token's text.
  bool hits_stop_string(const std::vector<int32_t>& generated) const;
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  const text::Tokenizer* tokenizer_ = nullptr;
  std::vector<int32_t> stop_tokens_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
};

}  // namespace cohort::infer
