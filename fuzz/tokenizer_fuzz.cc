// libFuzzer: tokenizer.json (BPE: vocab, merges, added tokens, pre- and
// post-processors), then an encode/decode of a fixed text and of the input's
// tail (text/tokenizer.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = cohort::text::BpeTokenizer::from_json(text);
  if (!tokenizer) return 0;
  auto ids = (*tokenizer)->encode("Hello, world! 123 éà 中文 <|im_start|>");
  (void)(*tokenizer)->decode(ids);
  auto tail = (*tokenizer)->encode(text.substr(text.size() > 64 ? text.size() - 64 : 0));
  (void)(*tokenizer)->decode(tail);
  (void)(*tokenizer)->decode({-1, 0, 1, 1 << 30});
  return 0;
}
