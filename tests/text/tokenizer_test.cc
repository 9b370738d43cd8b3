// Tokenizers: small handmade tokenizer.json files run through the HF
// pipeline stages (PCRE2 split patterns, normalizers, byte-level and
// byte-fallback BPE, added tokens, decoders). Parity with HF's own library
// on trained tokenizers is tests/data/tokenizer_parity.py (GPU machine).
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace cohort::text {
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


// A byte-level vocabulary with many overlapping merges (every pair of the
// letters a-d, then pairs of those), so merge order matters.
std::string overlapping_merges_json(const std::string& split_regex) {
  auto j = nlohmann::json::parse(tiny_tokenizer_json());
  auto& vocab = j["model"]["vocab"];
  nlohmann::json merges = nlohmann::json::array();
  int next = 400;
  const std::string letters = "abcd";
  std::vector<std::string> pairs;
  for (char x : letters)
    for (char y : letters) pairs.push_back(std::string{x, y});
  for (const auto& p : pairs) {
    vocab[p] = next++;
    merges.push_back(p.substr(0, 1) + " " + p.substr(1));
  }
  for (const auto& p : pairs)
    for (const auto& q : {pairs[1], pairs[6], pairs[11]}) {
      vocab[p + q] = next++;
      merges.push_back(p + " " + q);
    }
  j["model"]["merges"] = merges;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = split_regex;
  return j.dump();
}

// The merge rule by its definition: lowest rank anywhere, leftmost first.
std::vector<int32_t> merge_by_definition(const nlohmann::json& model, std::vector<int32_t> symbols) {
  std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> rank;
  int r = 0;
  for (const auto& m : model["merges"]) {
    const std::string s = m.get<std::string>();
    const std::string left = s.substr(0, s.find(' ')), right = s.substr(s.find(' ') + 1);
    rank[{model["vocab"][left].get<int32_t>(), model["vocab"][right].get<int32_t>()}] = {
        r++, model["vocab"][left + right].get<int32_t>()};
  }
  for (;;) {
    int best = INT32_MAX;
    size_t at = 0;
    for (size_t k = 0; k + 1 < symbols.size(); ++k)
      if (auto it = rank.find({symbols[k], symbols[k + 1]}); it != rank.end() && it->second.first < best)
        best = it->second.first, at = k;
    if (best == INT32_MAX) return symbols;
    symbols[at] = rank[{symbols[at], symbols[at + 1]}].second;
    symbols.erase(symbols.begin() + long(at) + 1);
  }
}

TEST(BpeTokenizer, HeapMergingEqualsTheRuleOnRandomWords) {
  const std::string json_text = overlapping_merges_json("\\p{L}+");
  const auto model = nlohmann::json::parse(json_text)["model"];
  auto t = std::move(BpeTokenizer::from_json(json_text).value());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string word(size_t(1 + rng() % 40), 'a');
    for (char& c : word) c = char('a' + rng() % 4);
    std::vector<int32_t> bytes;
    for (unsigned char c : word) bytes.push_back(model["vocab"][std::string(1, char(c))].get<int32_t>());
    EXPECT_EQ(t->encode(word), merge_by_definition(model, bytes)) << word;
  }
}

// Quadratic merging would take minutes on a megabyte; this takes about half
// a second on 2 cores (0.88 s once under a parallel build).
TEST(BpeTokenizer, AOneMegabyteWordEncodesWithinTwoSeconds) {
  auto t = std::move(BpeTokenizer::from_json(overlapping_merges_json("\\p{L}+")).value());
  std::string word(size_t(1) << 20, 'a');
  std::mt19937 rng(3);
  for (char& c : word) c = char('a' + rng() % 4);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t->encode(word);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_EQ(t->decode(ids), word);
  EXPECT_LT(ids.size(), word.size() / 2);  // merged, not left as bytes
}

TEST(BpeTokenizer, ACatastrophicSplitPatternCannotStallEncoding) {
  // (\w+\s?)*$ backtracks exponentially on words followed by a non-word
  // character; the match limit and deadline bound it, and every byte is
  // still encoded.
  auto t = std::move(BpeTokenizer::from_json(overlapping_merges_json("(\\w+\\s?)*$")).value());
  std::string text;
  while (text.size() < 32 * 1024) text += "abcdabcdabcdabcdabcd abcd!";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t->encode(text);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_EQ(t->decode(ids), text);
}

TEST(BpeTokenizer, AFilePastTheLimitIsRefusedBeforeItIsRead) {
  const std::string path = ::testing::TempDir() + "/huge_tokenizer.json";
  {
    std::ofstream out(path);
    out << "{";
  }
  std::filesystem::resize_file(path, BpeTokenizer::kMaxFileBytes + 1);  // sparse: nothing is written
  const auto start = std::chrono::steady_clock::now();
  auto t = BpeTokenizer::load(path);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("beyond the limit"), std::string::npos) << t.status().message();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cohort::text
