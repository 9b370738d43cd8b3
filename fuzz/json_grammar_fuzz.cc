// libFuzzer: structured output from a request's schema (text/json_grammar.h,
// text/token_constraint.h). The input is a JSON schema, a NUL, then bytes a
// model might write. Whatever the schema, compiling returns a grammar or an
// error naming the keyword; the matcher takes or refuses each byte without
// crashing or growing without bound; a document it calls complete is JSON;
// token masks over a small vocabulary agree with feeding each token's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "text/json_grammar.h"
#include "text/token_constraint.h"

namespace {

namespace text = cohort::text;

// Single bytes and a few multi-byte tokens, as a BPE vocabulary has them.
class SmallVocabulary final : public text::Tokenizer {
 public:
  SmallVocabulary() {
    for (int b = 0; b < 256; ++b) pieces_.push_back(std::string(1, char(b)));
    for (const char* p : {"{\"", "\":", "\", \"", "true", "null", "12", "\"}", "[]", "\\u00", "  "}) pieces_.push_back(p);
  }
  std::vector<int32_t> encode(const std::string&) override { return {}; }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += pieces_[size_t(id)];
    return out;
  }
  int vocab_size() const override { return int(pieces_.size()); }
  std::optional<int32_t> token_id(const std::string&) const override { return std::nullopt; }
  std::string token_bytes(int32_t id) const override { return pieces_[size_t(id)]; }
  std::unique_ptr<text::Tokenizer> clone() const override { return std::make_unique<SmallVocabulary>(); }

 private:
  std::vector<std::string> pieces_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string schema_text = input.substr(0, nul);
  const std::string bytes = nul == std::string::npos ? "" : input.substr(nul + 1);
  const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  auto grammar = text::JsonGrammar::compile(schema);
  if (!grammar.is_ok()) {
    if (grammar.status().message().rfind("schema", 0) != 0 && grammar.status().message().find("too large") == std::string::npos) {
      std::abort();  // an error that does not say where
    }
    return 0;
  }
  text::JsonMatcher matcher(*grammar);
  std::string taken;
  for (unsigned char c : bytes) {
    if (matcher.feed(c)) taken.push_back(char(c));
  }
  if (matcher.complete()) {
    const auto doc = nlohmann::json::parse(taken, nullptr, /*allow_exceptions=*/false);
    // Numbers past a double's range are JSON a parser refuses; nothing else is.
    if (doc.is_discarded() && taken.find_first_of("eE") == std::string::npos) std::abort();
  }
  static SmallVocabulary vocabulary_source;
  static const auto vocabulary = text::TokenVocabulary::build(vocabulary_source, {0});
  text::TokenConstraint constraint(*grammar, vocabulary);
  for (unsigned char c : bytes.substr(0, 64)) {
    const std::vector<uint8_t> mask = constraint.allowed();
    if (!mask[c] && c != 0) {
      if (constraint.advance(c)) std::abort();  // refused by the mask, taken by advance
      continue;
    }
    if (c != 0 && !constraint.advance(c)) std::abort();  // allowed by the mask, refused by advance
    if (constraint.complete()) break;
  }
  return 0;
}
