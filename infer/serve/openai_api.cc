// OpenAI request parsing and response JSON (see openai_api.h).
#include "infer/serve/openai_api.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "infer/serve/chat_prompt.h"
#include "infer/structured_output.h"

namespace cohort::infer {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, ""};
}

// Reads an optional number field into *out within [lo, hi].
std::optional<ApiError> number(const json& body, const char* key, double lo, double hi, double* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number()) return bad(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) {
    return bad(key, std::string("'") + key + "' must lie in [" + json(lo).dump() + ", " +
                        json(hi).dump() + "], got " + v.dump());
  }
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> integer(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  const json& v = body[key];
  if (!v.is_number_integer()) return bad(key, std::string("'") + key + "' must be an integer");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi) {
    return bad(key, std::string("'") + key + "' must lie in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + v.dump());
  }
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& body, const char* key, bool* out) {
  if (!body.contains(key) || body[key].is_null()) return std::nullopt;
  if (!body[key].is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean");
  *out = body[key].get<bool>();
  return std::nullopt;
}

std::optional<ApiError> token_ids(const json& v, const std::string& param, int vocab,
                                  std::vector<int32_t>* out) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer()) return bad(param, "'" + param + "' must hold token ids (integers)");
    const int64_t id = v[i].get<int64_t>();
    if (id < 0 || id >= vocab) {
      return bad(param, "'" + param + "' holds token id " + std::to_string(id) +
                            ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<ApiError> text_prompt(const std::string& text, const std::string& param,
                                    text::Tokenizer* tokenizer, std::vector<int32_t>* out) {
  if (!tokenizer) {
    return bad(param, "this model has no tokenizer; give '" + param + "' as token ids");
  }
  *out = tokenizer->encode(text);
  return std::nullopt;
}

// prompt: "text", [ids], or a list of prompts ["text", ...] / [[ids], ...]
// (strings and id lists may mix, as vLLM takes them).
std::optional<ApiError> completion_prompts(const json& body, const ApiDefaults& d, text::Tokenizer* tokenizer,
                                           std::vector<std::vector<int32_t>>* out) {
  if (!body.contains("prompt")) return bad("prompt", "'prompt' is required");
  const json& p = body["prompt"];
  if (p.is_string()) {
    out->emplace_back();
    return text_prompt(p.get<std::string>(), "prompt", tokenizer, &out->back());
  }
  if (!p.is_array()) return bad("prompt", "'prompt' must be a string, an array of token ids or an array of prompts");
  if (p.empty() || !(p[0].is_string() || p[0].is_array())) {
    out->emplace_back();
    return token_ids(p, "prompt", d.vocab_size, &out->back());
  }
  if (p.size() > size_t(std::max(1, d.max_choices))) {
    return bad("prompt", "'prompt' holds " + std::to_string(p.size()) + " prompts; this server takes at most " +
                             std::to_string(d.max_choices) + " per request");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string at = "prompt[" + std::to_string(i) + "]";
    out->emplace_back();
    std::optional<ApiError> e;
    if (p[i].is_string()) e = text_prompt(p[i].get<std::string>(), at, tokenizer, &out->back());
    else if (p[i].is_array()) e = token_ids(p[i], at, d.vocab_size, &out->back());
    else e = bad(at, "'" + at + "' must be a string or an array of token ids");
    if (e) return e;
  }
  return std::nullopt;
}

// Messages keep every field the template may read (tool_calls, name,
// tool_call_id, reasoning_content) and their order, as transformers hands
// them to apply_chat_template; content given as text parts is joined.
std::optional<ApiError> chat_prompt(const ojson& body, const ApiDefaults& d, text::Tokenizer* tokenizer,
                                    std::vector<int32_t>* out) {
  if (!body.contains("messages")) return bad("messages", "'messages' is required");
  const ojson& m = body["messages"];
  if (!m.is_array() || m.empty()) return bad("messages", "'messages' must be a non-empty array");
  ojson messages = ojson::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object()) return bad(at, "'" + at + "' must be an object");
    if (!m[i].contains("role") || !m[i]["role"].is_string()) {
      return bad(at + ".role", "'" + at + ".role' must be a string");
    }
    const std::string role = m[i]["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer") {
      return bad(at + ".role", "'" + at + ".role' must be system, user, assistant, tool or developer");
    }
    ojson msg = m[i];
    const ojson content = m[i].contains("content") ? m[i]["content"] : ojson();
    if (content.is_array()) {  // [{"type": "text", "text": "..."}]
      std::string joined;
      for (const ojson& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return bad(at + ".content", "'" + at + ".content' parts must be {\"type\": \"text\", \"text\": ...}");
        }
        joined += part["text"].get<std::string>();
      }
      msg["content"] = joined;
    } else if (!content.is_string() && !content.is_null()) {
      return bad(at + ".content", "'" + at + ".content' must be a string or an array of text parts");
    } else if (content.is_null()) {
      msg["content"] = "";
    }
    messages.push_back(std::move(msg));
  }
  ojson tools;
  if (body.contains("tools") && !body["tools"].is_null()) {
    tools = body["tools"];
    if (!tools.is_array() || tools.size() > 128) return bad("tools", "'tools' must be an array of at most 128 tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const ojson& t = tools[i];
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object()) {
        return bad(at, "'" + at + "' must be {\"type\": \"function\", \"function\": {...}}");
      }
      const ojson& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
        return bad(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
      }
      if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null()) {
        return bad(at + ".function.parameters", "'" + at + ".function.parameters' must be a JSON schema object");
      }
    }
  }
  auto text = render_chat_prompt(messages, tools, d.chat.get());
  if (!text) return bad("messages", "the model's chat template refused the messages: " + text.status().message());
  return text_prompt(*text, "messages", tokenizer, out);
}

std::optional<ApiError> stops(const json& body, CompletionRequest* r, int vocab) {
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r->stop_strings.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 16) {
      for (const json& x : s) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
        r->stop_strings.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
    for (const std::string& x : r->stop_strings) {
      if (x.size() > 256) return bad("stop", "'stop' strings are at most 256 bytes");
    }
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    const json& s = body["stop_token_ids"];
    if (!s.is_array() || s.size() > 256) return bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    return token_ids(s, "stop_token_ids", vocab, &r->stop_ids);
  }
  return std::nullopt;
}

// Fields the server reads, by endpoint, and fields it accepts only with the
// value that changes nothing (what a client library may send as a default).
// Anything else is a 400 naming the field: a request asking for a penalty or
// a response format this server does not apply must not get an answer that
// silently lacks it.
std::optional<ApiError> unknown_fields(const json& body, bool chat) {
  static const std::vector<std::string_view> kBoth = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "n",
                                      "stop", "stop_token_ids", "stream", "stream_options", "logprobs",
                                      "top_logprobs", "ignore_eos", "skip_special_tokens", "return_token_ids", "user",
                                                        "presence_penalty", "frequency_penalty", "repetition_penalty",
                                                        "min_tokens", "response_format"};
  static const std::vector<std::string_view> kChat = {"messages", "max_completion_tokens", "tools", "tool_choice",
                                                      "parallel_tool_calls"};
  static const std::vector<std::string_view> kCompletions = {"prompt"};
  auto listed = [](const std::string& key, const std::vector<std::string_view>& list) {
    for (std::string_view k : list) if (key == k) return true;
    return false;
  };
  for (const auto& [key, value] : body.items()) {
    if (listed(key, kBoth) || listed(key, chat ? kChat : kCompletions)) continue;
    // The no-op values: no logit bias, best_of 1, no echo
    // or suffix, plain text responses.
    const bool no_op =
        value.is_null() ||
        (key == "logit_bias" && value.is_object() && value.empty()) ||
        (key == "best_of" && value.is_number_integer() && value.get<int64_t>() == 1) ||
        (!chat && key == "echo" && value.is_boolean() && !value.get<bool>()) ||
        (!chat && key == "suffix" && value.is_string() && value.get<std::string>().empty()) ||
        ((key == "metadata" || key == "store" || key == "service_tier") && !value.is_array());
    if (!no_op) {
      return ApiError{400, "'" + key + "' is not supported by this server (with this value: " + value.dump() +
                               "); see docs/serving.md for the fields it reads",
                      "invalid_request_error", key, "unsupported_parameter"};
    }
  }
  return std::nullopt;
}

// The tool-call grammar of a forced call: one call of one of `tools` (all,
// or the one named), its arguments held to the tool's parameters, written
// the way the model's format writes calls, so that the parser reads it back.
std::string forced_call_spec(const ojson& tools, const std::string& only, ToolCallFormat format) {
  ojson choices = ojson::array();
  const char* args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  for (const ojson& t : tools) {
    const ojson& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    ojson params = f.contains("parameters") && f["parameters"].is_object() ? f["parameters"] : ojson{{"type", "object"}};
    ojson call = {{"type", "object"},
                  {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                  {"required", {"name", args_key}}};
    // A tool's schema may keep its definitions beside its parameters.
    for (const char* defs : {"$defs", "definitions"}) {
      if (params.contains(defs)) call[defs] = params[defs];
    }
    choices.push_back(std::move(call));
  }
  const ojson schema = choices.size() == 1 ? choices[0] : ojson{{"anyOf", choices}};
  if (format == ToolCallFormat::kLlama3Json) return constraint_spec(schema);
  return constraint_spec(schema, "<tool_call>\n", "\n</tool_call>");
}

// tool_choice "auto" (the default with tools) reads the reply for calls;
// "none" leaves it text; "required" or {"type": "function", "function":
// {"name": ...}} holds the reply to one call (structured output).
std::optional<ApiError> tool_choice(const json& body, const ojson& ordered, const ApiDefaults& d,
                                    CompletionRequest* r) {
  const bool has_tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
  std::string choice = has_tools ? "auto" : "none", named;
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const json& c = body["tool_choice"];
    if (c.is_string() && (c == "auto" || c == "none" || c == "required")) {
      choice = c.get<std::string>();
    } else if (c.is_object() && c.value("type", "") == "function" && c.contains("function") &&
               c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
      choice = "named";
      named = c["function"]["name"].get<std::string>();
    } else {
      return bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if ((choice == "required" || choice == "named") && !has_tools) {
      return bad("tool_choice", "'tool_choice' " + c.dump() + " needs 'tools'");
    }
    if (choice == "auto" && !has_tools) choice = "none";  // nothing to call
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null() &&
      !body["parallel_tool_calls"].is_boolean()) {
    return bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
  }
  r->parse_tool_calls = choice != "none";
  r->tool_format = d.tool_format;
  if (choice == "required" || choice == "named") {
    if (!r->constraint.empty()) return bad("tool_choice", "'tool_choice' forcing a call cannot be combined with 'response_format'");
    if (choice == "named") {
      bool found = false;
      for (const json& t : body["tools"]) found = found || t["function"]["name"] == named;
      if (!found) return bad("tool_choice", "'tool_choice' names '" + named + "', which is not among the tools");
    }
    r->constraint = forced_call_spec(ordered.at("tools"), named, d.tool_format);
    auto grammar = compile_constraint(r->constraint);
    if (!grammar.is_ok()) return bad("tools", "a tool's parameters: " + grammar.status().message());
    r->grammar = std::move(*grammar);
  }
  return std::nullopt;
}

// response_format: "text", "json_object" (any JSON object) or "json_schema"
// ({"json_schema": {"name", "schema", "strict"}}), for both endpoints.
std::optional<ApiError> response_format(const json& body, const ojson& ordered, CompletionRequest* r) {
  if (!body.contains("response_format") || body["response_format"].is_null()) return std::nullopt;
  const json& f = body["response_format"];
  const std::string type = f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r->constraint = constraint_spec(ojson());
  } else if (type == "json_schema") {
    if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema")) {
      return bad("response_format.json_schema", "'response_format.json_schema' must be {\"name\": ..., \"schema\": {...}}");
    }
    r->constraint = constraint_spec(ordered.at("response_format").at("json_schema").at("schema"));
  } else {
    return bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  }
  auto grammar = compile_constraint(r->constraint);
  if (!grammar.is_ok()) {
    // "schema.properties.a.pattern: ..." names the keyword's place.
    return ApiError{400, "'response_format.json_schema' " + grammar.status().message(), "invalid_request_error",
                    "response_format.json_schema.schema", "unsupported_parameter"};
  }
  r->grammar = std::move(*grammar);
  return std::nullopt;
}

std::optional<ApiError> parse_fields(const json& body, const ojson& ordered, bool chat, const ApiDefaults& d,
                                     text::Tokenizer* tokenizer, CompletionRequest* r) {
  if (auto e = unknown_fields(body, chat)) return e;
  r->model = d.model_name;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return bad("model", "'model' must be a string");
    r->model = body["model"].get<std::string>();
    if (const std::optional<int> adapter = d.adapters->find(r->model)) {
      r->adapter = *adapter;
    } else if (r->model != d.model_name) {
      std::string served = "'" + d.model_name + "'";
      for (const std::string& a : d.adapters->names()) served += ", '" + a + "'";
      return ApiError{404, "The model '" + r->model + "' does not exist; this server has " + served,
                      "invalid_request_error", "model", "model_not_found"};
    }
  }
  r->chat = chat;
  std::optional<ApiError> e;
  if (chat) {
    r->prompts.emplace_back();
    e = chat_prompt(ordered, d, tokenizer, &r->prompts.back());
  } else {
    e = completion_prompts(body, d, tokenizer, &r->prompts);
  }
  if (e) return e;
  // The longest prompt bounds max_tokens for all of them.
  size_t longest = 0;
  for (size_t i = 0; i < r->prompts.size(); ++i) {
    const std::string at = chat ? "messages" : r->prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
    if (r->prompts[i].empty()) return bad(at, "the prompt has no tokens");
    if (int64_t(r->prompts[i].size()) >= int64_t(d.context)) {
      return bad(at, "the prompt has " + std::to_string(r->prompts[i].size()) + " tokens; this server's context is " +
                         std::to_string(d.context) + " tokens");
    }
    longest = std::max(longest, r->prompts[i].size());
  }
  const int64_t room = int64_t(d.context) - int64_t(longest);
  int64_t n = 1, max_tokens = -1, top_k = d.sampling.top_k, seed = int64_t(d.sampling.seed);
  const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if ((e = integer(body, max_key, 1, INT32_MAX, &max_tokens))) return e;
  if (max_tokens > room) {
    return bad(max_key, std::string("'") + max_key + "' is " + std::to_string(max_tokens) + " but the prompt's " +
                            std::to_string(longest) + " tokens leave " + std::to_string(room) +
                            " of the context's " + std::to_string(d.context));
  }
  r->max_tokens = int(max_tokens > 0 ? max_tokens : std::min<int64_t>(d.max_tokens, room));
  double temperature = d.sampling.temperature, top_p = d.sampling.top_p;
  if ((e = number(body, "temperature", 0, 2, &temperature))) return e;
  if ((e = number(body, "top_p", 0, 1, &top_p))) return e;
  if (top_p <= 0) return bad("top_p", "'top_p' must be above 0");
  if (body.contains("top_k") && body["top_k"] == -1) top_k = 0;  // vLLM's "off"
  else if ((e = integer(body, "top_k", 0, 1 << 30, &top_k))) return e;
  if ((e = integer(body, "seed", INT64_MIN, INT64_MAX, &seed))) return e;
  if ((e = integer(body, "n", 1, 128, &n))) return e;
  if (int64_t(r->prompts.size()) * n > d.max_choices) {
    return bad(n > 1 ? "n" : "prompt", "the request asks for " + std::to_string(int64_t(r->prompts.size()) * n) +
                                           " choices (" + std::to_string(r->prompts.size()) + " prompt(s) × n = " +
                                           std::to_string(n) + "); this server runs at most " +
                                           std::to_string(d.max_choices) + " at once");
  }
  r->n = int(n);
  double presence = 0, frequency = 0, repetition = 1;
  int64_t min_tokens = 0;
  if ((e = number(body, "presence_penalty", -2, 2, &presence))) return e;
  if ((e = number(body, "frequency_penalty", -2, 2, &frequency))) return e;
  if ((e = number(body, "repetition_penalty", 0.01, 100, &repetition))) return e;
  if ((e = integer(body, "min_tokens", 0, r->max_tokens, &min_tokens))) return e;
  r->sampling.presence_penalty = float(presence);
  r->sampling.frequency_penalty = float(frequency);
  r->sampling.repetition_penalty = float(repetition);
  r->sampling.min_tokens = int(min_tokens);
  r->sampling.temperature = float(temperature);
  r->sampling.top_p = float(top_p);
  r->sampling.top_k = int(top_k);
  r->sampling.seed = uint64_t(seed);
  if ((e = stops(body, r, d.vocab_size))) return e;
  if ((e = boolean(body, "stream", &r->stream))) return e;
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object()) return bad("stream_options", "'stream_options' must be an object");
    if ((e = boolean(body["stream_options"], "include_usage", &r->include_usage))) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const json& l = body["logprobs"];
    if (chat && !l.is_boolean()) return bad("logprobs", "'logprobs' must be a boolean");
    if (!chat && !(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() <= 20)) {
      return bad("logprobs", "'logprobs' must be an integer in [0, 20]");
    }
    r->logprobs = chat ? l.get<bool>() : true;
    if (!chat) r->top_logprobs = int(l.get<int64_t>());  // completions: logprobs = k
  }
  if (chat) {
    int64_t top = 0;
    if ((e = integer(body, "top_logprobs", 0, 20, &top))) return e;
    if (top > 0 && !r->logprobs) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = int(top);
  } else if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    return bad("top_logprobs", "completions take 'logprobs': k for the k likeliest tokens");
  }
  if ((e = response_format(body, ordered, r))) return e;
  if (chat && (e = tool_choice(body, ordered, d, r))) return e;
  if ((e = boolean(body, "ignore_eos", &r->ignore_eos))) return e;
  if ((e = boolean(body, "skip_special_tokens", &r->skip_special_tokens))) return e;
  return boolean(body, "return_token_ids", &r->return_token_ids);
}

json logprobs_json(const ChoiceUpdate& c, bool chat) {
  if (chat) {
    json content = json::array();
    for (size_t i = 0; i < c.logprobs.size(); ++i) {
      const std::string& t = i < c.token_texts.size() ? c.token_texts[i] : std::string();
      json bytes = json::array();
      for (unsigned char b : t) bytes.push_back(int(b));
      json top = json::array();
      if (i < c.top.size()) {
        for (const auto& [text, logprob] : c.top[i]) {
          json tb = json::array();
          for (unsigned char b : text) tb.push_back(int(b));
          top.push_back({{"token", text}, {"logprob", logprob}, {"bytes", tb}});
        }
      }
      content.push_back({{"token", t}, {"logprob", c.logprobs[i]}, {"bytes", bytes}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (size_t i = 0; i < c.logprobs.size(); ++i) {
    tokens.push_back(i < c.token_texts.size() ? c.token_texts[i] : std::string());
    lps.push_back(c.logprobs[i]);
    json top = json::object();
    if (i < c.top.size()) for (const auto& [text, logprob] : c.top[i]) top[text] = logprob;
    tops.push_back(top);
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", c.top.empty() ? json(nullptr) : tops},
          {"text_offset", json::array()}};
}

json choice_json(const ChoiceUpdate& c, const CompletionRequest& req, bool stream, bool first) {
  json choice = {{"index", c.index}};
  if (req.chat) {
    json message = json::object();
    if (!stream || first) message["role"] = "assistant";
    if (!stream || !c.text.empty() || !first) message["content"] = c.text;
    if (!c.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& t : c.tool_calls) {
        json call = {{"index", t.index}};
        if (!t.id.empty()) call["id"] = t.id, call["type"] = "function";
        json function = json::object();
        if (!t.name.empty()) function["name"] = t.name;
        function["arguments"] = t.arguments;
        call["function"] = function;
        if (!stream) call.erase("index");
        calls.push_back(std::move(call));
      }
      message["tool_calls"] = calls;
      // OpenAI's reply that calls tools has no content beside them but
      // what the model wrote that is more than layout.
      if (!stream && c.text.find_first_not_of(" \n\t\r") == std::string::npos) message["content"] = nullptr;
      if (stream && c.text.empty()) message.erase("content");
    }
    choice[stream ? "delta" : "message"] = message;
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = req.logprobs ? logprobs_json(c, req.chat) : json(nullptr);
  choice["finish_reason"] = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
  if (req.return_token_ids) choice["token_ids"] = c.token_ids;
  return choice;
}

json head_json(const ResponseHead& h, bool stream) {
  return {{"id", h.id},
          {"object", h.chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", h.created},
          {"model", h.model}};
}

}  // namespace

std::optional<ApiError> parse_completion_request(const std::string& body, bool chat,
                                                 const ApiDefaults& defaults,
                                                 text::Tokenizer* tokenizer,
                                                 CompletionRequest* out) {
  *out = CompletionRequest{};
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("", "the body is not valid JSON");
  if (!j.is_object()) return bad("", "the body must be a JSON object");
  // The body is read again keeping key order where the order shows: chat
  // templates print tool schemas with tojson, and structured output
  // generates properties, in the order the client wrote them. A completion
  // without response_format reads it once (a 2,048-id prompt's body took
  // about 150 us a read on a 2-core host, before its first token).
  const bool ordered_needed = chat || j.contains("response_format");
  const ojson ordered = ordered_needed ? ojson::parse(body, nullptr, /*allow_exceptions=*/false) : ojson::object();
  try {
    return parse_fields(j, ordered, chat, defaults, tokenizer, out);
  } catch (const json::exception& e) {  // a type the checks above missed
    return bad("", std::string("malformed request: ") + e.what());
  }
}

int64_t CompletionRequest::prompt_tokens() const {
  int64_t total = 0;
  for (const auto& p : prompts) total += int64_t(p.size());
  return total;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  return dump_json({{"error",
                     {{"message", e.message},
                      {"type", e.type},
                      {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                      {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}});
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_json(const ResponseHead& head, const std::vector<ChoiceUpdate>& choices, const CompletionRequest& req,
                     int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head_json(head, false);
  j["choices"] = json::array();
  for (const ChoiceUpdate& c : choices) j["choices"].push_back(choice_json(c, req, false, false));
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return j;
}

std::string stream_chunk(const ResponseHead& head, const ChoiceUpdate& choice,
                         const CompletionRequest& req, bool first) {
  json j = head_json(head, true);
  j["choices"] = json::array({choice_json(choice, req, true, first)});
  if (req.include_usage) j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

std::string stream_usage_chunk(const ResponseHead& head, int64_t prompt_tokens, int64_t completion_tokens) {
  json j = head_json(head, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(prompt_tokens, completion_tokens);
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace cohort::infer
