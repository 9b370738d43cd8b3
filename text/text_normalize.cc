// Normalizers of tokenizer.json: Unicode forms through utf8proc, and the
// string rewrites (Prepend, Replace, Lowercase, Strip, StripAccents) that
// Llama 2 / Mistral-style files chain. HF normalizes each span between added
// tokens separately; the pipeline calls these per span.
#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_pipeline.h"

namespace cohort::text {
namespace {

using nlohmann::json;

// Text that is not valid UTF-8 is left as it is (utf8proc refuses it; HF
// never sees it, since Rust strings are valid by construction).
std::string utf8proc_apply(const std::string& text, int options) {
  if (text.empty()) return text;
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) return text;
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// Code points of valid UTF-8 text, or nullopt.
std::optional<std::vector<int32_t>> code_points(const std::string& text) {
  std::vector<int32_t> out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(p, left, &cp);
    if (n < 0) return std::nullopt;
    out.push_back(cp);
    p += n;
    left -= n;
  }
  return out;
}

std::string from_code_points(const std::vector<int32_t>& cps) {
  std::string out;
  for (int32_t cp : cps) append_utf8(static_cast<uint32_t>(cp), &out);
  return out;
}

bool is_white_space(int32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

Normalizer map_code_points(std::function<void(std::vector<int32_t>&)> f) {
  return [f](const std::string& text) {
    auto cps = code_points(text);
    if (!cps) return text;
    f(*cps);
    return from_code_points(*cps);
  };
}

Result<Normalizer> one_normalizer(const json& j) {
  const std::string type = j.value("type", "");
  if (type == "NFC") return Normalizer([](const std::string& t) { return utf8proc_apply(t, UTF8PROC_COMPOSE); });
  if (type == "NFD") return Normalizer([](const std::string& t) { return utf8proc_apply(t, UTF8PROC_DECOMPOSE); });
  if (type == "NFKC")
    return Normalizer([](const std::string& t) { return utf8proc_apply(t, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); });
  if (type == "NFKD")
    return Normalizer([](const std::string& t) { return utf8proc_apply(t, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); });
  if (type == "Lowercase")
    return map_code_points([](std::vector<int32_t>& cps) {
      for (auto& cp : cps) cp = utf8proc_tolower(cp);
    });
  if (type == "StripAccents")
    return map_code_points([](std::vector<int32_t>& cps) {
      std::erase_if(cps, [](int32_t cp) { return utf8proc_category(cp) == UTF8PROC_CATEGORY_MN; });
    });
  if (type == "Strip") {
    const bool left = j.value("strip_left", true), right = j.value("strip_right", true);
    return map_code_points([=](std::vector<int32_t>& cps) {
      size_t b = 0, e = cps.size();
      while (left && b < e && is_white_space(cps[b])) ++b;
      while (right && e > b && is_white_space(cps[e - 1])) --e;
      cps = std::vector<int32_t>(cps.begin() + b, cps.begin() + e);
    });
  }
  if (type == "Prepend") {
    const std::string prepend = j.at("prepend").get<std::string>();
    return Normalizer([prepend](const std::string& t) { return t.empty() ? t : prepend + t; });
  }
  if (type == "Replace") {
    const json& pattern = j.at("pattern");
    std::shared_ptr<const Regex> re;
    if (pattern.contains("Regex")) { COHORT_ASSIGN_OR_RETURN(re, Regex::compile(pattern["Regex"].get<std::string>())); }
    else re = Regex::literal(pattern.at("String").get<std::string>());
    const std::string content = j.at("content").get<std::string>();
    return Normalizer([re, content](const std::string& t) {
      std::string out;
      size_t last = 0;
      MatchBudget budget(t.size());
      for (auto [b, e] : re->find_all(t, budget)) {
        out.append(t, last, b - last);
        out += content;
        last = e;
      }
      out.append(t, last, std::string::npos);
      return out;
    });
  }
  return invalid_argument("normalizer type \"" + type + "\" is not supported");
}

}  // namespace

Result<Normalizer> parse_normalizer(const json& j) {
  if (j.is_null()) return Normalizer([](const std::string& t) { return t; });
  if (j.value("type", "") == "Sequence") {
    std::vector<Normalizer> steps;
    for (const json& n : j.at("normalizers")) {
      COHORT_ASSIGN_OR_RETURN(Normalizer step, parse_normalizer(n));
      steps.push_back(std::move(step));
    }
    return Normalizer([steps](const std::string& t) {
      std::string out = t;
      for (const auto& s : steps) out = s(out);
      return out;
    });
  }
  return one_normalizer(j);
}

}  // namespace cohort::text
