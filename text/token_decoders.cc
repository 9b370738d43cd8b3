// Decoders of tokenizer.json, over the list of token strings as HF's
// decode_chain runs them: ByteLevel (stand-in characters back to bytes),
// Metaspace, ByteFallback (<0xXX> runs to bytes), Fuse, Replace, Strip.
// The pipeline joins what is left and makes it valid UTF-8 (utf8_lossy).
#include <map>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_pipeline.h"

namespace cohort::text {
namespace {

using nlohmann::json;
using Tokens = std::vector<std::string>;

// Decodes one UTF-8 code point at `k` (advancing k); -1 on a bad sequence.
int64_t next_code_point(const std::string& s, size_t& k) {
  const auto c = static_cast<unsigned char>(s[k]);
  const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || k + len > s.size()) {
    ++k;
    return -1;
  }
  int64_t cp = len == 1 ? c : c & (0x7f >> len);
  for (int m = 1; m < len; ++m) cp = (cp << 6) | (static_cast<unsigned char>(s[k + m]) & 0x3f);
  k += len;
  return cp;
}

void decode_byte_level(Tokens& tokens) {
  static const std::map<int64_t, char> table = [] {
    std::map<int64_t, char> t;
    for (int b = 0; b < 256; ++b) t[byte_to_unicode()[b]] = static_cast<char>(b);
    return t;
  }();
  std::string bytes;
  for (const std::string& tok : tokens) {
    std::string mapped;
    bool all = true;
    for (size_t k = 0; k < tok.size() && all;) {
      auto it = table.find(next_code_point(tok, k));
      if (it == table.end()) all = false;
      else mapped.push_back(it->second);
    }
    bytes += all ? mapped : tok;  // a token with other characters stays as written
  }
  tokens.assign(1, utf8_lossy(bytes));
}

void byte_fallback(Tokens& tokens) {
  Tokens out;
  std::string pending;
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    if (utf8_lossy(pending) == pending) out.push_back(pending);
    else
      for (size_t i = 0; i < pending_count; ++i) out.push_back("\xef\xbf\xbd");
    pending.clear();
    pending_count = 0;
  };
  for (const std::string& t : tokens) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
      char* end = nullptr;
      const long v = std::strtol(t.substr(3, 2).c_str(), &end, 16);
      if (end && *end == 0) {
        pending.push_back(static_cast<char>(v));
        ++pending_count;
        continue;
      }
    }
    flush();
    out.push_back(t);
  }
  flush();
  tokens.swap(out);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t last = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, last)) {
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
  }
  out.append(s, last, std::string::npos);
  return out;
}

Result<Decoder> one_decoder(const json& j) {
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return Decoder(decode_byte_level);
  if (type == "ByteFallback") return Decoder(byte_fallback);
  if (type == "Fuse") {
    return Decoder([](Tokens& t) {
      std::string all;
      for (const auto& s : t) all += s;
      t.assign(1, all);
    });
  }
  if (type == "Replace") {
    const json& pattern = j.at("pattern");
    if (!pattern.contains("String")) return invalid_argument("decoder Replace: only String patterns are supported");
    const std::string from = pattern["String"].get<std::string>(), to = j.at("content").get<std::string>();
    return Decoder([=](Tokens& t) {
      for (auto& s : t) s = replace_all(s, from, to);
    });
  }
  if (type == "Strip") {
    const std::string content = j.at("content").get<std::string>();
    // Counts of `content` to strip; checked before converting (a float
    // beyond size_t is undefined behaviour in nlohmann's conversion).
    size_t counts[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      const char* key = i == 0 ? "start" : "stop";
      if (!j.contains(key)) continue;
      const json& v = j[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t(1) << 20))
        return invalid_argument(std::string("decoder Strip: ") + key + " must be a count, got " + v.dump());
      counts[i] = size_t(v.get<int64_t>());
    }
    const size_t start = counts[0], stop = counts[1];
    return Decoder([=](Tokens& t) {
      for (auto& s : t) {
        for (size_t i = 0; i < start && s.compare(0, content.size(), content) == 0; ++i) s.erase(0, content.size());
        for (size_t i = 0; i < stop && s.size() >= content.size() &&
                           s.compare(s.size() - content.size(), content.size(), content) == 0; ++i)
          s.resize(s.size() - content.size());
      }
    });
  }
  if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", "\xe2\x96\x81");
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    // As HF's decode_chain: the replacement becomes a space, except that in
    // the first token (unless the scheme is "never") every replacement is
    // dropped, not only a leading one: with split = false one token can
    // span several words, and HF then joins them.
    return Decoder([=](Tokens& t) {
      for (size_t i = 0; i < t.size(); ++i) {
        t[i] = replace_all(t[i], replacement, i == 0 && scheme != "never" ? "" : " ");
      }
    });
  }
  return invalid_argument("decoder type \"" + type + "\" is not supported");
}

}  // namespace

Result<Decoder> parse_decoder(const json& j) {
  if (j.is_null()) {
    // HF joins tokens with spaces when a file has no decoder.
    return Decoder([](Tokens& t) {
      std::string all;
      for (size_t i = 0; i < t.size(); ++i) all += (i ? " " : "") + t[i];
      t.assign(1, all);
    });
  }
  if (j.value("type", "") == "Sequence") {
    std::vector<Decoder> steps;
    for (const json& d : j.at("decoders")) {
      COHORT_ASSIGN_OR_RETURN(Decoder step, parse_decoder(d));
      steps.push_back(std::move(step));
    }
    return Decoder([steps](Tokens& t) {
      for (const auto& s : steps) s(t);
    });
  }
  return one_decoder(j);
}

}  // namespace cohort::text
