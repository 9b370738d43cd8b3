// Chat prompt rendering (see chat_prompt.h).
#include "infer/chat_prompt.h"

#include <nlohmann/json.hpp>

namespace cohort::infer {

Result<std::shared_ptr<const ChatFormat>> load_chat_format(const std::string& hf_dir) {
  COHORT_ASSIGN_OR_RETURN(text::ChatTemplateSource source, text::read_chat_template(hf_dir));
  if (source.source.empty()) return std::shared_ptr<const ChatFormat>();
  auto parsed = text::ChatTemplate::parse(source.source);
  if (!parsed) return parsed.status().with_context(hf_dir + " chat_template");
  return std::shared_ptr<const ChatFormat>(
      new ChatFormat{std::move(*parsed), source.bos_token, source.eos_token});
}

Result<std::string> render_chat_prompt(const std::vector<ChatMessage>& messages,
                                       const ChatFormat* format) {
  if (!format) {
    std::string out;
    for (const ChatMessage& m : messages) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    return out + "<|im_start|>assistant\n";
  }
  nlohmann::ordered_json context;
  context["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    context["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  context["add_generation_prompt"] = true;
  context["bos_token"] = format->bos_token;
  context["eos_token"] = format->eos_token;
  COHORT_ASSIGN_OR_RETURN(text::RenderedChat rendered, format->chat_template.render(context));
  return rendered.text;
}

}  // namespace cohort::infer
