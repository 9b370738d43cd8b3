// Chat templates: the Jinja subset that Hugging Face chat templates use
// (Qwen2/3, Llama 3.x, Mistral and the like), rendered as transformers'
// apply_chat_template renders them: trim_blocks and lstrip_blocks on,
// loop controls, `{% generation %}` blocks tracked, `raise_exception`,
// `strftime_now`, `namespace`, and the filters and string methods those
// templates call (trim, length, tojson, join, items, startswith, split, ...).
//
// What is not supported (macros with `caller`, `include`, `extends`, custom
// filters) is a parse error naming the template line; a template that
// raises gets its message back as the error. Parsed templates are immutable
// and may be rendered from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cohort::models {

struct ChatTemplateNode;

struct RenderedChat {
  std::string text;
  // Byte ranges of `{% generation %}` blocks (assistant output), when the
  // template marks them.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(const std::string& source);
  // `context` is an object: messages, add_generation_prompt, bos_token,
  // eos_token, tools, and any other variables the template reads. Ordered
  // JSON keeps the key order that `tojson` prints, as Python dicts do.
  Result<RenderedChat> render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const ChatTemplateNode> root_;
};

// What a Hugging Face folder says about chat formatting:
// tokenizer_config.json's chat_template (a string, or a list of
// {name, template} from which "default" is taken), else chat_template.jinja;
// and its bos_token / eos_token strings (plain or {"content": ...}).
struct ChatTemplateSource {
  std::string source;  // empty when the folder has no template
  std::string bos_token, eos_token;
};
Result<ChatTemplateSource> read_chat_template(const std::string& dir);

}  // namespace cohort::models
