// Byte tokenizer, the tokenizer.json front end, UTF-8 helpers, and finding a
// Hugging Face folder's tokenizer.
#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "text/tokenizer_pipeline.h"

namespace cohort::text {

std::vector<int32_t> Tokenizer::encode_with_special_tokens(const std::string& text) {
  std::vector<int32_t> out = prefix_tokens();
  const std::vector<int32_t> body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  const std::vector<int32_t> suffix = suffix_tokens();
  out.insert(out.end(), suffix.begin(), suffix.end());
  return out;
}

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) out.push_back(static_cast<char>(id));
  }
  return out;
}

std::optional<int32_t> ByteTokenizer::token_id(const std::string& token) const {
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return std::nullopt;
}

const std::vector<uint32_t>& byte_to_unicode() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    std::vector<bool> printable(256, false);
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xa1; b <= 0xac; ++b) printable[b] = true;
    for (int b = 0xae; b <= 0xff; ++b) printable[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable[b] ? b : next++;
    return t;
  }();
  return table;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::string utf8_lossy(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      out.push_back(char(c));
      ++i;
      continue;
    }
    // Length and the allowed range of the second byte (Unicode table 3-7).
    int len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) len = 2;
    else if (c >= 0xe0 && c <= 0xef) len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    size_t k = 1;
    while (len && int(k) < len && i + k < n) {
      const unsigned char d = b[i + k];
      const bool ok = k == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xbf);
      if (!ok) break;
      ++k;
    }
    if (len && int(k) == len) {
      out.append(s, i, k);
    } else {
      out += "\xef\xbf\xbd";  // one replacement per maximal invalid subpart
    }
    i += len ? k : 1;
  }
  return out;
}

struct BpeTokenizer::Cache {
  std::unordered_map<std::string, std::vector<int32_t>> words;
};

BpeTokenizer::BpeTokenizer(std::shared_ptr<const TokenizerPipeline> pipeline)
    : pipeline_(std::move(pipeline)), cache_(std::make_unique<Cache>()) {}
BpeTokenizer::~BpeTokenizer() = default;

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json(const std::string& json_text) {
  COHORT_ASSIGN_OR_RETURN(auto pipeline, TokenizerPipeline::parse(json_text));
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(pipeline)));
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxFileBytes)
    return invalid_argument(path + " is " + std::to_string(size) + " bytes, beyond the limit of " +
                            std::to_string(kMaxFileBytes) + " for a tokenizer.json");
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = from_json(ss.str());
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) {
  std::vector<int32_t> out;
  pipeline_->encode(text, &out, &cache_->words);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const { return pipeline_->decode(ids); }
std::string BpeTokenizer::token_bytes(int32_t id) const { return pipeline_->token_bytes(id); }

std::string vocabulary_piece_bytes(const std::string& piece) {
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    char* end = nullptr;
    const long v = std::strtol(piece.substr(3, 2).c_str(), &end, 16);
    if (end && *end == 0) return std::string(1, static_cast<char>(v));
  }
  static const std::unordered_map<uint32_t, char> table = [] {
    std::unordered_map<uint32_t, char> t;
    for (int b = 0; b < 256; ++b) t[byte_to_unicode()[size_t(b)]] = static_cast<char>(b);
    return t;
  }();
  // Byte-level: every character one of the 256 stand-ins.
  std::string bytes;
  bool byte_level = true;
  for (size_t k = 0; k < piece.size() && byte_level;) {
    const auto c = static_cast<unsigned char>(piece[k]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + size_t(len) > piece.size()) break;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(piece[k + size_t(m)]) & 0x3f);
    k += size_t(len);
    auto it = table.find(cp);
    if (it == table.end()) byte_level = false;
    else bytes.push_back(it->second);
  }
  if (byte_level) return bytes;
  std::string out;
  for (size_t k = 0; k < piece.size();) {
    if (piece.compare(k, 3, "\xe2\x96\x81") == 0) out.push_back(' '), k += 3;  // U+2581
    else out.push_back(piece[k++]);
  }
  return out;
}
int BpeTokenizer::vocab_size() const { return pipeline_->vocab_size; }
bool BpeTokenizer::is_special(int32_t id) const { return pipeline_->is_special(id); }
std::optional<int32_t> BpeTokenizer::token_id(const std::string& token) const { return pipeline_->token_id(token); }
std::vector<int32_t> BpeTokenizer::prefix_tokens() const { return pipeline_->prefix; }
std::vector<int32_t> BpeTokenizer::suffix_tokens() const { return pipeline_->suffix; }
std::unique_ptr<Tokenizer> BpeTokenizer::clone() const {
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(pipeline_));
}

}  // namespace cohort::text
