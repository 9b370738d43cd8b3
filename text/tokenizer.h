// Tokenizers: byte-level for cohort's own byte-vocabulary models (token =
// byte, vocab 256), Hugging Face tokenizer.json, and SentencePiece
// tokenizer.model.
//
// tokenizer.json is run as Hugging Face's pipeline runs it, stage by stage,
// from the file's own settings: added tokens are split out first (leftmost,
// longest; lstrip/rstrip honoured), each remaining span is normalized (NFC,
// NFKC, ... through utf8proc; Prepend, Replace, Lowercase, Strip), split by
// the pre-tokenizers (Split with the file's own regex through PCRE2 with
// Unicode properties, ByteLevel, Metaspace, Digits, Whitespace), and encoded
// by the BPE model (merge ranks; byte-level alphabets as GPT-2, Qwen2/3 and
// Llama 3 use, or byte fallback as Mistral-style tokenizers use). Decoding
// runs the file's decoders (ByteLevel, Metaspace, ByteFallback, Fuse,
// Replace, Strip) and turns invalid UTF-8 into U+FFFD, as HF does.
//
// Threading: loaded tokenizers are immutable except for encode()'s word
// cache, so one thread encodes at a time; give each thread its own instance
// (loading is cheap) to encode in parallel. decode() is const and safe.
// Errors: loading returns a Status naming the file and the field at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  // The id of an exact token string (special tokens included), if any.
  virtual std::optional<int32_t> token_id(const std::string& token) const = 0;
  // Whether `id` is a special token (tokenizer.json's added tokens marked
  // "special", SentencePiece's control tokens), which decoding with
  // skip_special_tokens leaves out of the text, as transformers does.
  virtual bool is_special(int32_t id) const { (void)id; return false; }
  // The bytes token `id` adds to a text in its middle (no UTF-8 repair, no
  // stripping at the start), as structured output matches them.
  virtual std::string token_bytes(int32_t id) const { return decode({id}); }
  // Tokens the post-processor puts around a single text (Llama 3's
  // <|begin_of_text|>; nothing for Qwen), as tokenizer(text) does in Python.
  virtual std::vector<int32_t> prefix_tokens() const { return {}; }
  virtual std::vector<int32_t> suffix_tokens() const { return {}; }
  // A fresh instance with the same vocabulary, for another thread.
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
  std::vector<int32_t> encode_with_special_tokens(const std::string& text);
};

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return 256; }
  std::optional<int32_t> token_id(const std::string& token) const override;
  std::string token_bytes(int32_t id) const override { return std::string(1, static_cast<char>(id)); }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<ByteTokenizer>(); }
};

class TokenizerPipeline;  // tokenizer_pipeline.h (private)

// A Hugging Face tokenizer.json (model type BPE).
class BpeTokenizer final : public Tokenizer {
 public:
  // Parses the file's text; never throws (the fuzz entry point).
  static Result<std::unique_ptr<BpeTokenizer>> from_json(const std::string& json_text);
  // Files past kMaxFileBytes are refused before they are read (the largest
  // real ones, Gemma's, are about 34 MB).
  static constexpr size_t kMaxFileBytes = size_t{256} << 20;
  static Result<std::unique_ptr<BpeTokenizer>> load(const std::string& path);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(const std::string& text) override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override;
  std::optional<int32_t> token_id(const std::string& token) const override;
  bool is_special(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  std::vector<int32_t> prefix_tokens() const override;
  std::vector<int32_t> suffix_tokens() const override;
  std::unique_ptr<Tokenizer> clone() const override;

 private:
  explicit BpeTokenizer(std::shared_ptr<const TokenizerPipeline> pipeline);
  std::shared_ptr<const TokenizerPipeline> pipeline_;  // shared, immutable
  struct Cache;
  std::unique_ptr<Cache> cache_;  // this instance's word cache
};

// A SentencePiece model file (tokenizer.model), through libsentencepiece.
// `add_bos` as tokenizer_config.json's add_bos_token says (Llama 2: true).
Result<std::unique_ptr<Tokenizer>> load_sentencepiece(const std::string& path, bool add_bos,
                                                      bool add_eos);

// GPT-2's byte -> unicode code point table (printable stand-ins for bytes).
const std::vector<uint32_t>& byte_to_unicode();
void append_utf8(uint32_t cp, std::string* out);
// Invalid UTF-8 replaced by U+FFFD per maximal subpart (as Rust's
// String::from_utf8_lossy, which HF decoding uses).
std::string utf8_lossy(const std::string& bytes);
// A vocabulary entry's bytes: byte-level alphabet characters back to their
// bytes, "<0xXX>" byte-fallback pieces to the byte, SentencePiece's "▁" to a
// space (the conventions of the tokenizers cohort reads).
std::string vocabulary_piece_bytes(const std::string& piece);


}  // namespace cohort::text
