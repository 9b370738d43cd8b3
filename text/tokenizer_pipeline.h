// Private to text/: the stages of a Hugging Face tokenizer.json, as its
// Rust library runs them (normalizer, pre-tokenizers, BPE model, decoders,
// post-processor), built once from the file and then immutable, so several
// BpeTokenizer instances on several threads share one pipeline.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cohort::text {

// A token id from tokenizer.json: an integer from 0 to 2^21. Anything else
// (a float, 6.7e58) throws a json error before it is converted, since the
// conversion itself would be undefined behaviour.
inline int32_t token_id_from_json(const nlohmann::json& value) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > (int64_t(1) << 21))
    throw nlohmann::json::other_error::create(501, "token id " + value.dump() + " is not an integer from 0 to 2097152",
                                              &value);
  return static_cast<int32_t>(value.get<int64_t>());
}

// The time the split patterns may take over one encode() call: a pattern
// comes from a model folder, and one with catastrophic backtracking
// ((\w+\s?)*$) must not stall the caller. Once a match hits a limit or the
// deadline passes, the budget is spent and every later span is left whole
// (one pre-token), so the cost stays near kBaseMilliseconds + 1 us a byte.
struct MatchBudget {
  static constexpr int kBaseMilliseconds = 50;
  explicit MatchBudget(size_t text_bytes)
      : deadline(std::chrono::steady_clock::now() + std::chrono::milliseconds(kBaseMilliseconds) +
                 std::chrono::microseconds(text_bytes)) {}
  std::chrono::steady_clock::time_point deadline;
  bool spent = false;
};

// A compiled PCRE2 pattern (UTF, UCP: \p{L}, \s and \w are Unicode-aware).
// Matching is const and thread-safe (match data is per call).
class Regex {
 public:
  // `hf_pattern` is a pattern as tokenizer.json writes it (Oniguruma syntax);
  // \s and \S are widened to include U+0085 as Oniguruma's do.
  static Result<std::shared_ptr<const Regex>> compile(const std::string& hf_pattern);
  static std::shared_ptr<const Regex> literal(const std::string& text);
  ~Regex();
  // Non-overlapping matches, left to right, as [begin, end) byte offsets.
  // One match may take kMatchLimit backtracking steps, kDepthLimit deep;
  // past that, or past the budget's deadline, the budget is spent and the
  // rest of the text is left unmatched (one span).
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& text, MatchBudget& budget) const;
  static constexpr uint32_t kMatchLimit = 100'000;
  static constexpr uint32_t kDepthLimit = 10'000;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  std::string literal_;   // used when code_ is null
};

// One span being pre-tokenized; `at_start`: it begins at offset 0 of the
// input (Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::string text;
  bool at_start = false;
};

using Normalizer = std::function<std::string(const std::string&)>;
using PreTokenizer = std::function<void(std::vector<Piece>&, MatchBudget&)>;
// Decoders work on the token strings, as HF's decode_chain does.
using Decoder = std::function<void(std::vector<std::string>&)>;

Result<Normalizer> parse_normalizer(const nlohmann::json& j);
Result<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j);
Result<Decoder> parse_decoder(const nlohmann::json& j);

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;  // absorbs whitespace on its left
  bool rstrip = false;  // absorbs whitespace on its right
};

// The BPE model: merges by rank over the word's characters (byte-level
// alphabets or byte fallback for characters outside the vocabulary).
class BpeModel {
 public:
  static Result<BpeModel> parse(const nlohmann::json& model);
  void encode_word(const std::string& word, std::vector<int32_t>* out) const;
  const std::string* token(int32_t id) const;
  std::optional<int32_t> id(const std::string& token) const;
  int32_t max_id() const { return int32_t(id_to_token_.size()) - 1; }

 private:
  void merge_symbols(std::vector<int32_t>& symbols) const;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];
};

class TokenizerPipeline {
 public:
  // Words (pre-tokens) longer than this are merged in pieces of this size;
  // HF merges them whole, which only a blob or an attack tells apart.
  static constexpr size_t kMaxWordBytes = size_t{64} << 10;
  static Result<std::shared_ptr<const TokenizerPipeline>> parse(const std::string& json_text);

  // `cache` maps a pre-token to its ids (owned by the calling instance).
  void encode(const std::string& text, std::vector<int32_t>* out,
              std::unordered_map<std::string, std::vector<int32_t>>* cache) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string token_bytes(int32_t id) const;
  std::optional<int32_t> token_id(const std::string& token) const;
  bool is_special(int32_t id) const {
    auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && added_[it->second].special;
  }

  int vocab_size = 0;
  std::vector<int32_t> prefix, suffix;  // TemplateProcessing "single"

 private:
  void encode_span(const std::string& text, bool at_start, MatchBudget& budget, std::vector<int32_t>* out,
                   std::unordered_map<std::string, std::vector<int32_t>>* cache) const;
  std::vector<AddedToken> added_;  // longest first
  std::unordered_map<int32_t, size_t> added_by_id_;
  bool added_first_byte_[256] = {};
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  Decoder decoder_;
};

}  // namespace cohort::text
