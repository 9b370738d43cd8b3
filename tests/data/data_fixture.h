// Shared by the data and training-data tests: a scratch folder, a small
// byte-level BPE tokenizer.json with ChatML special tokens, and a Hugging
// Face-style tokenizer folder (tokenizer.json + tokenizer_config.json with
// a chat template).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace cohort::testing {

namespace fs = std::filesystem;

inline fs::path data_scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("cohort_data_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 256 byte tokens, merges spelling "hello" and " world", and three special
// tokens: <|endoftext|> 268, <|im_start|> 269, <|im_end|> 270. With
// `llama_bos`, a TemplateProcessing post-processor puts <|begin_of_text|>
// (271) first, as Llama 3's does.
inline std::string test_tokenizer_json(bool llama_bos = false) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    text::append_utf8(text::byte_to_unicode()[b], &s);
    vocab[s] = b;
  }
  const char* merged[] = {"he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", "Ġh", "Ġhe", "Ġhello"};
  for (int i = 0; i < 12; ++i) vocab[merged[i]] = 256 + i;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab},
                {"merges", {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "Ġ h", "Ġh e", "Ġhe llo"}}};
  j["added_tokens"] = {{{"id", 268}, {"content", "<|endoftext|>"}, {"special", true}},
                       {{"id", 269}, {"content", "<|im_start|>"}, {"special", true}},
                       {{"id", 270}, {"content", "<|im_end|>"}, {"special", true}}};
  if (llama_bos) {
    j["added_tokens"].push_back({{"id", 271}, {"content", "<|begin_of_text|>"}, {"special", true}});
    j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [271]}}})");
  }
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
         {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j.dump();
}

inline std::string read_text_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string qwen3_template() { return read_text_file(fs::path(COHORT_SOURCE_DIR) / "tests/data/templates/qwen3.jinja"); }

// tokenizer.json + tokenizer_config.json (eos <|endoftext|>, the Qwen3 chat template) in `dir`.
inline void write_tokenizer_folder(const fs::path& dir, bool llama_bos = false) {
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << test_tokenizer_json(llama_bos);
  nlohmann::json config = {{"eos_token", "<|endoftext|>"}, {"chat_template", qwen3_template()}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(1);
}

}  // namespace cohort::testing
