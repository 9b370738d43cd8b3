// Tool calls out of a chat model's text: the parser of a model family turns
// the text the model writes when it calls a function into OpenAI's
// `tool_calls`, as the text streams in.
//
// Formats (named as vLLM's --tool-call-parser names them):
//   hermes       Qwen2.5 / Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//                any number of them, with ordinary text around;
//   llama3_json  Llama 3.1 / 3.2: the reply is {"name": ..., "parameters": {...}}
//                (after an optional <|python_tag|>), several separated by ';'.
// detect_tool_call_format() picks one from the chat template's text.
//
// Streaming: feed() takes each new piece of text and returns what became
// final: content text, and tool-call deltas: a call's first delta carries
// its index, id and name, later ones fragments of its arguments; the
// fragments of one call concatenate to the model's arguments JSON text.
// Text that may still turn out to be the start of a call is held back. A
// call that does not parse (a closing tag without a JSON object that names a
// function) is returned as content, so no text is lost. Feeding the whole
// text at once gives the same calls and content as feeding it in any pieces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::infer {

enum class ToolCallFormat { kHermes, kLlama3Json };
const char* to_string(ToolCallFormat format);
// "hermes", "llama3_json"; an error naming the value otherwise.
Result<ToolCallFormat> parse_tool_call_format(const std::string& name);
// The format a chat template teaches its model (what it prints around
// tools); hermes (ChatML's) when the template shows neither or is empty.
ToolCallFormat detect_tool_call_format(const std::string& chat_template);

struct ToolCallDelta {
  int index = 0;          // the call's number in this reply
  std::string id;         // first delta of a call only
  std::string name;       // first delta of a call only
  std::string arguments;  // a fragment of the arguments' JSON text
};

struct ToolParseOutput {
  std::string content;
  std::vector<ToolCallDelta> calls;
  void append(ToolParseOutput more);
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  virtual ToolParseOutput feed(const std::string& text) = 0;
  // The end of the text: what was held back, as content or the rest of a call.
  virtual ToolParseOutput finish() = 0;
  // Calls started so far.
  virtual int calls() const = 0;
};

// `id_prefix` makes the calls' ids ("call_<prefix>_<index>") unique in the server.
std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, std::string id_prefix);

}  // namespace cohort::infer
