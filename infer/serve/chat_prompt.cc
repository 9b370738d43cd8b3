// Chat prompt rendering (see chat_prompt.h).
#include "infer/serve/chat_prompt.h"

#include <nlohmann/json.hpp>

namespace cohort::infer {

Result<std::string> render_chat_prompt(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                       const hf::ChatFormat* format) {
  if (!format) {
    std::string out;
    for (const auto& m : messages) {
      const auto& content = m.contains("content") && m["content"].is_string() ? m["content"].get_ref<const std::string&>()
                                                                              : std::string();
      out += "<|im_start|>" + m.value("role", std::string()) + "\n" + content + "<|im_end|>\n";
    }
    return out + "<|im_start|>assistant\n";
  }
  COHORT_ASSIGN_OR_RETURN(text::RenderedChat rendered, format->render(messages, tools, true));
  return rendered.text;
}

Result<std::string> render_chat_prompt(const std::vector<ChatMessage>& messages, const hf::ChatFormat* format) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render_chat_prompt(list, nlohmann::ordered_json(), format);
}

}  // namespace cohort::infer
