// Token masks from a grammar over the vocabulary's prefix tree (see
// token_constraint.h).
#include "text/token_constraint.h"

#include <algorithm>
#include <limits>

namespace cohort::text {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::build(const Tokenizer& tokenizer, std::vector<int32_t> eos) {
  auto v = std::make_shared<TokenVocabulary>();
  v->size_ = tokenizer.vocab_size();
  v->eos_ = std::move(eos);
  v->bytes_.resize(size_t(v->size_));
  v->trie_.emplace_back();
  for (int32_t id = 0; id < v->size_; ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string bytes = tokenizer.token_bytes(id);
    if (bytes.empty()) continue;
    int32_t at = 0;
    for (unsigned char c : bytes) {
      auto& children = v->trie_[size_t(at)].children;
      auto it = std::find_if(children.begin(), children.end(), [c](const auto& e) { return e.first == c; });
      if (it != children.end()) {
        at = it->second;
        continue;
      }
      const int32_t next = static_cast<int32_t>(v->trie_.size());
      v->trie_[size_t(at)].children.emplace_back(c, next);  // before emplace_back below moves the vector
      v->trie_.emplace_back();
      at = next;
    }
    v->trie_[size_t(at)].tokens.push_back(id);
    v->bytes_[size_t(id)] = std::move(bytes);
  }
  return v;
}

std::shared_ptr<const std::vector<uint8_t>> MaskCache::find(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : it->second;
}

void MaskCache::put(const std::string& key, std::shared_ptr<const std::vector<uint8_t>> mask) {
  std::lock_guard lock(mutex_);
  if (masks_.size() >= kMaxEntries) masks_.clear();  // a bound, not a policy: states rarely repeat past it
  masks_[key] = std::move(mask);
}

TokenConstraint::TokenConstraint(std::shared_ptr<const JsonGrammar> grammar,
                                 std::shared_ptr<const TokenVocabulary> vocabulary, std::shared_ptr<MaskCache> cache)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      cache_(cache ? std::move(cache) : std::make_shared<MaskCache>()),
      matcher_(grammar_) {}

namespace {

// Depth-first over the trie: a child is visited only when the matcher
// takes its byte, so refused prefixes cost one step.
void walk(const TokenVocabulary& v, int32_t node, const JsonMatcher& m, std::vector<uint8_t>& mask) {
  for (const auto& [byte, child] : v.trie()[size_t(node)].children) {
    JsonMatcher next = m;
    if (!next.feed(byte)) continue;
    for (int32_t t : v.trie()[size_t(child)].tokens) mask[size_t(t)] = 1;
    walk(v, child, next, mask);
  }
}

}  // namespace

const std::vector<uint8_t>& TokenConstraint::allowed() {
  if (mask_) return *mask_;
  const std::string key = matcher_.key();
  mask_ = cache_->find(key);
  if (mask_) return *mask_;
  auto mask = std::make_shared<std::vector<uint8_t>>(size_t(vocabulary_->size()), 0);
  if (matcher_.complete()) {
    for (int32_t t : vocabulary_->eos()) {
      if (t >= 0 && t < vocabulary_->size()) (*mask)[size_t(t)] = 1;
    }
  } else {
    walk(*vocabulary_, 0, matcher_, *mask);
  }
  cache_->put(key, mask);
  mask_ = std::move(mask);
  return *mask_;
}

bool TokenConstraint::mask_logits(float* logits, int vocab) {
  const std::vector<uint8_t>& mask = allowed();
  bool any = false;
  for (int t = 0; t < vocab; ++t) {
    if (t < static_cast<int>(mask.size()) && mask[size_t(t)]) any = true;
    else logits[t] = -std::numeric_limits<float>::infinity();
  }
  return any;
}

bool TokenConstraint::advance(int32_t token) {
  if (token < 0 || token >= vocabulary_->size()) return false;
  if (matcher_.complete()) {
    const auto& eos = vocabulary_->eos();
    return std::find(eos.begin(), eos.end(), token) != eos.end();
  }
  if (vocabulary_->bytes(token).empty() || !matcher_.feed(vocabulary_->bytes(token))) return false;
  mask_.reset();
  return true;
}

}  // namespace cohort::text
