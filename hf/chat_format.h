// A model's chat format: its template (tokenizer_config.json's chat_template,
// a string or the "default" of a named list, else chat_template.jinja) and
// the bos/eos strings the template may print, rendered as transformers'
// apply_chat_template renders it. Training data (data/text_encoder) and the
// server (infer/openai_api) both render through render(), so a conversation
// becomes the same text, and the same tokens, on both paths.
//
// Immutable once made; render() may be called from several threads.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/chat_template.h"

namespace cohort::hf {

class ChatFormat {
 public:
  // A template that does not parse is an error naming `origin` (the folder).
  static Result<std::shared_ptr<const ChatFormat>> create(const std::string& source, std::string bos_token,
                                                          std::string eos_token, const std::string& origin);

  // `messages` and `tools` as the OpenAI API and chat JSONL give them (tools
  // may be null: the template is not given any). Errors: a template that
  // raises (some refuse a system turn or roles out of order) or a limit of
  // text::ChatTemplateLimits, with its message.
  Result<text::RenderedChat> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    bool add_generation_prompt) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // The template's text (what the server reads the tool-call syntax from).
  const std::string& source() const { return source_; }

 private:
  ChatFormat(text::ChatTemplate t, std::string source, std::string bos, std::string eos)
      : template_(std::move(t)), source_(std::move(source)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}
  text::ChatTemplate template_;
  std::string source_, bos_token_, eos_token_;
};

}  // namespace cohort::hf
