// Byte tokenizer and HF byte-level BPE (tokenizer.json).
#include "models/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cohort::models {

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) {
  std::vector<int32_t> out;
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

namespace {

using nlohmann::json;

// Finds the split regex among the pre-tokenizers and picks the matching kind.
PretokenizerKind detect_kind(const json& pre) {
  if (pre.is_null()) return PretokenizerKind::kGpt2;
  std::string pattern;
  std::vector<json> all = {pre};
  if (pre.contains("pretokenizers")) {
    for (const auto& p : pre["pretokenizers"]) all.push_back(p);
  }
  for (const auto& p : all) {
    if (p.value("type", "") == "Split" && p.contains("pattern")) {
      pattern = p["pattern"].value("Regex", p["pattern"].value("String", ""));
    }
  }
  if (pattern.empty()) return PretokenizerKind::kGpt2;  // ByteLevel's own GPT-2 regex
  if (pattern.find("\\p{N}{1,3}") != std::string::npos) return PretokenizerKind::kLlama3;
  return PretokenizerKind::kQwen2;
}

// The special tokens a TemplateProcessing post-processor puts before and
// after the text ("single" template), looked up in its special_tokens table.
void template_tokens(const json& post, std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (post.is_null()) return;
  if (post.value("type", "") == "Sequence" && post.contains("processors")) {
    for (const auto& p : post["processors"]) template_tokens(p, prefix, suffix);
    return;
  }
  if (post.value("type", "") != "TemplateProcessing" || !post.contains("single")) return;
  std::vector<int32_t>* target = prefix;
  for (const auto& item : post["single"]) {
    if (item.contains("Sequence")) {
      target = suffix;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item["SpecialToken"].at("id").get<std::string>();
    const json& ids = post.at("special_tokens").at(name).at("ids");
    for (const auto& id : ids) target->push_back(id.get<int32_t>());
  }
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::from_json(const std::string& text) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  try {
    const json j = json::parse(text);
    const json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE") {
      return invalid_argument("tokenizer.json: model type " + model.value("type", "") +
                              " is not supported (BPE is)");
    }
    t->ignore_merges_ = model.value("ignore_merges", false);
    for (auto& [token, id] : model.at("vocab").items()) {
      t->vocab_[token] = id.get<int32_t>();
      t->id_to_token_[id.get<int32_t>()] = token;
      t->vocab_size_ = std::max(t->vocab_size_, id.get<int32_t>() + 1);
    }
    int rank = 0;
    for (const auto& m : model.at("merges")) {
      const std::string key = m.is_string()
                                  ? m.get<std::string>()
                                  : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>();
      t->merge_rank_.emplace(key, rank++);
    }
    if (j.contains("added_tokens")) {
      for (const auto& a : j["added_tokens"]) {
        const int32_t id = a.at("id").get<int32_t>();
        t->added_.emplace_back(a.at("content").get<std::string>(), id);
        t->added_by_id_[id] = a.at("content").get<std::string>();
        t->vocab_size_ = std::max(t->vocab_size_, id + 1);
      }
    }
    t->kind_ = detect_kind(j.value("pre_tokenizer", json()));
    template_tokens(j.value("post_processor", json()), &t->prefix_, &t->suffix_);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer.json: ") + e.what());
  }
  std::sort(t->added_.begin(), t->added_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  const auto& table = byte_to_unicode();
  for (int b = 0; b < 256; ++b) t->unicode_to_byte_[table[b]] = static_cast<uint8_t>(b);
  return t;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = from_json(ss.str());
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

std::optional<int32_t> BpeTokenizer::token_id(const std::string& token) const {
  for (const auto& [content, id] : added_) {
    if (content == token) return id;
  }
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// BPE of one pre-token: symbols start as single mapped bytes and the
// lowest-ranked adjacent pair is merged until no pair has a rank.
void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>* out) {
  auto cached = cache_.find(piece);
  if (cached != cache_.end()) {
    out->insert(out->end(), cached->second.begin(), cached->second.end());
    return;
  }
  std::vector<std::string> symbols;
  std::string mapped;
  for (char c : piece) {
    std::string s;
    append_utf8(byte_to_unicode()[static_cast<unsigned char>(c)], &s);
    mapped += s;
    symbols.push_back(std::move(s));
  }
  std::vector<int32_t> ids;
  auto whole = vocab_.find(mapped);
  if (ignore_merges_ && whole != vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    while (symbols.size() > 1) {
      int best = std::numeric_limits<int>::max();
      size_t at = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto r = merge_rank_.find(symbols[i] + " " + symbols[i + 1]);
        if (r != merge_rank_.end() && r->second < best) best = r->second, at = i;
      }
      if (best == std::numeric_limits<int>::max()) break;
      symbols[at] += symbols[at + 1];
      symbols.erase(symbols.begin() + at + 1);
    }
    for (const std::string& s : symbols) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) ids.push_back(it->second);  // every byte is in a byte-level vocab
    }
  }
  out->insert(out->end(), ids.begin(), ids.end());
  if (cache_.size() >= 100000) cache_.clear();  // bounded for long-running servers
  cache_.emplace(piece, std::move(ids));
}

void BpeTokenizer::encode_span(const std::string& text, std::vector<int32_t>* out) {
  for (const std::string& piece : pretokenize(text, kind_)) encode_piece(piece, out);
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) {
  std::vector<int32_t> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (const auto& [content, id] : added_) {
      if (!content.empty() && text.compare(i, content.size(), content) == 0) {
        encode_span(text.substr(start, i - start), &out);
        out.push_back(id);
        i += content.size();
        start = i;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  encode_span(text.substr(start), &out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    auto added = added_by_id_.find(id);
    if (added != added_by_id_.end()) {
      out += added->second;
      continue;
    }
    auto it = id_to_token_.find(id);
    if (it == id_to_token_.end()) continue;
    const std::string& tok = it->second;
    for (size_t k = 0; k < tok.size();) {  // token text is UTF-8 of mapped bytes
      const auto c = static_cast<unsigned char>(tok[k]);
      const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      uint32_t cp = len == 1 ? c : c & (0x7f >> len);
      for (int m = 1; m < len && k + m < tok.size(); ++m) {
        cp = (cp << 6) | (static_cast<unsigned char>(tok[k + m]) & 0x3f);
      }
      auto b = unicode_to_byte_.find(cp);
      if (b != unicode_to_byte_.end()) out.push_back(static_cast<char>(b->second));
      k += len;
    }
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir) {
  const auto path = std::filesystem::path(dir) / "tokenizer.json";
  if (!std::filesystem::exists(path)) return not_found("no tokenizer.json in " + dir);
  COHORT_ASSIGN_OR_RETURN(auto bpe, BpeTokenizer::load(path.string()));
  return std::unique_ptr<Tokenizer>(std::move(bpe));
}

}  // namespace cohort::models
