// Tokenizers: byte-level for cohort's own models (token = byte, vocab 256),
// and Hugging Face tokenizer.json byte-level BPE as Qwen2/3 and Llama 3 use.
//
// BPE encoding: added (special) tokens are split out first by exact match;
// each remaining span is pre-tokenized by a hand-written equivalent of the
// tokenizer's split regex (Qwen2's `\p{N}`, Llama 3's `\p{N}{1,3}`, or GPT-2's
// pattern), bytes are mapped through GPT-2's byte-to-unicode table, and pairs
// are merged by rank. Unicode letter/number classes are approximated with
// tables covering Latin, Greek, Cyrillic, CJK, punctuation and symbol blocks
// (no regex library with \p{} is used); normalizers (Qwen's NFC) are not
// applied, which matters only for non-NFC input. Decoding maps back to bytes.
// Objects are immutable after loading and safe to share across threads
// except for encode()'s internal cache (one thread at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace cohort::models {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  // The id of an exact token string (special tokens included), if any.
  virtual std::optional<int32_t> token_id(const std::string& token) const = 0;
  // Tokens the HF post-processor puts around a single text (Llama 3's
  // <|begin_of_text|>; nothing for Qwen), as tokenizer(text) does in Python.
  virtual std::vector<int32_t> prefix_tokens() const { return {}; }
  virtual std::vector<int32_t> suffix_tokens() const { return {}; }
  std::vector<int32_t> encode_with_special_tokens(const std::string& text) {
    std::vector<int32_t> out = prefix_tokens();
    const std::vector<int32_t> body = encode(text);
    out.insert(out.end(), body.begin(), body.end());
    const std::vector<int32_t> suffix = suffix_tokens();
    out.insert(out.end(), suffix.begin(), suffix.end());
    return out;
  }
};

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return 256; }
  std::optional<int32_t> token_id(const std::string& token) const override;
};

enum class PretokenizerKind { kQwen2, kLlama3, kGpt2 };

// Splits text (UTF-8) into pre-tokens as the kind's regex would.
std::vector<std::string> pretokenize(const std::string& text, PretokenizerKind kind);
// GPT-2's byte -> unicode code point table (printable stand-ins for bytes).
const std::vector<uint32_t>& byte_to_unicode();
void append_utf8(uint32_t cp, std::string* out);

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> from_json(const std::string& json_text);
  static Result<std::unique_ptr<BpeTokenizer>> load(const std::string& path);

  std::vector<int32_t> encode(const std::string& text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_id(const std::string& token) const override;
  PretokenizerKind pretokenizer() const { return kind_; }
  std::vector<int32_t> prefix_tokens() const override { return prefix_; }
  std::vector<int32_t> suffix_tokens() const override { return suffix_; }

 private:
  BpeTokenizer() = default;
  void encode_piece(const std::string& piece, std::vector<int32_t>* out);
  void encode_span(const std::string& text, std::vector<int32_t>* out);

  PretokenizerKind kind_ = PretokenizerKind::kQwen2;
  bool ignore_merges_ = false;
  int vocab_size_ = 0;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;     // "left right" -> rank
  std::vector<std::pair<std::string, int32_t>> added_;  // longest first
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
  std::map<uint32_t, uint8_t> unicode_to_byte_;
  std::vector<int32_t> prefix_, suffix_;  // from a TemplateProcessing post-processor
};

// tokenizer.json in `dir` when present; Errors otherwise.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir);

}  // namespace cohort::models
