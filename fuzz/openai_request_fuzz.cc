// libFuzzer: OpenAI request bodies as the inference server reads them
// (infer/serve/openai_api.h, parse_completion_request), for /v1/completions and
// /v1/chat/completions, with a byte tokenizer and with or without a model
// chat template. The first input byte picks the endpoint and the template;
// the rest is the body. Whatever the body, the parser returns a request or
// an OpenAI error (400 naming the field), never throws or crashes, and an
// accepted request stays within the context and the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "infer/serve/openai_api.h"

namespace {

namespace infer = cohort::infer;
namespace text = cohort::text;

// Bytes as ids, without the tokenizer library (its own fuzz target covers it).
class Bytes final : public text::Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);  // bytes 0..255, not signed chars
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 0 && id < 256) out += char(id);
    }
    return out;
  }
  int vocab_size() const override { return 256; }
  std::optional<int32_t> token_id(const std::string& token) const override {
    if (token.size() == 1) return int32_t(uint8_t(token[0]));
    return std::nullopt;
  }
  std::unique_ptr<text::Tokenizer> clone() const override { return std::make_unique<Bytes>(); }
};

std::shared_ptr<const cohort::hf::ChatFormat> template_format() {
  static const std::shared_ptr<const cohort::hf::ChatFormat> format = [] {
    auto made = cohort::hf::ChatFormat::create(
        "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
        "<s>", "</s>", "the fuzz target's template");
    if (!made) std::abort();
    return *made;
  }();
  return format;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  infer::ApiDefaults defaults;
  defaults.model_name = "fuzz";
  defaults.max_tokens = 16;
  defaults.context = 4096;
  defaults.vocab_size = 256;
  if (mode & 2) defaults.chat = template_format();
  Bytes bytes;
  text::Tokenizer* tokenizer = (mode & 4) ? nullptr : &bytes;
  infer::CompletionRequest request;
  auto error = infer::parse_completion_request(body, mode & 1, defaults, tokenizer, &request);
  if (error) {
    if (error->status < 400 || error->status > 599) std::abort();
    (void)infer::error_body(*error);
    return 0;
  }
  if (request.max_tokens < 0 || request.prompts.empty() || request.choices() > defaults.max_choices) std::abort();
  for (const auto& prompt : request.prompts) {
    if (prompt.empty() || int64_t(prompt.size()) + request.max_tokens > defaults.context) std::abort();
    for (int32_t id : prompt) {
      if (id < 0 || id >= defaults.vocab_size) std::abort();
    }
  }
  if (!request.constraint.empty() && !request.grammar) std::abort();
  return 0;
}
