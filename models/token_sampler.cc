// Sampling: greedy, temperature, top-k, top-p.
#include "models/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "models/counter_random.h"

namespace cohort::models {
namespace {

// Larger weight first, lower id on ties: the order top_k and top_p cut in.
bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Sorts the `head` largest of [begin, end) into its front, in order.
template <typename It>
void sort_head(It begin, It end, size_t head) {
  const It mid = begin + static_cast<std::ptrdiff_t>(std::min<size_t>(head, end - begin));
  if (mid < end) std::nth_element(begin, mid, end, before);
  std::sort(begin, mid, before);
}

}  // namespace

TokenSampler::TokenSampler(const SamplingParams& params, uint64_t stream)
    : params_(params), state_(params.seed * 0x2545f4914f6cdd1dull + stream) {}

double TokenSampler::uniform() {
  // SplitMix64 as a generator: the state steps by the constant that
  // splitmix64 adds before mixing, so each draw mixes the next state.
  const uint64_t draw = splitmix64(state_);
  state_ += 0x9e3779b97f4a7c15ull;
  return static_cast<double>(draw >> 11) / 9007199254740992.0;
}

int32_t TokenSampler::sample(const float* logits, int vocab) {
  if (params_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  const float inv_t = 1.0f / params_.temperature;
  const float mx = *std::max_element(logits, logits + vocab) * inv_t;
  candidates_.resize(vocab);
  for (int i = 0; i < vocab; ++i) candidates_[i] = {std::exp(logits[i] * inv_t - mx), i};
  size_t keep = candidates_.size();
  const auto first = candidates_.begin();
  bool sorted = false;  // candidates_[0, keep) in `before` order
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    sort_head(first, candidates_.end(), keep);
    sorted = true;
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  if (params_.top_p < 1.0f) {
    // The smallest most-likely set holding top_p of the mass: grow a sorted
    // head until it does (the mass usually sits in a few hundred tokens).
    const double target = params_.top_p * total;
    size_t head = sorted ? keep : std::min<size_t>(256, keep), n = 0;
    while (true) {
      if (!sorted) sort_head(first, first + static_cast<std::ptrdiff_t>(keep), head);
      double mass = 0;
      n = 0;
      while (n < head && mass < target) mass += candidates_[n++].first;
      if (mass >= target || head == keep) break;
      head = std::min(head * 8, keep);
    }
    keep = std::max<size_t>(n, 1);
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  }
  double u = uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= candidates_[i].first;
    if (u < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

void apply_penalties(float* logits, int vocab, const SamplingParams& p, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& generated, const std::vector<int32_t>& stop_ids) {
  auto valid = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  if (p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f) {
    std::unordered_set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(generated.begin(), generated.end());
    for (int32_t id : seen) {
      if (!valid(id)) continue;
      float& l = logits[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : generated) ++counts[id];
    for (const auto& [id, n] : counts) {
      if (valid(id)) logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
    }
  }
  if (static_cast<int>(generated.size()) < p.min_tokens) {
    for (int32_t id : stop_ids) if (valid(id)) logits[id] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace cohort::models
