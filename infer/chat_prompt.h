// Chat messages to prompt text. One function, so that the model's own
// template (a Jinja renderer for tokenizer_config.json's chat_template) can
// replace the built-in ChatML rendering when it exists.
#pragma once

#include <string>
#include <vector>

namespace cohort::infer {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool | developer
  std::string content;
};

// ChatML (Qwen's format): "<|im_start|>role\ncontent<|im_end|>\n" per
// message, then "<|im_start|>assistant\n" for the reply.
std::string render_chat_prompt(const std::vector<ChatMessage>& messages);

}  // namespace cohort::infer
