// A sequence's tokens held to a grammar (json_grammar.h): which tokens may
// come next, and the state after one did.
//
// TokenVocabulary holds every token's bytes in a prefix tree, built once
// per tokenizer. allowed() walks the tree with the matcher: a subtree whose
// prefix the matcher refuses is skipped whole, so a step costs what the
// grammar lets through, not the vocabulary's size. Masks are cached by
// matcher state (a long free string repeats one state), per grammar.
// Special tokens never match text; the end-of-sequence tokens are allowed
// only once the value is complete, and then only they are.
//
// Threading: a TokenVocabulary is immutable and shared; a TokenConstraint
// belongs to one sequence (one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/json_grammar.h"
#include "text/tokenizer.h"

namespace cohort::text {

class TokenVocabulary {
 public:
  // Every non-special token's bytes (Tokenizer::token_bytes); `eos` are the
  // tokens that end a sequence.
  static std::shared_ptr<const TokenVocabulary> build(const Tokenizer& tokenizer, std::vector<int32_t> eos);
  int size() const { return size_; }
  const std::vector<int32_t>& eos() const { return eos_; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }

  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // by byte
    std::vector<int32_t> tokens;                              // tokens whose bytes end here
  };
  const std::vector<Node>& trie() const { return trie_; }

 private:
  int size_ = 0;
  std::vector<int32_t> eos_;
  std::vector<std::string> bytes_;
  std::vector<Node> trie_;  // [0] is the root
};

// Masks of one grammar by matcher state, shared by the sequences that use
// it (a request's n choices).
class MaskCache {
 public:
  static constexpr size_t kMaxEntries = 512;
  std::shared_ptr<const std::vector<uint8_t>> find(const std::string& key) const;
  void put(const std::string& key, std::shared_ptr<const std::vector<uint8_t>> mask);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint8_t>>> masks_;
};

class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                  std::shared_ptr<MaskCache> cache = nullptr);
  // mask[t] = 1 where token t may come next (vocabulary size entries).
  // All zero: nothing can (the grammar's bounds ran out); the caller ends
  // the sequence.
  const std::vector<uint8_t>& allowed();
  // Sets every refused token's logit to -inf in `logits` [vocab] (entries
  // past the vocabulary, an embedding's padding, too). False when none is left.
  bool mask_logits(float* logits, int vocab);
  // Moves past `token`; false when it was not allowed (state unchanged).
  bool advance(int32_t token);
  bool complete() const { return matcher_.complete(); }

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::shared_ptr<MaskCache> cache_;
  JsonMatcher matcher_;
  std::shared_ptr<const std::vector<uint8_t>> mask_;  // of the current state, once computed
};

}  // namespace cohort::text
