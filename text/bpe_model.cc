// The BPE model of tokenizer.json, as HF's BPE::merge_word: a word starts as
// its characters (each looked up in the vocabulary; one missing goes to its
// <0xXX> byte tokens under byte_fallback, else to unk, fused when fuse_unk),
// then the lowest-ranked adjacent pair is merged, leftmost first, until no
// pair has a rank. Byte-level files have every byte's stand-in character in
// the vocabulary, so nothing is ever unknown there.
#include <cstdio>
#include <functional>
#include <queue>
#include <limits>
#include <nlohmann/json.hpp>

#include "text/tokenizer_pipeline.h"

namespace cohort::text {

using nlohmann::json;

Result<BpeModel> BpeModel::parse(const json& model) {
  BpeModel m;
  if (model.value("type", "BPE") != "BPE")
    return invalid_argument("model type \"" + model.value("type", "") + "\" is not supported (BPE is)");
  m.byte_fallback_ = model.value("byte_fallback", false);
  m.fuse_unk_ = model.value("fuse_unk", false);
  m.ignore_merges_ = model.value("ignore_merges", false);
  for (auto& [token, id_json] : model.at("vocab").items()) {
    const int32_t id = token_id_from_json(id_json);
    if (id < 0 || id > (1 << 21)) return invalid_argument("model.vocab: id " + std::to_string(id) + " is out of range (0 to 2097152)");
    m.vocab_[token] = id;
    if (size_t(id) >= m.id_to_token_.size()) m.id_to_token_.resize(size_t(id) + 1);
    m.id_to_token_[size_t(id)] = token;
  }
  int32_t rank = 0;
  for (const json& merge : model.at("merges")) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) return invalid_argument("model.merges: \"" + s + "\" is not \"left right\"");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      left = merge.at(0).get<std::string>();
      right = merge.at(1).get<std::string>();
    }
    auto l = m.vocab_.find(left), r = m.vocab_.find(right), lr = m.vocab_.find(left + right);
    const int32_t this_rank = rank++;
    if (l == m.vocab_.end() || r == m.vocab_.end() || lr == m.vocab_.end()) continue;  // HF refuses; we skip
    const uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
    m.merges_.emplace(key, std::make_pair(this_rank, lr->second));
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = m.vocab_.find(model["unk_token"].get<std::string>());
    if (it != m.vocab_.end()) m.unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m.vocab_.find(name);
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

const std::string* BpeModel::token(int32_t id) const {
  if (id < 0 || size_t(id) >= id_to_token_.size() || id_to_token_[size_t(id)].empty()) return nullptr;
  return &id_to_token_[size_t(id)];
}

std::optional<int32_t> BpeModel::id(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Merges as HF's Word::merge_all: a heap of candidate pairs ordered by
// (rank, position), symbols in a linked list, stale candidates skipped when
// popped. O(n log n) in the word's length, where rescanning every pair after
// each merge was O(n^2) (a 64 KB word took seconds).
void BpeModel::merge_symbols(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  std::vector<size_t> prev(n), next(n);
  for (size_t k = 0; k < n; ++k) prev[k] = k - 1, next[k] = k + 1;  // k - 1 wraps to npos for k == 0
  struct Candidate {
    int32_t rank;
    size_t left;  // position of the pair's left symbol
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto offer = [&](size_t left) {
    const size_t right = next[left];
    if (right >= n) return;
    const uint64_t key = (uint64_t(uint32_t(symbols[left])) << 32) | uint32_t(symbols[right]);
    if (auto it = merges_.find(key); it != merges_.end())
      heap.push({it->second.first, left, symbols[left], symbols[right], it->second.second});
  };
  for (size_t k = 0; k + 1 < n; ++k) offer(k);
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t right = next[c.left];
    // Stale: either side has merged since this pair was offered.
    if (gone[c.left] || right >= n || symbols[c.left] != c.left_id || symbols[right] != c.right_id) continue;
    symbols[c.left] = c.merged;
    gone[right] = true;
    next[c.left] = next[right];
    if (next[right] < n) prev[next[right]] = c.left;
    if (prev[c.left] < n) offer(prev[c.left]);
    offer(c.left);
  }
  size_t kept = 0;
  for (size_t k = 0; k < n; ++k)
    if (!gone[k]) symbols[kept++] = symbols[k];
  symbols.resize(kept);
}

void BpeModel::encode_word(const std::string& word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  int32_t pending_unk = -1;  // a (fused) unk waiting to be added
  for (size_t i = 0; i < word.size();) {
    const auto c = static_cast<unsigned char>(word[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    len = std::min(len, word.size() - i);
    const std::string ch = word.substr(i, len);
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) symbols.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // HF drops characters it has no token for
    if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  merge_symbols(symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

}  // namespace cohort::text
