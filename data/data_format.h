// Training data formats: their names in job files, how `auto` decides (by
// content and header, the extension only where a format has no header),
// and a cheap readability probe for `cohort validate` (the header, or the
// first lines), which needs no tokenizer.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort::data {

enum class DataFormat {
  kAuto,
  kText,              // a text file (one document) or a folder of them
  kJsonl,             // JSONL, a text field per line (train.text_field)
  kChat,              // JSONL {"messages": [{"role", "content"}...]}: the chat template, loss on assistant turns
  kPromptCompletion,  // JSONL {"prompt", "completion"}: loss on the completion
  kNanoGpt,           // uint16 tokens, no header (nanoGPT's train.bin)
  kU32,               // uint32 tokens, no header
  kMegatron,          // Megatron indexed dataset (.bin + .idx)
  kCohort,            // cohort shards (`cohort tokenize`)
};

const char* format_name(DataFormat format);
// "auto", "text", "jsonl", "chat", "prompt_completion", "nanogpt" (or "u16"),
// "u32", "megatron", "cohort".
Result<DataFormat> parse_format(const std::string& name);
bool is_token_format(DataFormat format);  // already tokens: no tokenizer needed

// What `auto` means for this path.
Result<DataFormat> detect_format(const std::string& path, const std::string& text_field);
// Checks that `path` exists and reads as `format` (kAuto: detected): the
// header of a token file, the first lines of JSONL. Errors read
// "file:line: reason".
Result<DataFormat> probe_data(const std::string& path, DataFormat format, const std::string& text_field);

// Checks one JSONL line for `format` (the parse, the fields and their
// types); the message says what is wrong, without the file and line.
Status check_json_line(const std::string& line, DataFormat format, const std::string& text_field);

}  // namespace cohort::data
