// Pre-tokenizers of tokenizer.json, and the regex they split with.
//
// Split patterns are the file's own strings, compiled by PCRE2 with UTF and
// UCP so that \p{L}, \p{N}, \s and \w mean what they mean in Oniguruma (the
// engine HF's tokenizers use). The one difference that matters, U+0085 in
// \s, is patched into the pattern. Invalid UTF-8 in the input is matched
// byte by byte (PCRE2_MATCH_INVALID_UTF) so that every byte stays in some
// piece and byte-level BPE still round-trips it.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <chrono>
#include <pcre2.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_pipeline.h"

namespace cohort::text {
namespace {

using nlohmann::json;

// \s -> [\s\x{85}] outside classes, \s\x{85} inside; \S -> [^\s\x{85}].
std::string widen_spaces(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (c == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else out += p.substr(i, 2);
      ++i;
      continue;
    }
    if (p[i] == '[' && !in_class) in_class = true;
    else if (p[i] == ']' && in_class) in_class = false;
    out += p[i];
  }
  return out;
}

size_t utf8_length(unsigned char c) {
  return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<Behavior> parse_behavior(const std::string& s) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  return invalid_argument("pre_tokenizer Split: unknown behavior \"" + s + "\"");
}

// HF's NormalizedString::split: cut `piece` at the regex's matches.
void split_piece(const Piece& piece, const Regex& re, Behavior behavior, bool invert, MatchBudget& budget,
                 std::vector<Piece>* out) {
  // (begin, end, is_match) spans covering the whole text.
  std::vector<std::tuple<size_t, size_t, bool>> spans;
  size_t last = 0;
  for (auto [b, e] : re.find_all(piece.text, budget)) {
    if (b > last) spans.emplace_back(last, b, invert);
    spans.emplace_back(b, e, !invert);
    last = e;
  }
  if (last < piece.text.size()) spans.emplace_back(last, piece.text.size(), invert);
  // The folds of HF's SplitDelimiterBehavior, span by span.
  std::vector<std::pair<size_t, size_t>> cuts;
  bool previous_match = false;
  for (auto [b, e, is_match] : spans) {
    bool extend = false;
    switch (behavior) {
      case Behavior::kRemoved:
        if (is_match) continue;
        break;
      case Behavior::kIsolated: break;
      case Behavior::kMergedWithPrevious: extend = is_match && !previous_match; break;
      case Behavior::kMergedWithNext: extend = previous_match; break;
      case Behavior::kContiguous: extend = is_match == previous_match; break;
    }
    if (extend && !cuts.empty()) cuts.back().second = e;
    else cuts.emplace_back(b, e);
    previous_match = is_match;
  }
  for (auto [b, e] : cuts) {
    if (e > b) out->push_back(Piece{piece.text.substr(b, e - b), piece.at_start && b == 0});
  }
}

PreTokenizer split_with(std::shared_ptr<const Regex> re, Behavior behavior, bool invert) {
  return [re, behavior, invert](std::vector<Piece>& pieces, MatchBudget& budget) {
    std::vector<Piece> out;
    for (const Piece& p : pieces) split_piece(p, *re, behavior, invert, budget, &out);
    pieces.swap(out);
  };
}

const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void map_bytes(std::string* text) {
  std::string mapped;
  for (char c : *text) append_utf8(byte_to_unicode()[static_cast<unsigned char>(c)], &mapped);
  text->swap(mapped);
}

Result<PreTokenizer> byte_level(const json& j) {
  const bool prefix_space = j.value("add_prefix_space", true);
  const bool use_regex = j.value("use_regex", true);
  std::shared_ptr<const Regex> re;
  if (use_regex) { COHORT_ASSIGN_OR_RETURN(re, Regex::compile(kGpt2Pattern)); }
  return PreTokenizer([=](std::vector<Piece>& pieces, MatchBudget& budget) {
    if (prefix_space) {
      for (Piece& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
    }
    if (re) split_with(re, Behavior::kIsolated, false)(pieces, budget);
    for (Piece& p : pieces) map_bytes(&p.text);
  });
}

Result<PreTokenizer> metaspace(const json& j) {
  const std::string replacement = j.value("replacement", "\xe2\x96\x81");
  std::string scheme = j.value("prepend_scheme", "");
  if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
  const bool split = j.value("split", true);
  auto re = Regex::literal(replacement);
  return PreTokenizer([=](std::vector<Piece>& pieces, MatchBudget& budget) {
    for (Piece& p : pieces) {
      std::string t;
      for (char c : p.text) t += c == ' ' ? replacement : std::string(1, c);
      const bool starts = t.compare(0, replacement.size(), replacement) == 0;
      if (!starts && (scheme == "always" || (scheme == "first" && p.at_start))) t = replacement + t;
      p.text.swap(t);
    }
    if (split) split_with(re, Behavior::kMergedWithNext, false)(pieces, budget);
  });
}

Result<PreTokenizer> one_pre_tokenizer(const json& j) {
  const std::string type = j.value("type", "");
  if (type == "Split") {
    const json& pattern = j.at("pattern");
    std::shared_ptr<const Regex> re;
    if (pattern.contains("Regex")) {
      COHORT_ASSIGN_OR_RETURN(re, Regex::compile(pattern["Regex"].get<std::string>()));
    } else {
      re = Regex::literal(pattern.at("String").get<std::string>());
    }
    COHORT_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j.value("behavior", "Isolated")));
    return split_with(re, b, j.value("invert", false));
  }
  if (type == "ByteLevel") return byte_level(j);
  if (type == "Metaspace") return metaspace(j);
  if (type == "Digits") {
    COHORT_ASSIGN_OR_RETURN(auto re, Regex::compile(j.value("individual_digits", false) ? "\\p{Nd}" : "\\p{Nd}+"));
    return split_with(re, Behavior::kIsolated, false);
  }
  if (type == "Whitespace") {
    COHORT_ASSIGN_OR_RETURN(auto re, Regex::compile("\\w+|[^\\w\\s]+"));
    return split_with(re, Behavior::kRemoved, true);  // what the pattern does not match goes
  }
  if (type == "WhitespaceSplit") {
    COHORT_ASSIGN_OR_RETURN(auto re, Regex::compile("\\s+"));
    return split_with(re, Behavior::kRemoved, false);
  }
  if (type == "Punctuation") {
    COHORT_ASSIGN_OR_RETURN(auto re, Regex::compile("\\p{P}"));
    COHORT_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j.value("behavior", "Isolated")));
    return split_with(re, b, false);
  }
  return invalid_argument("pre_tokenizer type \"" + type + "\" is not supported");
}

}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(const std::string& hf_pattern) {
  const std::string pattern = widen_spaces(hf_pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                   &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("regex \"" + hf_pattern + "\" at offset " + std::to_string(offset) +
                            ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  std::shared_ptr<Regex> re(new Regex());
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

std::shared_ptr<const Regex> Regex::literal(const std::string& text) {
  std::shared_ptr<Regex> re(new Regex());
  re->literal_ = text;
  return re;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(const std::string& text, MatchBudget& budget) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (!code_) {
    if (literal_.empty()) return out;
    for (size_t at = text.find(literal_); at != std::string::npos;
         at = text.find(literal_, at + literal_.size()))
      out.emplace_back(at, at + literal_.size());
    return out;
  }
  if (budget.spent) return out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  pcre2_match_context* limits = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(limits, kMatchLimit);
  pcre2_set_depth_limit(limits, kDepthLimit);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  for (size_t matches = 0; start <= text.size(); ++matches) {
    if (matches % 64 == 0 && std::chrono::steady_clock::now() > budget.deadline) {
      budget.spent = true;
      break;
    }
    const int rc = pcre2_match(code, subject, text.size(), start, 0, md, limits);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {  // a limit (or another error): the rest stays one non-match span
      budget.spent = true;
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty match: step over one character
      start = ov[0] + (ov[0] < text.size() ? utf8_length(static_cast<unsigned char>(text[ov[0]])) : 1);
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    start = ov[1];
  }
  pcre2_match_data_free(md);
  pcre2_match_context_free(limits);
  return out;
}

Result<PreTokenizer> parse_pre_tokenizer(const json& j) {
  if (j.is_null()) return PreTokenizer([](std::vector<Piece>&, MatchBudget&) {});
  if (j.value("type", "") == "Sequence") {
    std::vector<PreTokenizer> steps;
    for (const json& p : j.at("pretokenizers")) {
      COHORT_ASSIGN_OR_RETURN(PreTokenizer step, parse_pre_tokenizer(p));
      steps.push_back(std::move(step));
    }
    return PreTokenizer([steps](std::vector<Piece>& pieces, MatchBudget& budget) {
      for (const auto& s : steps) s(pieces, budget);
    });
  }
  return one_pre_tokenizer(j);
}

}  // namespace cohort::text
