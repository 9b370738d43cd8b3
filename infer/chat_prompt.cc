// Built-in ChatML rendering (see chat_prompt.h).
#include "infer/chat_prompt.h"

namespace cohort::infer {

std::string render_chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  return out + "<|im_start|>assistant\n";
}

}  // namespace cohort::infer
