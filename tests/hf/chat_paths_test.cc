// One chat format, two paths: a conversation rendered for training (chat
// JSONL through data::TextEncoder, loss on the assistant's reply) and the
// same conversation asked of the server (an OpenAI chat request through
// infer::parse_completion_request) give the same prompt tokens, for every
// template of the suite in tests/data/templates: the tokens before the
// reply that training teaches are exactly the tokens the server sends the
// model. System prompts, tools and multi-turn conversations each.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/text_encoder.h"
#include "hf/model_folder.h"
#include "infer/serve/openai_api.h"
#include "text/tokenizer.h"
#include "../data/data_fixture.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::vector<std::string> suite_templates() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(COHORT_SOURCE_DIR) / "tests/data/templates"))
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "The weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
  "required": ["city"]}}}])");

struct Conversation {
  const char* name;
  ojson messages;  // ends with the assistant reply training learns
  ojson tools;     // null: none
};

std::vector<Conversation> conversations() {
  return {
      {"system_prompt", ojson::parse(R"([{"role": "system", "content": "You answer in one word."},
          {"role": "user", "content": "hello world?"}, {"role": "assistant", "content": "hello"}])"), ojson()},
      {"multi_turn", ojson::parse(R"([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"},
          {"role": "user", "content": "and again?"}, {"role": "assistant", "content": "hello world"}])"), ojson()},
      {"tools", ojson::parse(R"([{"role": "system", "content": "Use tools."},
          {"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call_1",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
          {"role": "assistant", "content": "21 degrees"}])"), kTools},
  };
}

class ChatPaths : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatPaths, TrainingAndServingGiveTheSamePromptTokens) {
  const fs::path dir = testing::data_scratch("chat_paths_" + GetParam());
  std::ofstream(dir / "tokenizer.json") << testing::test_tokenizer_json();
  const ojson config = {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|im_end|>"},
                        {"chat_template", testing::read_text_file(fs::path(COHORT_SOURCE_DIR) / "tests/data/templates" /
                                                                  (GetParam() + ".jinja"))}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(1);
  auto folder = ModelFolder::open(dir.string());
  ASSERT_TRUE(folder.is_ok()) << folder.status().to_string();
  auto encoder = data::TextEncoder::open(dir.string(), 0);
  ASSERT_TRUE(encoder.is_ok()) << encoder.status().to_string();

  infer::ApiDefaults defaults;
  defaults.model_name = "m";
  defaults.vocab_size = (*encoder)->vocab_size();
  defaults.context = 1 << 16;
  defaults.max_tokens = 8;
  defaults.chat = folder->chat();
  for (const Conversation& c : conversations()) {
    SCOPED_TRACE(c.name);
    ojson line = {{"messages", c.messages}};
    if (!c.tools.is_null()) line["tools"] = c.tools;
    auto trained = (*encoder)->encode_line(line.dump(), data::DataFormat::kChat, "text");
    ojson request = {{"messages", ojson(c.messages.begin(), c.messages.end() - 1)}, {"max_tokens", 4}};
    if (!c.tools.is_null()) request["tools"] = c.tools;
    infer::CompletionRequest served;
    auto error = infer::parse_completion_request(request.dump(), true, defaults, &(*encoder)->tokenizer(), &served);
    if (!trained.is_ok() && trained.status().message().find("chat template raised") != std::string::npos) {
      // A template that refuses the conversation (Gemma: no system turn;
      // Mistral: no tool turns) refuses it on both paths.
      ASSERT_TRUE(error) << trained.status().message();
      EXPECT_EQ(error->status, 400);
      continue;
    }
    ASSERT_TRUE(trained.is_ok()) << trained.status().to_string();
    // The prompt is everything before the last trained run (the final reply).
    const auto& mask = trained->mask;
    ASSERT_FALSE(mask.empty());
    size_t reply = mask.size();
    while (reply > 0 && !mask[reply - 1]) --reply;
    while (reply > 0 && mask[reply - 1]) --reply;
    ASSERT_GT(reply, 0u);
    const std::vector<int32_t> training_prompt(trained->tokens.begin(), trained->tokens.begin() + long(reply));

    ASSERT_FALSE(error) << error->message;
    EXPECT_EQ(served.prompts.at(0), training_prompt)
        << "served: " << (*encoder)->tokenizer().decode(served.prompts.at(0))
        << "\ntrained: " << (*encoder)->tokenizer().decode(training_prompt);
  }
}

INSTANTIATE_TEST_SUITE_P(TemplateSuite, ChatPaths, ::testing::ValuesIn(suite_templates()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace cohort::hf
