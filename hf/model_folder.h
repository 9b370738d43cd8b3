// A Hugging Face model folder, opened once: every fact cohort takes from its
// JSON files is read here and nowhere else.
//
//   config.json             the model's shape (model_config(), validated
//                           against models::ModelLimits), eos/bos ids
//   generation_config.json  eos/bos ids (these win over config.json's)
//   tokenizer_config.json   bos/eos token strings, add_bos/add_eos for
//                           SentencePiece, the chat template
//   chat_template.jinja     the chat template, when tokenizer_config has none
//   tokenizer.json | tokenizer.model   the tokenizer
//
// A folder may hold only some of these (a tokenizer without weights, say);
// what is absent is empty, and asking for it is the error. A file that is
// there but is not a JSON object, or is larger than kMaxJsonBytes, is an
// error naming it. Immutable once opened; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "hf/chat_format.h"
#include "models/config.h"
#include "text/tokenizer.h"

namespace cohort::hf {

class ModelFolder {
 public:
  // The JSON side files of a folder are read whole: a bound keeps a hostile
  // folder from making that an allocation of any size.
  static constexpr size_t kMaxJsonBytes = size_t{64} << 20;

  static Result<ModelFolder> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has_model_config() const;
  // config.json as a validated config; max_seq = min(max_position_embeddings, max_seq_cap).
  Result<models::ModelConfig> model_config(int max_seq_cap = 8192) const;

  bool has_tokenizer() const;
  // "tokenizer.json of DIR" or "tokenizer.model of DIR", for logs.
  std::string tokenizer_source() const;
  // tokenizer.json, else tokenizer.model (with add_bos_token/add_eos_token);
  // NotFound when the folder has neither.
  Result<std::unique_ptr<text::Tokenizer>> open_tokenizer() const;

  // Null when the folder has no chat template.
  std::shared_ptr<const ChatFormat> chat() const { return chat_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // eos_token_id of generation_config.json, else of config.json (a number or
  // a list), as transformers' GenerationConfig resolves it.
  const std::vector<int32_t>& config_eos_ids() const { return config_eos_; }
  // The ids that end generation: config_eos_ids() and the tokenizer's
  // eos_token, as vLLM stops (a folder whose configs name no EOS still
  // stops on the tokenizer's).
  std::vector<int32_t> stop_ids(const text::Tokenizer* tokenizer) const;
  // The id appended to training documents: the tokenizer's eos_token, else
  // the first config id; none when neither lies within [0, vocab).
  std::optional<int32_t> document_eos(const text::Tokenizer& tokenizer, int vocab) const;

  // The tokenizer and generation files an export copies beside the weights.
  static const std::vector<std::string>& side_files();

 private:
  std::string dir_;
  std::string bos_token_, eos_token_;
  bool add_bos_ = true, add_eos_ = false;  // LlamaTokenizer's defaults
  std::vector<int32_t> config_eos_;
  std::shared_ptr<const ChatFormat> chat_;
};

// An export's side files: ModelFolder::side_files() copied from `from` (the
// folder the run trained with; may be empty) to `to`, and, when none was
// copied, a generation_config.json with the bos/eos/pad ids of `config`
// (the checkpoint's config.json object), else the tokenizer's own bos/eos
// tokens, so that generation stops where the model learned to.
Status export_side_files(const std::string& from, const std::string& to, const nlohmann::json& config);

}  // namespace cohort::hf
