// Tokenizers: the hand-written pre-tokenizers against what the HF regexes
// produce, and a small handmade byte-level BPE tokenizer.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models/tokenizer.h"

namespace cohort::models {
namespace {

using Pieces = std::vector<std::string>;

TEST(Pretokenize, Llama3GroupsDigitsByThreeAndKeepsSpacesBeforeWords) {
  EXPECT_EQ(
      pretokenize("Hello, world! 123 4567\n\n  x's", PretokenizerKind::kLlama3),
      (Pieces{"Hello", ",", " world", "!", " ", "123", " ", "456", "7", "\n\n", " ", " x", "'s"}));
}

TEST(Pretokenize, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(pretokenize("a 12", PretokenizerKind::kQwen2), (Pieces{"a", " ", "1", "2"}));
  EXPECT_EQ(pretokenize("I'LL go...\r\nnow", PretokenizerKind::kQwen2),
            (Pieces{"I", "'LL", " go", "...\r\n", "now"}));
  EXPECT_EQ(pretokenize("x  \n y", PretokenizerKind::kQwen2), (Pieces{"x", "  \n", " y"}));
  EXPECT_EQ(pretokenize("end  ", PretokenizerKind::kQwen2), (Pieces{"end", "  "}));
}

TEST(Pretokenize, NonAsciiLettersAndPunctuation) {
  EXPECT_EQ(pretokenize("héllo 世界。", PretokenizerKind::kQwen2),
            (Pieces{"héllo", " 世界", "。"}));
  EXPECT_EQ(pretokenize("(über)", PretokenizerKind::kLlama3), (Pieces{"(über", ")"}));
}

TEST(Pretokenize, Gpt2Pattern) {
  EXPECT_EQ(pretokenize("Hello world  x's 42", PretokenizerKind::kGpt2),
            (Pieces{"Hello", " world", " ", " x", "'s", " 42"}));
}

std::string tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(byte_to_unicode()[b], &s);
    vocab[s] = b;
  }
  const std::vector<std::string> merged = {"he", "ll",   "hell", "hello", "Ġw",
                                           "or", "Ġwor", "ld",   "Ġworld"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[merged[i]] = 256 + static_cast<int>(i);
  nlohmann::json j;
  j["model"] = {
      {"type", "BPE"},
      {"vocab", vocab},
      {"merges", {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"}}};
  j["added_tokens"] = {{{"id", 265}, {"content", "<|endoftext|>"}, {"special", true}}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
            "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
  return j.dump();
}

TEST(BpeTokenizer, EncodesByMergeRankAndSplitsSpecialTokens) {
  auto t = BpeTokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->pretokenizer(), PretokenizerKind::kQwen2);
  EXPECT_EQ((*t)->vocab_size(), 266);
  EXPECT_EQ((*t)->encode("hello world<|endoftext|>"), (std::vector<int32_t>{259, 264, 265}));
  // "hel" has no full merge path: he + l.
  EXPECT_EQ((*t)->encode("hel"), (std::vector<int32_t>{256, 'l'}));
  EXPECT_EQ((*t)->decode({259, 264, 265}), "hello world<|endoftext|>");
  EXPECT_EQ((*t)->token_id("<|endoftext|>"), 265);
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  auto t = std::move(BpeTokenizer::from_json(tiny_tokenizer_json()).value());
  const std::string text = "héllo 世界 123!\n\tworld hello\xff\x01";
  EXPECT_EQ(t->decode(t->encode(text)), text);
  ByteTokenizer bytes;
  EXPECT_EQ(bytes.decode(bytes.encode(text)), text);
  EXPECT_EQ(bytes.encode("A"), (std::vector<int32_t>{65}));
}

TEST(BpeTokenizer, TemplatePostProcessorAddsBeginOfText) {
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  j["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel"},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}],
       "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [265]}}}]})");
  auto t = std::move(BpeTokenizer::from_json(j.dump()).value());
  EXPECT_EQ(t->encode_with_special_tokens("hello"), (std::vector<int32_t>{265, 259}));
  EXPECT_EQ(t->encode("hello"), (std::vector<int32_t>{259}));
}

TEST(BpeTokenizer, RejectsMalformedJson) {
  EXPECT_FALSE(BpeTokenizer::from_json("{").is_ok());
  EXPECT_FALSE(BpeTokenizer::from_json(R"({"model":{"type":"Unigram"}})").is_ok());
}

}  // namespace
}  // namespace cohort::models
