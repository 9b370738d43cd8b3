// Chat format rendering (see chat_format.h).
#include "hf/chat_format.h"

namespace cohort::hf {

Result<std::shared_ptr<const ChatFormat>> ChatFormat::create(const std::string& source, std::string bos_token,
                                                             std::string eos_token, const std::string& origin) {
  auto parsed = text::ChatTemplate::parse(source);
  if (!parsed) return parsed.status().with_context(origin + " chat_template");
  return std::shared_ptr<const ChatFormat>(new ChatFormat(std::move(*parsed), source, std::move(bos_token), std::move(eos_token)));
}

Result<text::RenderedChat> ChatFormat::render(const nlohmann::ordered_json& messages,
                                              const nlohmann::ordered_json& tools,
                                              bool add_generation_prompt) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return template_.render(context);
}

}  // namespace cohort::hf
