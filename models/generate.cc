// Sampling (greedy, temperature, top-k, top-p) and the generation loop.
#include "models/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace cohort::models {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

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

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TokenSampler::TokenSampler(const SamplingParams& params, uint64_t stream)
    : params_(params), state_(params.seed * 0x2545f4914f6cdd1dull + stream) {}

double TokenSampler::uniform() {
  return static_cast<double>(splitmix64(state_) >> 11) / 9007199254740992.0;
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

Result<std::vector<GenerationResult>> generate(Model& model, KvCache& cache,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const GenerationOptions& options) {
  const int n = static_cast<int>(prompts.size());
  if (n > cache.slots()) {
    return invalid_argument("generate: " + std::to_string(n) + " prompts but the KV cache has " +
                            std::to_string(cache.slots()) + " slots");
  }
  for (int i = 0; i < n; ++i) {
    if (prompts[i].empty() ||
        prompts[i].size() + options.max_new_tokens > static_cast<size_t>(cache.capacity())) {
      return invalid_argument(
          "generate: prompt " + std::to_string(i) + " (" + std::to_string(prompts[i].size()) +
          " tokens) plus " + std::to_string(options.max_new_tokens) +
          " new tokens does not fit the cache capacity " + std::to_string(cache.capacity()));
    }
  }
  const int V = model.config().vocab_size;
  std::vector<GenerationResult> results(n);
  std::vector<TokenSampler> samplers;
  std::vector<float> logits(static_cast<size_t>(n) * V);
  std::vector<int> active;
  std::vector<int32_t> next(n);
  // All prompts prefill in one pass (ragged, no padding).
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> slots(n);
  for (int i = 0; i < n; ++i) {
    slots[i] = i;
    cache.reset(i);
  }
  if (n > 0) model.prefill_batch(cache, slots, prompts, logits.data());
  const double prefill_seconds = seconds_since(t0);
  for (int i = 0; i < n; ++i) {
    samplers.emplace_back(options.sampling, static_cast<uint64_t>(i));
    next[i] = samplers[i].sample(logits.data() + static_cast<size_t>(i) * V, V);
    results[i].prefill_seconds = prefill_seconds;
    if (options.max_new_tokens > 0) active.push_back(i);
  }
  auto emit = [&](int i) {  // records next[i]; true when sequence i goes on
    results[i].tokens.push_back(next[i]);
    const auto& stop = options.stop_tokens;
    results[i].stopped = std::find(stop.begin(), stop.end(), next[i]) != stop.end();
    return !results[i].stopped &&
           static_cast<int>(results[i].tokens.size()) < options.max_new_tokens;
  };
  std::vector<int> still;
  for (int i : active) {
    if (emit(i)) still.push_back(i);
  }
  active.swap(still);
  std::vector<int32_t> step_tokens;
  while (!active.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    step_tokens.clear();
    for (int i : active) step_tokens.push_back(next[i]);
    model.decode(cache, active.data(), step_tokens.data(), static_cast<int>(active.size()),
                 logits.data());
    still.clear();
    for (size_t b = 0; b < active.size(); ++b) {
      const int i = active[b];
      next[i] = samplers[i].sample(logits.data() + b * V, V);
      results[i].decode_seconds += seconds_since(t0);
      if (emit(i)) still.push_back(i);
    }
    active.swap(still);
  }
  return results;
}

}  // namespace cohort::models
