// The OpenAI wire format of the server (serve_http.h): request bodies of
// /v1/completions and /v1/chat/completions in, typed requests out, and the
// JSON of responses, stream chunks and errors.
//
// Parsing never throws and never trusts the body: each field is checked for
// type and range, and an error names it (OpenAI's `param`) with the status
// the API gives (400, or 404 for an unknown model). A field the server does
// not read is a 400 naming it, unless it has the value that changes nothing
// (an empty `logit_bias`, `response_format` text, `tool_choice` "auto", ...), so
// that no answer silently lacks what was asked for. Beyond
// OpenAI: `top_k`, `stop_token_ids`, `ignore_eos`, `skip_special_tokens`
// (default true) and `return_token_ids`
// (generated ids in each choice as `token_ids`), named as vLLM names them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/serve/chat_prompt.h"
#include "infer/serve/adapter_names.h"
#include "infer/serve/tool_calls.h"
#include "text/json_grammar.h"
#include "models/token_sampler.h"
#include "text/tokenizer.h"

namespace cohort::infer {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" is written as null
  std::string code;   // "" is written as null
};

// What the job's [serve] section and model give every request.
struct ApiDefaults {
  std::string model_name;
  // The LoRA adapters' names (serve.adapters and those loaded since): a
  // request whose `model` is one of them runs with that adapter on the base.
  std::shared_ptr<AdapterNames> adapters = std::make_shared<AdapterNames>();
  int max_tokens = 256;
  models::SamplingParams sampling;  // temperature, top_p, top_k, seed
  int context = 0;                  // positions per sequence
  int vocab_size = 0;
  // Sequences one request may start (prompts × n): the server's max_live,
  // so that a request it accepts can run.
  int max_choices = 64;
  std::shared_ptr<const hf::ChatFormat> chat;  // the model's chat format; null: ChatML
  ToolCallFormat tool_format = ToolCallFormat::kHermes;  // how replies call tools ([serve] tool_parser)
};

struct CompletionRequest {
  bool chat = false;
  std::string model;  // the `model` it named (the base's name when it named none)
  int adapter = -1;   // its index in ApiDefaults::adapters; -1: the base
  // One prompt (chat, or a completions `prompt` of one string or id list),
  // or a completions request's list of them; each gets `n` choices, choice
  // i * n + j for prompt i (OpenAI's and vLLM's numbering).
  std::vector<std::vector<int32_t>> prompts;
  int n = 1;
  int max_tokens = 0;
  models::SamplingParams sampling;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;           // chat: top_logprobs; completions: logprobs = k
  bool return_token_ids = false;
  bool ignore_eos = false;        // decode past the model's end-of-sequence ids (benchmarks)
  bool skip_special_tokens = true;  // special tokens add no text
  // Chat with `tools` and tool_choice "auto": replies are read for calls
  // (tool_calls.h) in this format.
  bool parse_tool_calls = false;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  // Structured output (response_format json_object / json_schema, or a
  // forced tool call): the grammar every choice's tokens are held to
  // (infer/structured_output.h); empty: none.
  std::string constraint;
  std::shared_ptr<const text::JsonGrammar> grammar;

  int choices() const { return static_cast<int>(prompts.size()) * n; }
  const std::vector<int32_t>& prompt_of(int choice) const { return prompts[size_t(choice / n)]; }
  // OpenAI's usage.prompt_tokens: each prompt once, whatever n is.
  int64_t prompt_tokens() const;
};

// `tokenizer` may be null (then only token-id prompts are accepted). It is
// used from one thread at a time (encode keeps a cache).
std::optional<ApiError> parse_completion_request(const std::string& body, bool chat,
                                                 const ApiDefaults& defaults,
                                                 text::Tokenizer* tokenizer,
                                                 CompletionRequest* out);

// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& error);

struct ChoiceUpdate {
  int index = 0;                  // the choice's number (CompletionRequest)
  std::string text;               // new text (streaming) or all of it
  std::vector<int32_t> token_ids; // the tokens behind it, with return_token_ids
  std::vector<float> logprobs;    // one per token, with logprobs
  std::vector<std::string> token_texts;  // each token's text, with logprobs
  // Each token's likeliest alternatives (text, logprob), with top_logprobs.
  std::vector<std::vector<std::pair<std::string, float>>> top;
  // Chat: the tool calls in this piece of the reply (whole calls when not
  // streaming), as tool_calls.h gives them.
  std::vector<ToolCallDelta> tool_calls;
  std::string finish_reason;      // "" while unfinished
};

struct ResponseHead {
  std::string id;                 // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;            // unix seconds
  std::string model;
  bool chat = false;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
// A whole (non-streaming) response, its choices in index order.
nlohmann::json completion_json(const ResponseHead& head, const std::vector<ChoiceUpdate>& choices,
                               const CompletionRequest& req, int64_t prompt_tokens,
                               int64_t completion_tokens);
// One server-sent event, "data: {...}\n\n", of one choice. `first` (the
// choice's first chunk) adds the chat role delta.
std::string stream_chunk(const ResponseHead& head, const ChoiceUpdate& choice,
                         const CompletionRequest& req, bool first);
// The final usage chunk (stream_options.include_usage): empty choices.
std::string stream_usage_chunk(const ResponseHead& head, int64_t prompt_tokens,
                               int64_t completion_tokens);

// Text JSON can carry: invalid UTF-8 (a random model's bytes) becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);

}  // namespace cohort::infer
