// libFuzzer: a chat template from a model folder (tokenizer_config.json's
// chat_template), parsed and rendered over a fixed conversation with tools,
// as the server and the training data path render it. Any input must end in
// text or an error within the limits of text/chat_template.h: no crash, no
// hang (libFuzzer's -timeout), no runaway memory (-rss_limit_mb).
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto parsed = cohort::text::ChatTemplate::parse(source);
  if (!parsed) return 0;
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? {{ not a template }}"},
      {"role": "assistant", "content": "<think>add</think>4",
       "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  (void)parsed->render(context);
  return 0;
}
