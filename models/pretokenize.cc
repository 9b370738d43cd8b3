// Hand-written equivalents of the byte-level BPE split regexes:
//   Qwen2 / Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//                    | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//                    (Qwen2 uses \p{N} where Llama 3 has \p{N}{1,3})
//   GPT-2:           's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Alternatives are tried in order at each position, with the backtracking the
// regex engine would do worked out by hand for each.
#include <cstdint>
#include <string>
#include <vector>

#include "models/tokenizer.h"

namespace cohort::models {
namespace {

struct Range {
  uint32_t lo, hi;
};

bool in(const Range* ranges, size_t n, uint32_t cp) {
  for (size_t i = 0; i < n; ++i) {
    if (cp >= ranges[i].lo && cp <= ranges[i].hi) return true;
  }
  return false;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

// \p{N}: ASCII digits plus the common non-ASCII digit and number blocks.
bool is_number(uint32_t cp) {
  static const Range kNumbers[] = {
      {0x30, 0x39},     {0xb2, 0xb3},     {0xb9, 0xb9},     {0xbc, 0xbe},     {0x660, 0x669},
      {0x6f0, 0x6f9},   {0x966, 0x96f},   {0x9e6, 0x9ef},   {0xe50, 0xe59},   {0x2070, 0x2070},
      {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189}, {0x2460, 0x249b}, {0x24ea, 0x24ff},
      {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xff10, 0xff19}};
  return in(kNumbers, sizeof(kNumbers) / sizeof(Range), cp);
}

// \p{L}: ASCII letters; beyond ASCII everything that is not a known
// punctuation, symbol, mark, space or number block.
bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (cp == 0xaa || cp == 0xb5 || cp == 0xba) return true;
  static const Range kNotLetters[] = {
      {0x80, 0xbf},     {0xd7, 0xd7},       {0xf7, 0xf7},       {0x2c2, 0x2c5},
      {0x2d2, 0x2df},   {0x300, 0x36f},     {0x37e, 0x37e},     {0x387, 0x387},
      {0x483, 0x489},   {0x55a, 0x55f},     {0x589, 0x58a},     {0x591, 0x5c7},
      {0x600, 0x61f},   {0x64b, 0x66d},     {0x6d4, 0x6d4},     {0x900, 0x903},
      {0x93a, 0x94f},   {0x964, 0x970},     {0xe31, 0xe31},     {0xe34, 0xe3f},
      {0xe47, 0xe5b},   {0x2000, 0x206f},   {0x2070, 0x209f},   {0x20a0, 0x20ff},
      {0x2100, 0x2101}, {0x2103, 0x2106},   {0x2108, 0x2109},   {0x2114, 0x2118},
      {0x211e, 0x2123}, {0x2125, 0x2125},   {0x2127, 0x2127},   {0x2129, 0x2129},
      {0x212e, 0x212e}, {0x213a, 0x213b},   {0x2140, 0x2144},   {0x214a, 0x214d},
      {0x214f, 0x2bff}, {0x2e00, 0x2e7f},   {0x3000, 0x3004},   {0x3007, 0x303b},
      {0x303d, 0x303f}, {0x3099, 0x309c},   {0x30a0, 0x30a0},   {0x30fb, 0x30fb},
      {0x3200, 0x33ff}, {0x4dc0, 0x4dff},   {0xd800, 0xf8ff},   {0xfe00, 0xfe6f},
      {0xfeff, 0xfeff}, {0xff00, 0xff20},   {0xff3b, 0xff40},   {0xff5b, 0xff65},
      {0xffe0, 0xffff}, {0x1d000, 0x1d24f}, {0x1f000, 0x1faff}, {0xe0000, 0x10ffff}};
  // The letterlike block U+2100.. is listed piecewise so its letters stay letters.
  if (in(kNotLetters, sizeof(kNotLetters) / sizeof(Range), cp)) return false;
  return !is_number(cp) && !is_space(cp);
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {  // invalid byte: keep it as U+FFFD-like raw value
      out.push_back(0xfffd);
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += len;
  }
  return out;
}

class Splitter {
 public:
  Splitter(const std::string& text, PretokenizerKind kind)
      : text_(text), kind_(kind), cps_(decode_utf8(text)) {
    // Byte offset of each code point, so pieces are exact substrings (invalid bytes included).
    size_t b = 0;
    for (size_t i = 0; i < cps_.size(); ++i) {
      offsets_.push_back(b);
      const auto c = static_cast<unsigned char>(text[b]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      if (cps_[i] == 0xfffd && len > 1 && (b + len > text.size())) len = 1;
      b += len;
    }
    offsets_.push_back(text.size());
  }

  std::vector<std::string> split() {
    std::vector<std::string> pieces;
    size_t i = 0;
    while (i < cps_.size()) {
      const size_t end = match(i);
      pieces.push_back(text_.substr(offsets_[i], offsets_[end] - offsets_[i]));
      i = end;
    }
    return pieces;
  }

 private:
  uint32_t at(size_t i) const { return i < cps_.size() ? cps_[i] : 0; }
  bool letter(size_t i) const { return i < cps_.size() && is_letter(cps_[i]); }
  bool number(size_t i) const { return i < cps_.size() && is_number(cps_[i]); }
  bool space(size_t i) const { return i < cps_.size() && is_space(cps_[i]); }
  bool newline(size_t i) const { return at(i) == '\r' || at(i) == '\n'; }
  bool other(size_t i) const { return i < cps_.size() && !space(i) && !letter(i) && !number(i); }
  size_t run(size_t i, bool (Splitter::*pred)(size_t) const) const {
    while ((this->*pred)(i)) ++i;
    return i;
  }

  size_t contraction(size_t i) const {
    if (at(i) != '\'') return 0;
    auto lower = [&](size_t k) {
      uint32_t c = at(k);
      if (kind_ != PretokenizerKind::kGpt2 && c >= 'A' && c <= 'Z') c += 32;
      return c;
    };
    const uint32_t a = lower(i + 1), b = lower(i + 2);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  // Whitespace alternatives shared by all kinds: \s+(?!\S) then \s+.
  size_t whitespace(size_t i) const {
    const size_t e = run(i, &Splitter::space);
    if (e == cps_.size() || e - 1 == i) return e;  // (?!\S) holds at the end; else plain \s+
    return e - 1;                                  // leave the last space to prefix the next word
  }

  size_t match(size_t i) const {
    if (size_t e = contraction(i)) return e;
    if (kind_ == PretokenizerKind::kGpt2) return match_gpt2(i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (letter(i)) return run(i, &Splitter::letter);
    if (!newline(i) && !number(i) && letter(i + 1)) return run(i + 1, &Splitter::letter);
    // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
    if (number(i)) {
      const size_t limit = kind_ == PretokenizerKind::kLlama3 ? 3 : 1;
      size_t e = i;
      while (e - i < limit && number(e)) ++e;
      return e;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t p = at(i) == ' ' ? i + 1 : i;
    if (other(p)) return run(run(p, &Splitter::other), &Splitter::newline);
    // \s*[\r\n]+ : up to and including the last newline of the whitespace run.
    const size_t e = run(i, &Splitter::space);
    for (size_t k = e; k > i; --k) {
      if (newline(k - 1)) return k;
    }
    return whitespace(i);
  }

  size_t match_gpt2(size_t i) const {
    const size_t p = at(i) == ' ' ? i + 1 : i;
    if (letter(p)) return run(p, &Splitter::letter);
    if (number(p)) return run(p, &Splitter::number);
    if (other(p)) return run(p, &Splitter::other);
    return whitespace(i);
  }

  const std::string& text_;
  PretokenizerKind kind_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;
};

}  // namespace

std::vector<std::string> pretokenize(const std::string& text, PretokenizerKind kind) {
  return Splitter(text, kind).split();
}

}  // namespace cohort::models
