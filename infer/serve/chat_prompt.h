// Chat messages to prompt text: the model's own chat format where its
// folder has one (hf::ChatFormat, the renderer training data uses too), else
// the built-in ChatML.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "hf/chat_format.h"

namespace cohort::infer {

struct ChatMessage {
  std::string role;     // system | user | assistant | tool | developer
  std::string content;
};

// With `format` null: ChatML (Qwen's format), "<|im_start|>role\ncontent<|im_end|>\n"
// per message, then "<|im_start|>assistant\n" for the reply. Otherwise the
// format with add_generation_prompt = true; a template that raises (some
// refuse a system turn, or roles out of order) is an error with its message.
Result<std::string> render_chat_prompt(const std::vector<ChatMessage>& messages,
                                       const hf::ChatFormat* format = nullptr);
// The same for messages as the OpenAI API gives them (objects with role,
// content and whatever else the template reads) and the request's tools
// (null: none), which ChatML does not print.
Result<std::string> render_chat_prompt(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                       const hf::ChatFormat* format);

}  // namespace cohort::infer
