// Tokenizers: small handmade tokenizer.json files run through the HF
// pipeline stages (PCRE2 split patterns, normalizers, byte-level and
// byte-fallback BPE, added tokens, decoders). Parity with HF's own library
// on trained tokenizers is tests/data/tokenizer_parity.py (GPU machine).
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "models/tokenizer.h"

namespace cohort::models {
namespace {

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
  j["decoder"] = {{"type", "ByteLevel"}};
  return j.dump();
}

TEST(BpeTokenizer, EncodesByMergeRankAndSplitsSpecialTokens) {
  auto t = BpeTokenizer::from_json(tiny_tokenizer_json());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->vocab_size(), 266);
  EXPECT_EQ((*t)->encode("hello world<|endoftext|>"), (std::vector<int32_t>{259, 264, 265}));
  // "hel" has no full merge path: he + l.
  EXPECT_EQ((*t)->encode("hel"), (std::vector<int32_t>{256, 'l'}));
  EXPECT_EQ((*t)->decode({259, 264, 265}), "hello world<|endoftext|>");
  EXPECT_EQ((*t)->token_id("<|endoftext|>"), 265);
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  auto t = std::move(BpeTokenizer::from_json(tiny_tokenizer_json()).value());
  const std::string text = "héllo 世界 123!\n\tworld hello\x01";
  EXPECT_EQ(t->decode(t->encode(text)), text);
  // Invalid UTF-8 is still encoded byte by byte; decoding makes it U+FFFD as HF does.
  EXPECT_EQ(t->encode("a\xff").size(), 2u);
  EXPECT_EQ(t->decode(t->encode("a\xff")), "a\xef\xbf\xbd");
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

std::vector<std::string> pieces(BpeTokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : t.encode(text)) out.push_back(t.decode({id}));
  return out;
}

TEST(BpeTokenizer, SplitPatternsRunThroughPcre2WithUnicodeClasses) {
  // No merges: every pre-token becomes its bytes, so pre-token edges show as
  // the decoded pieces only where merges would join them; use a vocab of
  // whole pre-tokens instead (ignore_merges) to see the split itself.
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  auto& vocab = j["model"]["vocab"];
  int next = 300;
  const std::vector<std::string> words = {"Hello", ",", " world", "!", " ", "123", "456", "7", "\n\n", " x", "'s",
                                          " 世界", "。", "héllo"};
  for (const auto& w : words) {
    std::string mapped;  // as the ByteLevel stage writes the pre-token
    for (unsigned char c : w) append_utf8(byte_to_unicode()[c], &mapped);
    vocab[mapped] = next++;
  }
  j["model"]["ignore_merges"] = true;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  auto t = std::move(BpeTokenizer::from_json(j.dump()).value());
  EXPECT_EQ(pieces(*t, "Hello, world! 1234567\n\n x's"),
            (std::vector<std::string>{"Hello", ",", " world", "!", " ", "123", "456", "7", "\n\n", " x", "'s"}));
  EXPECT_EQ(pieces(*t, "héllo 世界。"), (std::vector<std::string>{"héllo", " 世界", "。"}));
}

TEST(BpeTokenizer, NfcNormalizerAndLstripAddedTokens) {
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"].push_back({{"id", 266}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}});
  auto t = std::move(BpeTokenizer::from_json(j.dump()).value());
  // e + combining acute (U+0301) composes to é (U+00E9) before BPE.
  EXPECT_EQ(t->encode("e\xcc\x81"), t->encode("\xc3\xa9"));
  EXPECT_EQ(t->encode("hello   <mask>"), (std::vector<int32_t>{259, 266}));
}

// Mistral-style: Metaspace pre-tokenizer, characters outside the vocabulary
// to <0xXX> byte tokens, decoded back through ByteFallback and Metaspace.
TEST(BpeTokenizer, MetaspaceWithByteFallback) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* piece : {"\xe2\x96\x81", "h", "i", "\xe2\x96\x81h", "\xe2\x96\x81hi"}) vocab[piece] = id++;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"\xe2\x96\x81 h", "\xe2\x96\x81h i"}},
                {"byte_fallback", true}, {"unk_token", "<unk>"}, {"fuse_unk", true}};
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}, {"prepend_scheme", "first"}, {"split", false}};
  j["added_tokens"] = {{{"id", 1}, {"content", "<s>"}, {"special", true}}};
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1]}}})");
  j["decoder"] = nlohmann::json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  auto t = std::move(BpeTokenizer::from_json(j.dump()).value());
  // "hi é": ▁hi, ▁ then é (not in the vocabulary) as its two UTF-8 bytes.
  EXPECT_EQ(t->encode("hi \xc3\xa9"), (std::vector<int32_t>{263, 259, 3 + 0xc3, 3 + 0xa9}));
  EXPECT_EQ(t->encode_with_special_tokens("hi").front(), 1);
  EXPECT_EQ(t->decode(t->encode("hi \xc3\xa9")), "hi \xc3\xa9");
}

// HF's Metaspace decoder drops every replacement character of the first
// token, not only a leading one: with split = false a token can span words
// ("▁hi▁h"), and HF decodes it as "hih". Later tokens get spaces.
TEST(BpeTokenizer, MetaspaceDecoderDropsEveryReplacementOfTheFirstTokenAsHfDoes) {
  const std::string m = "\xe2\x96\x81";
  nlohmann::json vocab = {{"<unk>", 0}, {m, 1}, {"h", 2}, {"i", 3}, {m + "h", 4}, {m + "hi", 5},
                          {m + "hi" + m + "h", 7}};
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab},
                {"merges", {m + " h", m + "h i", m + "hi " + m + "h"}},
                {"unk_token", "<unk>"}};
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}, {"split", false}};
  auto t = std::move(BpeTokenizer::from_json(j.dump()).value());
  EXPECT_EQ(t->encode("hi h hi"), (std::vector<int32_t>{7, 5}));
  EXPECT_EQ(t->decode({7, 5}), "hih hi");
  EXPECT_EQ(t->decode({5, 7}), "hi hi h");
  j["decoder"]["prepend_scheme"] = "never";
  auto never = std::move(BpeTokenizer::from_json(j.dump()).value());
  EXPECT_EQ(never->decode({7, 5}), " hi h hi");
}

TEST(BpeTokenizer, RejectsMalformedJson) {
  EXPECT_FALSE(BpeTokenizer::from_json("{").is_ok());
  EXPECT_FALSE(BpeTokenizer::from_json(R"({"model":{"type":"Unigram"}})").is_ok());
  EXPECT_FALSE(BpeTokenizer::from_json("[1, 2]").is_ok());
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  auto bad = BpeTokenizer::from_json(j.dump());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("pre_tokenizer"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace cohort::models
