// Prompts JSONL parsing, tokenizer choice and stop conditions.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer/output_processor.h"
#include "infer/prompts.h"

namespace cohort::infer {
namespace {

TEST(InferPrompts, ReadsTokensAndTextSkippingBlankLines) {
  text::ByteTokenizer bytes;
  auto prompts = parse_prompts("{\"prompt\": \"Hi\"}\n\n{\"tokens\": [1, 2, 3]}\n", "p.jsonl",
                               &bytes, 256);
  ASSERT_TRUE(prompts.is_ok()) << prompts.status().message();
  ASSERT_EQ(prompts->size(), 2u);
  EXPECT_EQ((*prompts)[0].tokens, (std::vector<int32_t>{'H', 'i'}));
  EXPECT_EQ((*prompts)[1].index, 1);
  EXPECT_EQ((*prompts)[1].tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST(InferPrompts, ErrorsNameTheFileAndLine) {
  text::ByteTokenizer bytes;
  auto bad_id = parse_prompts("{\"tokens\": [1]}\n{\"tokens\": [300]}\n", "p.jsonl", &bytes, 256);
  ASSERT_FALSE(bad_id.is_ok());
  EXPECT_NE(bad_id.status().message().find("p.jsonl:2:"), std::string::npos);
  EXPECT_NE(bad_id.status().message().find("300"), std::string::npos);
  auto not_json = parse_prompts("{\"tokens\": [1]}\n\nnope\n", "p.jsonl", &bytes, 256);
  ASSERT_FALSE(not_json.is_ok());
  EXPECT_NE(not_json.status().message().find("p.jsonl:3:"), std::string::npos);
  auto empty = parse_prompts("{\"prompt\": \"\"}\n", "p.jsonl", &bytes, 256);
  EXPECT_FALSE(empty.is_ok());
  auto wrong_key = parse_prompts("{\"text\": \"x\"}\n", "p.jsonl", &bytes, 256);
  EXPECT_FALSE(wrong_key.is_ok());
  EXPECT_FALSE(parse_prompts("\n", "p.jsonl", &bytes, 256).is_ok());
  // Token ids that are not non-negative integers name the line and the value.
  for (const char* line : {"{\"tokens\": [1e30]}", "{\"tokens\": [2.5]}", "{\"tokens\": [-1]}",
                           "{\"tokens\": [\"7\"]}", "{\"tokens\": 7}"}) {
    auto bad = parse_prompts(std::string(line) + "\n", "p.jsonl", &bytes, 256);
    ASSERT_FALSE(bad.is_ok()) << line;
    EXPECT_NE(bad.status().message().find("p.jsonl:1:"), std::string::npos) << bad.status().message();
    EXPECT_NE(bad.status().message().find("tokens"), std::string::npos) << bad.status().message();
  }
}

TEST(InferPrompts, TextNeedsATokenizer) {
  auto prompts = parse_prompts("{\"prompt\": \"Hi\"}\n", "p.jsonl", nullptr, 1000);
  ASSERT_FALSE(prompts.is_ok());
  EXPECT_NE(prompts.status().message().find("tokens"), std::string::npos);
}

TEST(InferTokenizer, ByteVocabularyModelsGetTheByteTokenizerOthersNone) {
  jobs::ModelSection model;
  model.preset = "tiny";
  models::ModelConfig config;
  config.vocab_size = 256;
  auto bytes = open_tokenizer(model, config);
  ASSERT_TRUE(bytes.is_ok());
  EXPECT_NE(bytes->get(), nullptr);
  config.vocab_size = 512;
  auto none = open_tokenizer(model, config);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->get(), nullptr);
}

TEST(InferStop, StopStringsCutTheTextAndEndTheSequence) {
  text::ByteTokenizer bytes;
  jobs::InferSection infer;
  infer.stop_strings = {"\n\n", "END"};
  infer.stop_tokens = {7};
  auto stop = StopCondition::create(infer, &bytes);
  ASSERT_TRUE(stop.is_ok());
  EXPECT_TRUE(stop->is_stop_token(7));
  EXPECT_FALSE(stop->is_stop_token(8));
  std::vector<int32_t> seq;
  for (char c : std::string("ab EN")) seq.push_back(c);
  EXPECT_FALSE(stop->hits_stop_string(seq));
  seq.push_back('D');
  EXPECT_TRUE(stop->hits_stop_string(seq));
  OutputProcessor output(&bytes, std::make_shared<const StopCondition>(*stop));
  for (int32_t t : seq) output.add(t);
  EXPECT_EQ(output.take_text(/*finished=*/true), "ab ");
}

// A stream sees text only once no later token can change it: an incomplete
// UTF-8 character, or what could be the start of a stop string, waits; the
// finished text is cut before the stop string, and the pieces add up to it.
TEST(InferOutput, StreamsHoldBackPartialCharactersAndStopPrefixes) {
  text::ByteTokenizer bytes;
  auto made = OutputProcessor::create(&bytes, {}, {"STOP"});
  ASSERT_TRUE(made.is_ok()) << made.status().message();
  OutputProcessor& out = *made;
  std::string streamed;
  const std::string text = "h\xc3\xa9llo STO";  // "héllo STO": the é is two bytes
  for (size_t i = 0; i < text.size(); ++i) {
    out.add(static_cast<uint8_t>(text[i]));
    const std::string piece = out.take_text(false);
    streamed += piece;
    if (i == 1) {
      EXPECT_EQ(streamed, "") << "half of a character or a stop prefix was sent";
    }
  }
  // "STO" could still become "STOP": three bytes stay back.
  EXPECT_EQ(streamed, "h\xc3\xa9llo ");
  out.add('P');
  out.add('!');
  streamed += out.take_text(false);
  streamed += out.take_text(true);
  EXPECT_EQ(streamed, "h\xc3\xa9llo ");
  EXPECT_EQ(out.full_text(), "h\xc3\xa9llo ");
  EXPECT_EQ(out.tokens().size(), text.size() + 2);
  EXPECT_EQ(out.token_text(0), "h");
}

// Special tokens (<|im_end|>) count as tokens but add no text unless the
// consumer asks for them, as transformers' skip_special_tokens and vLLM's
// default.
TEST(InferOutput, SpecialTokensAddNoTextUnlessAskedFor) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string piece;
    text::append_utf8(text::byte_to_unicode()[b], &piece);
    vocab[piece] = b;
  }
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}};
  j["added_tokens"] = {{{"id", 256}, {"content", "<|im_end|>"}, {"special", true}},
                       {{"id", 257}, {"content", "<tool>"}, {"special", false}}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  auto tokenizer = text::BpeTokenizer::from_json(j.dump());
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().message();
  const text::Tokenizer& tok = **tokenizer;
  EXPECT_TRUE(tok.is_special(256));
  EXPECT_FALSE(tok.is_special(257));
  EXPECT_FALSE(tok.is_special('a'));
  const std::vector<int32_t> ids = {'h', 'i', 257, 256};
  for (bool skip : {true, false}) {
    auto out = OutputProcessor::create(&tok, {}, {}, skip);
    ASSERT_TRUE(out.is_ok());
    std::string streamed;
    for (int32_t id : ids) {
      out->add(id);
      streamed += out->take_text(false);
    }
    streamed += out->take_text(true);
    const std::string want = skip ? "hi<tool>" : "hi<tool><|im_end|>";
    EXPECT_EQ(streamed, want) << "skip " << skip;
    EXPECT_EQ(out->full_text(), want) << "skip " << skip;
    EXPECT_EQ(out->tokens().size(), 4u);
    EXPECT_EQ(out->token_text(3), "<|im_end|>");  // logprobs still name it
  }
}

TEST(InferOutput, StopStringsNeedATokenizerAndTheIdsTravelAsGiven) {
  EXPECT_FALSE(OutputProcessor::create(nullptr, {1}, {"x"}).is_ok());
  auto ids_only = OutputProcessor::create(nullptr, {5, 9}, {});
  ASSERT_TRUE(ids_only.is_ok());
  EXPECT_EQ(ids_only->stop_ids(), (std::vector<int32_t>{5, 9}));
  EXPECT_TRUE(ids_only->stop()->is_stop_token(9));
  ids_only->add(3);
  EXPECT_EQ(ids_only->take_text(true), "");  // no tokenizer, no text
}

TEST(InferStop, StopStringsWithoutATokenizerAreAnError) {
  jobs::InferSection infer;
  infer.stop_strings = {"x"};
  EXPECT_FALSE(StopCondition::create(infer, nullptr).is_ok());
  infer.stop_strings.clear();
  EXPECT_TRUE(StopCondition::create(infer, nullptr).is_ok());
}

TEST(InferStop, HuggingFaceFoldersEndAtTheirEosUnlessIgnored) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cohort_infer_eos_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  jobs::ModelSection model;
  model.hf_dir = dir.string();
  EXPECT_TRUE(model_eos_tokens(model).empty());
  std::ofstream(dir / "config.json") << "{\"eos_token_id\": 2}";
  EXPECT_EQ(model_eos_tokens(model), (std::vector<int32_t>{2}));
  std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": [151645, 151643]}";
  EXPECT_EQ(model_eos_tokens(model), (std::vector<int32_t>{151645, 151643}));
  ::setenv("COHORT_INFER_IGNORE_EOS", "1", 1);
  EXPECT_TRUE(model_eos_tokens(model).empty());
  ::unsetenv("COHORT_INFER_IGNORE_EOS");
  auto stop = StopCondition::create({}, nullptr, model_eos_tokens(model));
  ASSERT_TRUE(stop.is_ok());
  EXPECT_TRUE(stop->is_stop_token(151643));
  jobs::ModelSection preset;
  preset.preset = "tiny";
  EXPECT_TRUE(model_eos_tokens(preset).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::infer
