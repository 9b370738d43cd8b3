// Chat messages to prompt text: the model's own chat template where its
// folder has one (tokenizer_config.json's chat_template or
// chat_template.jinja, rendered by text/chat_template.h as transformers'
// apply_chat_template renders it), else the built-in ChatML.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "text/chat_template.h"

namespace cohort::infer {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool | developer
  std::string content;
};

// A model's chat formatting: its template and the bos/eos strings the
// template may use.
struct ChatFormat {
  text::ChatTemplate chat_template;
  std::string bos_token, eos_token;
};

// The folder's format; null when it has no template (ChatML then). A
// template that does not parse is an error naming the folder.
Result<std::shared_ptr<const ChatFormat>> load_chat_format(const std::string& hf_dir);

// With `format` null: ChatML (Qwen's format), "<|im_start|>role\ncontent<|im_end|>\n"
// per message, then "<|im_start|>assistant\n" for the reply. Otherwise the
// template with add_generation_prompt = true; a template that raises (some
// refuse a system turn, or roles out of order) is an error with its message.
Result<std::string> render_chat_prompt(const std::vector<ChatMessage>& messages,
                                       const ChatFormat* format = nullptr);

}  // namespace cohort::infer
