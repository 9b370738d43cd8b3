// tokenizer.json: the stages parsed from the file, and encode/decode through
// them. Added tokens are split out of the raw text first (leftmost match,
// longest at a position), then each span between them is normalized,
// pre-tokenized and BPE-encoded; decode maps ids to token strings (added
// tokens included, as HF does) and runs the decoders.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "text/tokenizer_pipeline.h"

namespace cohort::text {
namespace {

using nlohmann::json;

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
    for (const auto& id : post.at("special_tokens").at(name).at("ids")) target->push_back(token_id_from_json(id));
  }
}

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

Result<std::shared_ptr<const TokenizerPipeline>> TokenizerPipeline::parse(const std::string& text) {
  std::shared_ptr<TokenizerPipeline> p(new TokenizerPipeline());
  try {
    const json j = json::parse(text);
    if (!j.is_object()) return invalid_argument("tokenizer.json: expected a JSON object");
    auto stage = [](const char* field, Status s) { return s.with_context(std::string("tokenizer.json ") + field); };
    auto model = BpeModel::parse(j.at("model"));
    if (!model) return stage("model", model.status());
    p->model_ = std::move(*model);
    auto normalizer = parse_normalizer(j.value("normalizer", json()));
    if (!normalizer) return stage("normalizer", normalizer.status());
    p->normalizer_ = std::move(*normalizer);
    auto pre = parse_pre_tokenizer(j.value("pre_tokenizer", json()));
    if (!pre) return stage("pre_tokenizer", pre.status());
    p->pre_tokenizer_ = std::move(*pre);
    auto decoder = parse_decoder(j.value("decoder", json()));
    if (!decoder) return stage("decoder", decoder.status());
    p->decoder_ = std::move(*decoder);
    p->vocab_size = p->model_.max_id() + 1;
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
      for (const auto& a : j["added_tokens"]) {
        AddedToken t{a.at("content").get<std::string>(), token_id_from_json(a.at("id")), a.value("special", false),
                     a.value("lstrip", false), a.value("rstrip", false)};
        if (t.content.empty() || t.id < 0 || t.id > (1 << 21))
          return invalid_argument("tokenizer.json added_tokens: token id " + std::to_string(t.id) + " is unusable");
        p->vocab_size = std::max(p->vocab_size, t.id + 1);
        p->added_first_byte_[static_cast<unsigned char>(t.content[0])] = true;
        p->added_.push_back(std::move(t));
      }
    }
    template_tokens(j.value("post_processor", json()), &p->prefix, &p->suffix);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer.json: ") + e.what());
  }
  std::stable_sort(p->added_.begin(), p->added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < p->added_.size(); ++i) p->added_by_id_[p->added_[i].id] = i;
  return std::shared_ptr<const TokenizerPipeline>(std::move(p));
}

void TokenizerPipeline::encode_span(const std::string& text, bool at_start, MatchBudget& budget,
                                    std::vector<int32_t>* out,
                                    std::unordered_map<std::string, std::vector<int32_t>>* cache) const {
  if (text.empty()) return;
  std::vector<Piece> pieces{Piece{normalizer_(text), at_start}};
  pre_tokenizer_(pieces, budget);
  for (const Piece& piece : pieces) {
    if (auto hit = cache->find(piece.text); hit != cache->end()) {
      out->insert(out->end(), hit->second.begin(), hit->second.end());
      continue;
    }
    std::vector<int32_t> ids;
    if (piece.text.size() <= kMaxWordBytes) {
      model_.encode_word(piece.text, &ids);
    } else {
      // Merged in chunks cut at character boundaries: a word this long is
      // data (a blob, an attack), and merging stays O(n log n) per chunk.
      for (size_t at = 0; at < piece.text.size();) {
        size_t end = std::min(piece.text.size(), at + kMaxWordBytes);
        while (end < piece.text.size() && (static_cast<unsigned char>(piece.text[end]) & 0xC0) == 0x80) --end;
        model_.encode_word(piece.text.substr(at, end - at), &ids);
        at = end;
      }
    }
    out->insert(out->end(), ids.begin(), ids.end());
    if (cache->size() >= 200000) cache->clear();  // bounded for long inputs and servers
    if (piece.text.size() < 256) cache->emplace(piece.text, std::move(ids));
  }
}

void TokenizerPipeline::encode(const std::string& text, std::vector<int32_t>* out,
                               std::unordered_map<std::string, std::vector<int32_t>>* cache) const {
  MatchBudget budget(text.size());
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    if (added_first_byte_[static_cast<unsigned char>(text[i])]) {
      for (const AddedToken& a : added_) {
        if (text.compare(i, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t span_end = i, next = i + hit->content.size();
    if (hit->lstrip)
      while (span_end > start && is_space_byte(text[span_end - 1])) --span_end;
    if (hit->rstrip)
      while (next < text.size() && is_space_byte(text[next])) ++next;
    encode_span(text.substr(start, span_end - start), start == 0, budget, out, cache);
    out->push_back(hit->id);
    i = start = next;
  }
  encode_span(text.substr(start), start == 0, budget, out, cache);
}

std::string TokenizerPipeline::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto a = added_by_id_.find(id); a != added_by_id_.end()) tokens.push_back(added_[a->second].content);
    else if (const std::string* t = model_.token(id)) tokens.push_back(*t);
  }
  decoder_(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return utf8_lossy(out);
}

std::string TokenizerPipeline::token_bytes(int32_t id) const {
  if (auto a = added_by_id_.find(id); a != added_by_id_.end()) return added_[a->second].content;
  const std::string* t = model_.token(id);
  return t ? vocabulary_piece_bytes(*t) : std::string();
}

std::optional<int32_t> TokenizerPipeline::token_id(const std::string& token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return model_.id(token);
}

}  // namespace cohort::text
