// Prompts JSONL, tokenizer choice and stop conditions for inference jobs.
#include "infer/prompts.h"
#include "hf/model_folder.h"
#include "base/env_knobs.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cohort::infer {
namespace {

using nlohmann::json;

Status prompt_error(const std::string& source, int line, const std::string& what) {
  return invalid_argument(source + ":" + std::to_string(line) + ": " + what);
}

}  // namespace

Result<std::unique_ptr<text::Tokenizer>> open_tokenizer(const jobs::ModelSection& model,
                                                          const models::ModelConfig& config) {
  if (!model.hf_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(hf::ModelFolder folder, hf::ModelFolder::open(model.hf_dir));
    if (folder.has_tokenizer()) return folder.open_tokenizer();
  }
  if (config.vocab_size == 256) return std::unique_ptr<text::Tokenizer>(new text::ByteTokenizer());
  return std::unique_ptr<text::Tokenizer>();
}

Result<std::vector<Prompt>> parse_prompts(const std::string& text, const std::string& source,
                                          text::Tokenizer* tokenizer, int vocab_size) {
  std::vector<Prompt> prompts;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Prompt p;
    p.index = static_cast<int>(prompts.size());
    try {
      const json j = json::parse(line);
      if (!j.is_object()) return prompt_error(source, line_no, "expected a JSON object");
      if (j.contains("id")) p.id_json = j["id"].dump();
      if (j.contains("tokens")) {
        const json& tokens = j.at("tokens");
        if (!tokens.is_array()) return prompt_error(source, line_no, "\"tokens\" must be a list of token ids");
        for (const json& t : tokens) {
          // Checked here: nlohmann converts a float (1e30) unchecked.
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
            return prompt_error(source, line_no, "\"tokens\" holds " + t.dump() +
                                                     ", not a token id (a non-negative integer)");
          }
          p.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
      } else if (j.contains("prompt")) {
        if (!tokenizer) {
          return prompt_error(source, line_no,
                              "\"prompt\" needs a tokenizer, and this model has none (no "
                              "tokenizer.json in hf_dir, vocab_size " + std::to_string(vocab_size) +
                              " is not byte-level); give {\"tokens\": [...]} instead");
        }
        // As tokenizer(prompt) in Python: the post-processor's BOS (Llama 3) included.
        p.tokens = tokenizer->encode_with_special_tokens(j.at("prompt").get<std::string>());
      } else {
        return prompt_error(source, line_no, "expected {\"prompt\": \"text\"} or {\"tokens\": [ids]}");
      }
    } catch (const json::exception& e) {
      return prompt_error(source, line_no, e.what());
    }
    if (p.tokens.empty()) return prompt_error(source, line_no, "the prompt has no tokens");
    for (int32_t id : p.tokens) {
      if (id < 0 || id >= vocab_size) {
        return prompt_error(source, line_no, "token id " + std::to_string(id) +
                                                 " is outside the vocabulary [0, " +
                                                 std::to_string(vocab_size) + ")");
      }
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return invalid_argument(source + ": no prompts");
  return prompts;
}

Result<std::vector<Prompt>> load_prompts(const std::string& path, text::Tokenizer* tokenizer,
                                         int vocab_size) {
  std::ifstream in(path);
  if (!in) return not_found("infer.prompts: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_prompts(ss.str(), path, tokenizer, vocab_size);
}

std::vector<int32_t> model_eos_tokens(const jobs::ModelSection& model, const text::Tokenizer* tokenizer) {
  if (model.hf_dir.empty() || env_knob_on(EnvKnob::kInferIgnoreEos)) return {};
  auto folder = hf::ModelFolder::open(model.hf_dir);
  if (!folder) return {};  // opening the tokenizer reports a broken folder
  return folder->stop_ids(tokenizer);
}

Result<StopCondition> StopCondition::create(const jobs::InferSection& infer,
                                            const text::Tokenizer* tokenizer,
                                            const std::vector<int32_t>& eos) {
  StopCondition stop;
  stop.tokenizer_ = tokenizer;
  for (int64_t id : infer.stop_tokens) stop.stop_tokens_.push_back(static_cast<int32_t>(id));
  stop.stop_tokens_.insert(stop.stop_tokens_.end(), eos.begin(), eos.end());
  for (const std::string& s : infer.stop_strings) {
    if (s.empty()) continue;
    stop.stop_strings_.push_back(s);
    stop.longest_stop_ = std::max(stop.longest_stop_, s.size());
  }
  if (!stop.stop_strings_.empty() && !tokenizer) {
    return invalid_argument("infer.stop: stop strings need a tokenizer and this model has none; "
                            "give stop token ids instead");
  }
  return stop;
}

bool StopCondition::is_stop_token(int32_t id) const {
  return std::find(stop_tokens_.begin(), stop_tokens_.end(), id) != stop_tokens_.end();
}

bool StopCondition::hits_stop_string(const std::vector<int32_t>& generated) const {
  if (stop_strings_.empty() || generated.empty()) return false;
  // A stop string that ends in the newest token lies within the last
  // longest_stop_ + 1 tokens (every token decodes to at least one byte, and
  // earlier matches would have stopped the sequence already).
  const size_t tail = std::min(generated.size(), longest_stop_ + 1);
  const std::string text = tokenizer_->decode(
      std::vector<int32_t>(generated.end() - static_cast<std::ptrdiff_t>(tail), generated.end()));
  for (const std::string& s : stop_strings_) {
    if (text.find(s) != std::string::npos) return true;
  }
  return false;
}

}  // namespace cohort::infer
