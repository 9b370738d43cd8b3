// OutputProcessor: what one sequence's consumer sees of its tokens. One
// definition for the server's replies and streams and the offline job's
// outputs.jsonl:
//   - the stop condition, built once per request from the stop ids (the
//     model's end-of-sequence ids among them, unless the request ignores
//     them) and stop strings; the scheduler checks it, and the server sends
//     its ids and strings to the other ranks as data (serve_step.h);
//   - the tokens and their log-probabilities as they come;
//   - the text, decoded as tokens come, with what may still change held
//     back: an incomplete UTF-8 character at the end, and as many bytes as
//     a stop string forming at the end could still take; once finished, the
//     whole text decoded at once and cut before the first stop string.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/prompts.h"
#include "text/tokenizer.h"

namespace cohort::infer {

class OutputProcessor {
 public:
  // Errors when stop strings are given and there is no tokenizer.
  // `skip_special`: special tokens (<|im_end|>, </s>, ...) count as tokens
  // but add no text, as transformers' decode(skip_special_tokens=True) and
  // vLLM's default.
  static Result<OutputProcessor> create(const text::Tokenizer* tokenizer, std::vector<int32_t> stop_ids,
                                        std::vector<std::string> stop_strings, bool skip_special = true);
  // Over a stop condition built elsewhere (the offline job's, shared by
  // every prompt).
  OutputProcessor(const text::Tokenizer* tokenizer, std::shared_ptr<const StopCondition> stop,
                  bool skip_special = true);

  const std::shared_ptr<const StopCondition>& stop() const { return stop_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

  void add(int32_t token, float logprob = 0, std::vector<std::pair<int32_t, float>> top = {});
  // Each token's likeliest alternatives (id, logprob), where asked for.
  const std::vector<std::vector<std::pair<int32_t, float>>>& top_logprobs() const { return top_; }
  // The text of any token id alone.
  std::string id_text(int32_t id) const;
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<float>& logprobs() const { return logprobs_; }
  // The text of tokens()[i] alone ("" without a tokenizer), special or not
  // (logprobs name every token).
  std::string token_text(size_t i) const;

  // The text that became final since the last call: while running, what no
  // later token can change; once `finished`, the rest of the whole text,
  // cut before the first stop string. "" without a tokenizer.
  std::string take_text(bool finished);
  // The whole text so far, cut before the first stop string.
  std::string full_text() const;

 private:
  OutputProcessor() = default;

  // The ids whose text the consumer sees.
  std::vector<int32_t> shown(const std::vector<int32_t>& ids) const;

  const text::Tokenizer* tokenizer_ = nullptr;
  bool skip_special_ = true;
  std::shared_ptr<const StopCondition> stop_;
  std::vector<int32_t> stop_ids_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> logprobs_;
  std::vector<std::vector<std::pair<int32_t, float>>> top_;
  std::string text_;     // decoded token by token, as far as take_text went
  size_t decoded_ = 0;   // tokens in text_
  size_t sent_ = 0;   // bytes of text handed out by take_text
};

}  // namespace cohort::infer
