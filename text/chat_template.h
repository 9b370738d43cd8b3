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
//
// A template comes from a model folder, which may be anyone's: parsing and
// rendering are bounded by ChatTemplateLimits, so no template can hang,
// exhaust memory or overflow the stack of the process that renders it. A
// template past a limit is an error that names the limit and its value.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cohort::text {

struct ChatTemplateNode;

// The bounds every parse and render keeps (each far above what the chat
// templates of real model families need: Qwen3's renders a 100-message
// conversation with tools in about 20,000 steps).
struct ChatTemplateLimits {
  static constexpr size_t kMaxSourceBytes = size_t{1} << 20;   // the template text
  static constexpr size_t kMaxTokensPerTag = 4096;             // one {{ }} or {% %}
  static constexpr int kMaxNesting = 100;           // blocks, expressions and values, each
  static constexpr int64_t kMaxSteps = 300'000;     // statements, loop iterations, expressions
  static constexpr size_t kMaxBytes = size_t{32} << 20;        // the output, and any one string
  static constexpr size_t kMaxItems = 100'000;      // any one list or dict
  static constexpr int kMaxCallDepth = 32;          // macros calling macros
  static constexpr int64_t kMaxMilliseconds = 500;  // one render, wall clock
};

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


}  // namespace cohort::text
