// The OpenAI wire format: requests parse into typed fields, every bad field
// is named with the status OpenAI gives, and responses have OpenAI's shape.
#include <gtest/gtest.h>

#include "infer/serve/chat_prompt.h"
#include "infer/serve/openai_api.h"

namespace cohort::infer {
namespace {

using nlohmann::json;

ApiDefaults defaults() {
  ApiDefaults d;
  d.model_name.assign(1, 'm');  // not = "m": a GCC 12 -Wrestrict false positive
  d.max_tokens = 16;
  d.sampling.temperature = 1.0f;
  d.context = 64;
  d.vocab_size = 256;
  return d;
}

std::optional<ApiError> parse(const std::string& body, bool chat = false, CompletionRequest* out = nullptr) {
  text::ByteTokenizer bytes;
  CompletionRequest scratch;
  return parse_completion_request(body, chat, defaults(), &bytes, out ? out : &scratch);
}

TEST(OpenAiApi, ParsesACompletionRequest) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0, "top_p": 0.5,
                        "top_k": 3, "seed": 9, "stop": ["x"], "stop_token_ids": [7], "stream": true,
                        "stream_options": {"include_usage": true}, "logprobs": 1, "user": "ignored"})",
                     false, &r));
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{'h', 'i'}}));
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.stop_strings, std::vector<std::string>{"x"});
  EXPECT_EQ(r.stop_ids, std::vector<int32_t>{7});
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
}

TEST(OpenAiApi, DefaultsFillWhatTheRequestLeavesOut) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": [1, 2, 3]})", false, &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].size(), 3u);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  ASSERT_FALSE(parse(R"({"prompt": [[4, 5]]})", false, &r));
  // Near the end of the context the default shrinks to what is left.
  ASSERT_FALSE(parse(json({{"prompt", std::string(60, 'a')}}).dump(), false, &r));
  EXPECT_EQ(r.max_tokens, 4);
}

// A field the server does not read is refused naming it, unless it carries
// the value that changes nothing (what client libraries send as defaults).
TEST(OpenAiApi, UnknownFieldsAreRefusedUnlessTheyChangeNothing) {
  const std::vector<std::string> refused = {
      R"({"prompt": "x", "logit_bias": {"5": 10}})",
      R"({"prompt": "x", "echo": true})",
      R"({"prompt": "x", "best_of": 3})",
      R"({"prompt": "x", "temprature": 0.2})",
      R"({"prompt": "x", "messages": []})",
  };
  for (const std::string& body : refused) {
    auto e = parse(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_EQ(e->code, "unsupported_parameter") << body;
    EXPECT_NE(e->message.find("'" + e->param + "' is not supported"), std::string::npos) << e->message;
  }
  EXPECT_EQ(parse(R"({"prompt": "x", "temprature": 0.2})")->param, "temprature");
  for (const std::string body : {R"({"prompt": "x", "frequency_penalty": 0.5, "presence_penalty": -1, "min_tokens": 2})",
                                 R"({"prompt": "x", "logit_bias": {}, "best_of": 1, "echo": false, "user": "u"})",
                                 R"({"prompt": "x", "suffix": "", "metadata": {"a": "b"}, "store": false})",
                                 R"({"prompt": "x", "repetition_penalty": 1, "frequency_penalty": null})"}) {
    EXPECT_FALSE(parse(body)) << body << ": " << parse(body)->message;
  }
  const std::string chat_base = R"({"messages": [{"role": "user", "content": "hi"}], )";
  auto json_output = parse(chat_base + R"("response_format": {"type": "yaml"}})", true);
  ASSERT_TRUE(json_output);
  EXPECT_EQ(json_output->param, "response_format");
  EXPECT_TRUE(parse(chat_base + R"("prompt": "x"})", true));  // a completions field in a chat request
  EXPECT_FALSE(parse(chat_base + R"("response_format": {"type": "text"}, "tool_choice": "auto",)"
                                 R"( "parallel_tool_calls": true})", true));
}

TEST(OpenAiApi, BadFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": 3})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 64})", "max_tokens"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stop": [1]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [300]})", "stop_token_ids"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "top_logprobs": 2})", "top_logprobs"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "min_tokens": 100000})", "min_tokens"},
      {R"({"prompt": "x", "stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"prompt": [1, -1]})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": ")" + std::string(70, 'a') + R"("})", "prompt"},
      {R"({})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    auto e = parse(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400) << body;
    EXPECT_EQ(e->param, param) << body << ": " << e->message;
  }
  for (const std::string body : {"{", "[1]", "null", "\"x\"", ""}) {
    auto e = parse(body);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "");
  }
  auto model = parse(R"({"model": "other", "prompt": "x"})");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 404);
  EXPECT_EQ(model->code, "model_not_found");
}

// A model with its own template (Llama 3's shape) is prompted through it,
// bos_token included; a template that raises refuses the request, naming
// 'messages' and the template's message.
TEST(OpenAiApi, ChatUsesTheModelsTemplateWhereItHasOne) {
  auto parsed = hf::ChatFormat::create(
      "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
      "{{ raise_exception('no system turns') }}{% endif %}"
      "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
      "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
      "<|begin_of_text|>", "<|eot_id|>", "test");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  ApiDefaults d = defaults();
  d.context = 512;  // the rendered prompt is ~110 byte tokens
  d.chat = *parsed;
  text::ByteTokenizer bytes;
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(R"({"messages": [{"role": "user", "content": " hi "}], "max_tokens": 2})",
                                        true, d, &bytes, &r));
  const std::string want =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(r.prompts.at(0), bytes.encode(want));
  EXPECT_EQ(render_chat_prompt({{"user", " hi "}}, d.chat.get()).value(), want);
  const auto refused = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]})", true, d, &bytes, &r);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->param, "messages");
  EXPECT_NE(refused->message.find("no system turns"), std::string::npos) << refused->message;
}

TEST(OpenAiApi, ChatMessagesAreRenderedAndChecked) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                        "max_completion_tokens": 3, "logprobs": true})", true, &r));
  const std::string want = render_chat_prompt({{"user", "hi"}}).value();
  EXPECT_EQ(want, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(r.prompts.at(0).size(), want.size());
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_TRUE(r.logprobs && r.chat);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": "hi"})", "messages"},
           {R"({"messages": [1]})", "messages[0]"},
           {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
           {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
           {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content"},
           {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"}}) {
    auto e = parse(body, true);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, param) << body;
  }
}

// top_logprobs (chat) and logprobs: k (completions): the k likeliest
// tokens of each step, in OpenAI's two shapes.
TEST(OpenAiApi, TopLogprobsInBothShapes) {
  CompletionRequest chat_req;
  ASSERT_FALSE(parse(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 2})",
                     true, &chat_req));
  EXPECT_EQ(chat_req.top_logprobs, 2);
  EXPECT_EQ(parse(R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", true)->param,
            "top_logprobs");  // needs logprobs: true
  CompletionRequest comp_req;
  ASSERT_FALSE(parse(R"({"prompt": "x", "logprobs": 3})", false, &comp_req));
  EXPECT_TRUE(comp_req.logprobs);
  EXPECT_EQ(comp_req.top_logprobs, 3);
  ChoiceUpdate c;
  c.text = "ab";
  c.logprobs = {-0.1f, -0.5f};
  c.token_texts = {"a", "b"};
  c.top = {{{"a", -0.1f}, {"z", -2.5f}}, {{"b", -0.5f}, {"a", -1.0f}}};
  ResponseHead head{"x", 1, "m", true};
  const json chat = completion_json(head, {c}, chat_req, 3, 2)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(chat.size(), 2u);
  EXPECT_EQ(chat[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat[0]["top_logprobs"][1]["token"], "z");
  EXPECT_FLOAT_EQ(chat[0]["top_logprobs"][1]["logprob"].get<float>(), -2.5f);
  EXPECT_EQ(chat[1]["top_logprobs"][1]["bytes"], json({97}));
  head.chat = false;
  const json comp = completion_json(head, {c}, comp_req, 3, 2)["choices"][0]["logprobs"];
  ASSERT_EQ(comp["top_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(comp["top_logprobs"][0]["z"].get<float>(), -2.5f);
  EXPECT_FLOAT_EQ(comp["top_logprobs"][1]["a"].get<float>(), -1.0f);
}

// A completions request may carry several prompts, each with n choices,
// numbered prompt * n + choice; a request never asks for more sequences
// than the server runs.
TEST(OpenAiApi, SeveralPromptsAndNChoices) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": ["ab", [1, 2, 3], "c"], "n": 2})", false, &r));
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(r.prompts[1], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.choices(), 6);
  EXPECT_EQ(r.prompt_of(3), r.prompts[1]);
  EXPECT_EQ(r.prompt_of(5), r.prompts[2]);
  EXPECT_EQ(r.prompt_tokens(), 6);
  CompletionRequest chat;
  ASSERT_FALSE(parse(R"({"messages": [{"role": "user", "content": "hi"}], "n": 3})", true, &chat));
  EXPECT_EQ(chat.choices(), 3);
  EXPECT_EQ(parse(R"({"prompt": "x", "n": 0})")->param, "n");
  EXPECT_EQ(parse(R"({"prompt": "x", "n": 65})")->param, "n");  // over max_choices (64)
  EXPECT_EQ(parse(R"({"prompt": ["a", "b"], "n": 40})")->param, "n");
  EXPECT_EQ(parse(R"({"prompt": ["a", 5]})")->param, "prompt[1]");
  EXPECT_EQ(parse(R"({"prompt": ["a", [1, 999]]})")->param, "prompt[1]");
  EXPECT_EQ(parse(R"({"prompt": ["a", ""]})")->param, "prompt[1]");
  // The longest prompt bounds max_tokens.
  EXPECT_EQ(parse(json({{"prompt", {"a", std::string(60, 'b')}}, {"max_tokens", 5}}).dump())->param, "max_tokens");
  std::vector<std::string> many(65, "a");
  EXPECT_EQ(parse(json({{"prompt", many}}).dump())->param, "prompt");
  ChoiceUpdate a, b;
  a.text = "x", a.finish_reason = "length";
  b.index = 1, b.text = "y", b.finish_reason = "stop";
  ResponseHead head{"cmpl-1", 1, "m", false};
  const json whole = completion_json(head, {a, b}, r, 2, 3);
  ASSERT_EQ(whole["choices"].size(), 2u);
  EXPECT_EQ(whole["choices"][1]["index"], 1);
  EXPECT_EQ(whole["choices"][1]["text"], "y");
  EXPECT_EQ(json::parse(stream_chunk(head, b, r, true).substr(6))["choices"][0]["index"], 1);
}

// tools are checked; tool_choice "auto" reads the reply for calls, which
// come back in OpenAI's shape, whole or as stream deltas.
TEST(OpenAiApi, ToolsAndToolCalls) {
  const std::string base = R"({"messages": [{"role": "user", "content": "weather?"}], )";
  const std::string tool = R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})";
  CompletionRequest r;
  ASSERT_FALSE(parse(base + R"("tools": [)" + tool + "]}", true, &r));
  EXPECT_TRUE(r.parse_tool_calls);
  ASSERT_FALSE(parse(base + R"("tools": [)" + tool + R"(], "tool_choice": "none"})", true, &r));
  EXPECT_FALSE(r.parse_tool_calls);
  ASSERT_FALSE(parse(base + R"("tool_choice": "auto"})", true, &r));
  EXPECT_FALSE(r.parse_tool_calls);  // nothing to call
  EXPECT_EQ(parse(base + R"("tools": [{"type": "function"}]})", true)->param, "tools[0]");
  EXPECT_EQ(parse(base + R"("tools": [{"type": "function", "function": {"name": ""}}]})", true)->param,
            "tools[0].function.name");
  EXPECT_EQ(parse(base + R"("tools": {}})", true)->param, "tools");
  auto forced = parse(base + R"("tools": [)" + tool + R"(], "tool_choice": "always"})", true);
  ASSERT_TRUE(forced);
  EXPECT_EQ(forced->param, "tool_choice");
  EXPECT_EQ(parse(base + R"("parallel_tool_calls": 1})", true)->param, "parallel_tool_calls");

  ResponseHead head{"chatcmpl-1", 1, "m", true};
  ChoiceUpdate c;
  c.text = "\n";
  c.finish_reason = "tool_calls";
  c.tool_calls = {{0, "call_1_0_0", "get_weather", R"({"city": "Paris"})"}};
  const json whole = completion_json(head, {c}, r, 5, 9)["choices"][0];
  EXPECT_EQ(whole["finish_reason"], "tool_calls");
  EXPECT_TRUE(whole["message"]["content"].is_null());
  const json call = whole["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "call_1_0_0");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_FALSE(call.contains("index"));
  ChoiceUpdate more;
  more.tool_calls = {{0, "", "", R"(, "unit": "C"})"}};
  const json delta = json::parse(stream_chunk(head, more, r, false).substr(6))["choices"][0]["delta"];
  EXPECT_FALSE(delta.contains("content"));
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_FALSE(delta["tool_calls"][0].contains("id"));
  EXPECT_FALSE(delta["tool_calls"][0]["function"].contains("name"));
  EXPECT_EQ(delta["tool_calls"][0]["function"]["arguments"], R"(, "unit": "C"})");
}

// response_format asks for JSON: any object, or one of a schema (whose
// unsupported keywords are named); a forced tool call is a grammar too.
TEST(OpenAiApi, StructuredOutputRequests) {
  CompletionRequest r;
  ASSERT_FALSE(parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})", false, &r));
  ASSERT_TRUE(r.grammar);
  EXPECT_NE(r.constraint.find("\"schema\":null"), std::string::npos) << r.constraint;
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], )";
  ASSERT_FALSE(parse(chat + R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}}}})", true, &r));
  ASSERT_TRUE(r.grammar);
  EXPECT_LT(r.constraint.find("\"b\""), r.constraint.find("\"a\""));  // the client's order is kept
  // A completion reads its body a second time, in order, only for a response_format.
  ASSERT_FALSE(parse(R"({"prompt": [1, 2], "response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "schema": {"type": "object", "properties": {"z": {"type": "integer"}, "y": {"type": "string"}}}}}})", false, &r));
  EXPECT_LT(r.constraint.find("\"z\""), r.constraint.find("\"y\"")) << r.constraint;
  ASSERT_FALSE(parse(R"({"prompt": [5, 6, 7], "max_tokens": 3})", false, &r));
  EXPECT_EQ(r.prompts.at(0), (std::vector<int32_t>{5, 6, 7}));
  auto e = parse(chat + R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}}})", true);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format.json_schema.schema");
  EXPECT_NE(e->message.find("schema.properties.a.pattern"), std::string::npos) << e->message;
  EXPECT_EQ(parse(chat + R"("response_format": {"type": "json_schema"}})", true)->param, "response_format.json_schema");

  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}, {"type": "function", "function": {"name": "g"}}])";
  ASSERT_FALSE(parse(chat + tools + R"(, "tool_choice": "required"})", true, &r));
  EXPECT_TRUE(r.parse_tool_calls && r.grammar);
  text::JsonMatcher m(r.grammar);
  EXPECT_TRUE(m.feed("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>") && m.complete());
  ASSERT_FALSE(parse(chat + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})", true, &r));
  text::JsonMatcher g(r.grammar);
  EXPECT_FALSE(g.feed("<tool_call>\n{\"name\": \"f"));
  EXPECT_EQ(parse(chat + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "h"}}})", true)->param,
            "tool_choice");
  EXPECT_EQ(parse(chat + R"("tool_choice": "required"})", true)->param, "tool_choice");
}

TEST(OpenAiApi, ResponsesHaveOpenAisShape) {
  CompletionRequest req;
  req.chat = true;
  req.include_usage = true;
  req.return_token_ids = true;
  ResponseHead head{"chatcmpl-1", 100, "m", true};
  ChoiceUpdate c;
  c.text = "hey";
  c.token_ids = {1, 2};
  c.finish_reason = "length";
  const json whole = completion_json(head, {c}, req, 4, 2);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hey");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["usage"]["total_tokens"], 6);
  const std::string sse = stream_chunk(head, c, req, true);
  ASSERT_EQ(sse.rfind("data: ", 0), 0u);
  ASSERT_EQ(sse.substr(sse.size() - 2), "\n\n");
  const json chunk = json::parse(sse.substr(6));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunk["choices"][0]["token_ids"], json({1, 2}));
  EXPECT_TRUE(chunk["usage"].is_null());
  const json usage = json::parse(stream_usage_chunk(head, 4, 2).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  const json err = json::parse(error_body({400, "bad", "invalid_request_error", "top_p", ""}));
  EXPECT_EQ(err["error"]["param"], "top_p");
  EXPECT_TRUE(err["error"]["code"].is_null());
  // A random model's bytes are not UTF-8; the JSON stays valid.
  EXPECT_NO_THROW(json::parse(dump_json(json{{"text", std::string("\xff\xfe")}})));
}

TEST(OpenAiApi, MangledBodiesNeverThrowAndGetA4xx) {
  const std::string valid = R"({"model": "m", "prompt": [1, 2], "max_tokens": 4, "stop": ["a"],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
      "stream_options": {"include_usage": true}, "logprobs": 2, "top_k": -1, "seed": 18446744073709551615})";
  uint64_t state = 88172645463325252ULL;
  auto next = [&] { return state ^= state << 13, state ^= state >> 7, state ^= state << 17; };
  for (int i = 0; i < 4000; ++i) {
    std::string body = valid;
    for (int m = 0, n = 1 + int(next() % 4); m < n; ++m) {
      const size_t at = next() % body.size();
      switch (next() % 3) {
        case 0: body[at] = static_cast<char>(next()); break;
        case 1: body.erase(at, 1 + next() % 8); break;
        default: body.insert(at, 1, "{}[]\",:0-e\\"[next() % 10]);
      }
      if (body.empty()) body.assign(1, '{');  // not = "{": a GCC 12 -Wrestrict false positive
    }
    for (bool chat : {false, true}) {
      CompletionRequest r;
      std::optional<ApiError> e;
      ASSERT_NO_THROW(e = parse(body, chat, &r)) << body;
      if (e) {
        EXPECT_TRUE(e->status == 400 || e->status == 404) << body;
      }
    }
  }
}

}  // namespace
}  // namespace cohort::infer
