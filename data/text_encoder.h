// Text to training tokens with the model's own tokenizer: documents with
// the post-processor's BOS (Llama 3) and the model's EOS, chat lines through
// the chat template with the loss on assistant turns only, prompt/completion
// lines with the loss on the completion only.
//
// The tokenizer is the Hugging Face folder's (tokenizer.json, else
// tokenizer.model); the byte tokenizer only for byte-vocabulary models
// (vocab 256, no EOS). Text for a model with neither is an error saying what
// to do. Not thread-safe; clone() one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/data_format.h"
#include "hf/chat_format.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace cohort::data {

struct EncodedDocument {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // empty: every token trained on; else 1 = trained on
};

class TextEncoder {
 public:
  // `hf_dir` without tokenizer files: the byte tokenizer when model_vocab is
  // 256 (or 0: unknown), else an error saying what to do. model_vocab 0
  // with a tokenizer: the tokenizer's vocabulary.
  static Result<std::unique_ptr<TextEncoder>> open(const std::string& hf_dir, int model_vocab);
  std::unique_ptr<TextEncoder> clone() const;

  EncodedDocument encode_text(const std::string& text);
  // One JSONL line; errors say what is wrong with it (the caller adds file:line).
  Result<EncodedDocument> encode_line(const std::string& line, DataFormat format, const std::string& text_field);
  // The chat template's text for a conversation and its assistant byte spans.
  Result<text::RenderedChat> render_chat(const nlohmann::ordered_json& line) const;

  int vocab_size() const { return tokenizer_->vocab_size(); }
  std::optional<int32_t> eos() const { return eos_; }
  const std::string& source() const { return source_; }  // "tokenizer.json of DIR", "bytes"
  text::Tokenizer& tokenizer() { return *tokenizer_; }

 private:
  TextEncoder() = default;
  Result<EncodedDocument> encode_chat(const nlohmann::ordered_json& line);
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::shared_ptr<const hf::ChatFormat> chat_;
  std::string source_;
  std::optional<int32_t> eos_;
};

}  // namespace cohort::data
