// Tool-call parsers on recorded model outputs: whole and streamed in every
// split give the same calls and content, and text that is no call is kept.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/serve/tool_calls.h"

namespace cohort::infer {
namespace {

using nlohmann::json;

struct Call {
  std::string id, name, arguments;
};
struct Parsed {
  std::string content;
  std::vector<Call> calls;
};

// Feeds `pieces` in order and assembles the deltas the way a streaming
// client does (the first delta of a call names it, the rest append).
Parsed run(ToolCallFormat format, const std::vector<std::string>& pieces) {
  auto parser = make_tool_call_parser(format, "7");
  ToolParseOutput all;
  for (const std::string& p : pieces) all.append(parser->feed(p));
  all.append(parser->finish());
  Parsed out;
  out.content = all.content;
  for (const ToolCallDelta& d : all.calls) {
    if (d.index == static_cast<int>(out.calls.size())) {
      EXPECT_FALSE(d.id.empty());
      out.calls.push_back({d.id, d.name, d.arguments});
    } else {
      EXPECT_EQ(d.index, static_cast<int>(out.calls.size()) - 1) << "deltas out of order";
      EXPECT_TRUE(d.id.empty() && d.name.empty());
      out.calls.back().arguments += d.arguments;
    }
  }
  EXPECT_EQ(parser->calls(), static_cast<int>(out.calls.size()));
  return out;
}

// The whole text at once, split in two at every point, and byte by byte:
// all the same.
Parsed parse_every_way(ToolCallFormat format, const std::string& text) {
  const Parsed whole = run(format, {text});
  auto same = [&](const Parsed& p, const std::string& how) {
    EXPECT_EQ(p.content, whole.content) << how;
    ASSERT_EQ(p.calls.size(), whole.calls.size()) << how;
    for (size_t i = 0; i < p.calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, whole.calls[i].name) << how;
      EXPECT_EQ(json::parse(p.calls[i].arguments, nullptr, false), json::parse(whole.calls[i].arguments, nullptr, false))
          << how << ": " << p.calls[i].arguments;
    }
  };
  for (size_t at = 0; at <= text.size(); ++at) same(run(format, {text.substr(0, at), text.substr(at)}), "split at " + std::to_string(at));
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  same(run(format, bytes), "byte by byte");
  return whole;
}

// As Qwen3 answers a weather question with two tools (hermes format).
TEST(ToolCalls, HermesCallsAmidText) {
  const std::string text =
      "<think>\n\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
      "\"Europe/Paris\"}}\n</tool_call>";
  const Parsed p = parse_every_way(ToolCallFormat::kHermes, text);
  EXPECT_EQ(p.content, "<think>\n\n</think>\n\nLet me check.\n\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_7_0");
  EXPECT_EQ(p.calls[1].id, "call_7_1");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"city", "Paris"}, {"unit", "celsius"}}));
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(json::parse(p.calls[1].arguments), json({{"tz", "Europe/Paris"}}));
}

// A call's name goes out as soon as it is known, its arguments as they come.
TEST(ToolCalls, HermesStreamsTheNameThenTheArguments) {
  auto parser = make_tool_call_parser(ToolCallFormat::kHermes, "x");
  ToolParseOutput a = parser->feed("Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1");
  EXPECT_EQ(a.content, "Sure.");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "f");
  EXPECT_EQ(a.calls[0].id, "call_x_0");
  EXPECT_EQ(a.calls[0].arguments, "{\"a\": 1");
  ToolParseOutput b = parser->feed(", \"b\": 2}}\n</tool");
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_TRUE(b.calls[0].name.empty());
  EXPECT_EQ(b.calls[0].arguments, ", \"b\": 2}");
  EXPECT_EQ(b.content, "");
  ToolParseOutput c = parser->feed("_call>");
  EXPECT_TRUE(c.calls.empty());
  EXPECT_EQ(c.content, "");
}

TEST(ToolCalls, HermesArgumentsWithBracesInStringsAndNesting) {
  const std::string text =
      "<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":\"a}b{\\\"c\",\"filters\":[{\"k\":[1,2]},{}]}}</tool_call>done";
  const Parsed p = parse_every_way(ToolCallFormat::kHermes, text);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"q\":\"a}b{\\\"c\",\"filters\":[{\"k\":[1,2]},{}]}");
  EXPECT_EQ(p.content, "done");
}

TEST(ToolCalls, HermesOtherKeyOrderIsParsedWhole) {
  const Parsed p = parse_every_way(ToolCallFormat::kHermes,
                                   "<tool_call>{\"arguments\": \"{\\\"x\\\": 1}\", \"name\": \"f\"}</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"x", 1}}));
}

// Text that only looks like a call stays text, byte for byte.
TEST(ToolCalls, HermesTextThatIsNoCallIsKept) {
  for (const std::string text : {"use <tools> and <tool_call without a close",
                                 "<tool_call>not json</tool_call> after",
                                 "<tool_call>{\"nam\": 1}</tool_call>x",
                                 "<tool_call>{\"name\": \"f\", \"argu",  // cut off by max_tokens
                                 "a < b <tool_ca"}) {
    const Parsed p = parse_every_way(ToolCallFormat::kHermes, text);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// As Llama 3.1 calls tools: the whole reply is the call, after the
// python tag when special tokens are shown.
TEST(ToolCalls, Llama3JsonCalls) {
  for (const std::string lead : {"", "<|python_tag|>", " \n"}) {
    const Parsed p = parse_every_way(
        ToolCallFormat::kLlama3Json,
        lead + "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"noop\", \"parameters\": {}}");
    EXPECT_EQ(p.content, "") << lead;
    ASSERT_EQ(p.calls.size(), 2u) << lead;
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"city", "Paris"}}));
    EXPECT_EQ(p.calls[1].name, "noop");
    EXPECT_EQ(p.calls[1].arguments, "{}");
  }
  const Parsed text = parse_every_way(ToolCallFormat::kLlama3Json, "  The weather in Paris is {sunny}.");
  EXPECT_TRUE(text.calls.empty());
  EXPECT_EQ(text.content, "  The weather in Paris is {sunny}.");
  const Parsed bad = parse_every_way(ToolCallFormat::kLlama3Json, "{\"not\": \"a call\"}");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "{\"not\": \"a call\"}");
}

TEST(ToolCalls, FormatFromTheTemplateOrByName) {
  EXPECT_EQ(detect_tool_call_format("{%- if tools %}<tools>{{ tool | tojson }}</tools> <tool_call>"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{- '<|python_tag|>' }} {\"name\": function name, \"parameters\": ...}"),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(""), ToolCallFormat::kHermes);
  EXPECT_EQ(*parse_tool_call_format("llama3_json"), ToolCallFormat::kLlama3Json);
  auto bad = parse_tool_call_format("mistral");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("mistral"), std::string::npos);
}

}  // namespace
}  // namespace cohort::infer
