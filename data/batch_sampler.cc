// The mixture schedule, the table-free window permutation, and batch filling.
#include "data/batch_sampler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace cohort::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int64_t kBlock = 1024;

}  // namespace

// A balanced Feistel network over the smallest even-bit domain >= n, with
// cycle walking back into [0, n): a bijection, O(1) memory, the same on
// every platform (std::shuffle's algorithm is implementation-defined).
int64_t permute_index(int64_t index, int64_t n, uint64_t key) {
  if (n <= 1) return 0;
  int bits = 2;
  while ((int64_t(1) << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = uint64_t(index);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (int round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64(right ^ (key + uint64_t(round) * 0x632be59bd9b4e019ull)) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

std::string SamplerState::to_json() const { return nlohmann::json{{"seed", seed}, {"step", step}}.dump(); }

Result<SamplerState> SamplerState::from_json(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    return SamplerState{j.at("seed").get<uint64_t>(), j.at("step").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("sampler state: ") + e.what());
  }
}

Result<BatchSampler> BatchSampler::create(std::vector<WeightedSource> sources, const SamplerOptions& options) {
  if (options.seq_len < 1 || options.global_batch < 1)
    return invalid_argument("sampler: seq_len and global_batch must be >= 1");
  if (sources.empty()) return invalid_argument("sampler: no data sources");
  BatchSampler s;
  s.options_ = options;
  double total = 0;
  for (const auto& w : sources) {
    if (!(w.weight > 0)) return invalid_argument("sampler: the weight of " + w.source->describe() + " must be positive");
    total += w.weight;
  }
  for (const auto& w : sources) {
    if (w.source->size() < int64_t(options.seq_len) + 1)
      return invalid_argument(w.source->describe() + ": " + std::to_string(w.source->size()) +
                              " tokens are fewer than seq_len + 1 = " + std::to_string(options.seq_len + 1));
    Source src;
    src.tokens = w.source;
    src.windows = (w.source->size() - 1) / options.seq_len;
    src.per_block = sources.size() == 1 ? kBlock : std::max<int64_t>(1, std::llround(w.weight / total * kBlock));
    s.block_size_ += src.per_block;
    s.has_mask_ = s.has_mask_ || w.source->has_loss_mask();
    s.sources_.push_back(std::move(src));
  }
  s.window_.resize(size_t(options.seq_len) + 1);
  s.mask_.resize(size_t(options.seq_len) + 1);
  return s;
}

int64_t BatchSampler::windows() const {
  int64_t n = 0;
  for (const auto& s : sources_) n += s.windows;
  return n;
}

void BatchSampler::build_block(int64_t block) {
  block_source_.clear();
  for (size_t k = 0; k < sources_.size(); ++k)
    block_source_.insert(block_source_.end(), size_t(sources_[k].per_block), uint32_t(k));
  if (sources_.size() > 1) {  // seeded Fisher-Yates with our own generator
    uint64_t state = splitmix64(options_.seed ^ 0x5bd1e995ull) + uint64_t(block);
    for (size_t i = block_source_.size() - 1; i > 0; --i) {
      state = splitmix64(state);
      std::swap(block_source_[i], block_source_[state % (i + 1)]);
    }
  }
  std::vector<int64_t> seen(sources_.size(), 0);
  block_ordinal_.resize(block_source_.size());
  for (size_t p = 0; p < block_source_.size(); ++p) block_ordinal_[p] = seen[block_source_[p]]++;
  cached_block_ = block;
}

std::pair<size_t, int64_t> BatchSampler::locate(int64_t g) {
  const int64_t block = g / block_size_, pos = g % block_size_;
  if (block != cached_block_) build_block(block);
  const size_t k = block_source_[size_t(pos)];
  const Source& s = sources_[k];
  const int64_t ordinal = block * s.per_block + block_ordinal_[size_t(pos)];
  const int64_t epoch = ordinal / s.windows, index = ordinal % s.windows;
  if (!options_.shuffle) return {k, index};
  const uint64_t key = splitmix64(options_.seed * 0x100000001b3ull + uint64_t(epoch) * 0x9e37ull + k);
  return {k, permute_index(index, s.windows, key)};
}

Status BatchSampler::fill(int64_t step, int64_t first, int64_t count, int32_t* inputs, int32_t* targets) {
  const int T = options_.seq_len;
  for (int64_t r = 0; r < count; ++r) {
    const auto [k, window] = locate(step * options_.global_batch + first + r);
    const TokenSource& src = *sources_[k].tokens;
    src.read(window * T, T + 1, window_.data(), mask_.data());
    for (int i = 0; i <= T; ++i) {
      if (window_[size_t(i)] < 0 || (options_.vocab_size > 0 && window_[size_t(i)] >= options_.vocab_size))
        return invalid_argument(src.describe() + ": token " + std::to_string(window_[size_t(i)]) + " at position " +
                                std::to_string(window * T + i) + " is outside the model's vocabulary of " +
                                std::to_string(options_.vocab_size) + " (data written for another tokenizer?)");
    }
    std::copy(window_.begin(), window_.begin() + T, inputs + r * T);
    for (int i = 0; i < T; ++i) targets[r * T + i] = mask_[size_t(i) + 1] ? window_[size_t(i) + 1] : kIgnoreTarget;
  }
  return Status::ok();
}

Status BatchSampler::fill_rank(int64_t step, int rank, int world, int32_t* inputs, int32_t* targets) {
  if (world < 1 || rank < 0 || rank >= world || options_.global_batch % world != 0)
    return invalid_argument("sampler: global_batch " + std::to_string(options_.global_batch) + " does not split over " +
                            std::to_string(world) + " data-parallel ranks (rank " + std::to_string(rank) + ")");
  const int64_t local = options_.global_batch / world;
  return fill(step, rank * local, local, inputs, targets);
}

int64_t BatchSampler::counted_targets(int64_t step) {
  const int T = options_.seq_len;
  if (!has_mask_) return options_.global_batch * T;
  int64_t n = 0;
  for (int64_t r = 0; r < options_.global_batch; ++r) {
    const auto [k, window] = locate(step * options_.global_batch + r);
    const TokenSource& src = *sources_[k].tokens;
    if (!src.has_loss_mask()) {
      n += T;
      continue;
    }
    src.read(window * T, T + 1, window_.data(), mask_.data());
    for (int i = 1; i <= T; ++i) n += mask_[size_t(i)] != 0;
  }
  return n;
}

Status BatchSampler::restore(const SamplerState& state) {
  if (state.seed != options_.seed)
    return failed_precondition("sampler state was saved with seed " + std::to_string(state.seed) +
                               ", this sampler uses " + std::to_string(options_.seed));
  step_ = state.step;
  return Status::ok();
}

}  // namespace cohort::data
