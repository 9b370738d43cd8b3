// The deterministic batch sampler over one or more token sources.
//
// Each source is cut into windows of seq_len + 1 tokens (inputs and their
// next-token targets). Global sequence g of the run is assigned to a source
// by a seeded block schedule (each block of ~1024 sequences holds every
// source in proportion to its weight, shuffled), and within that source to
// a window through a seeded permutation per epoch (a Feistel network over
// the window count: no table, so memory does not grow with the data). The
// global batch of step s is sequences s*G .. s*G+G-1; a data-parallel rank
// takes a contiguous slice of it, so what step s trains on does not depend
// on the world size, and the whole state is (seed, step): saving and
// restoring it is exact.
//
// Targets of tokens outside the loss (the loss mask of chat and
// prompt/completion data) are models::kIgnoreIndex (-100). A token outside
// the model's vocabulary is an error naming the source and position.
// Not thread-safe (it caches the current block's schedule).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/token_source.h"

namespace cohort::data {

inline constexpr int32_t kIgnoreTarget = -100;  // = models::kIgnoreIndex

struct SamplerOptions {
  int64_t global_batch = 8;  // sequences per optimizer step, over all ranks
  int seq_len = 64;
  uint64_t seed = 0;
  bool shuffle = true;  // false: windows in stream order (evaluation)
  int64_t vocab_size = 0;  // > 0: tokens must be below it
};

struct SamplerState {
  uint64_t seed = 0;
  int64_t step = 0;
  std::string to_json() const;
  static Result<SamplerState> from_json(const std::string& text);
};

struct WeightedSource {
  std::shared_ptr<const TokenSource> source;
  double weight = 1.0;
};

class BatchSampler {
 public:
  // Errors when a source holds fewer than seq_len + 1 tokens or a weight is not positive.
  static Result<BatchSampler> create(std::vector<WeightedSource> sources, const SamplerOptions& options);

  int64_t windows() const;  // over all sources
  const SamplerOptions& options() const { return options_; }
  bool has_loss_mask() const { return has_mask_; }
  // Sequences [first, first + count) of step `step`'s global batch, each
  // seq_len inputs and seq_len targets, row-major.
  Status fill(int64_t step, int64_t first, int64_t count, int32_t* inputs, int32_t* targets);
  // Rank `rank` of `world` data-parallel ranks: global_batch / world sequences.
  Status fill_rank(int64_t step, int rank, int world, int32_t* inputs, int32_t* targets);
  // Targets of step `step`'s whole global batch that count in the loss
  // (global_batch * seq_len without a loss mask): the loss is averaged over
  // these, on every rank alike.
  int64_t counted_targets(int64_t step);

  int64_t step() const { return step_; }
  int64_t next_step() { return step_++; }
  SamplerState state() const { return SamplerState{options_.seed, step_}; }
  Status restore(const SamplerState& state);  // errors on another seed

 private:
  struct Source {
    std::shared_ptr<const TokenSource> tokens;
    int64_t windows = 0;
    int64_t per_block = 0;
  };
  BatchSampler() = default;
  // (source, window) of global sequence g.
  std::pair<size_t, int64_t> locate(int64_t g);
  void build_block(int64_t block);

  std::vector<Source> sources_;
  SamplerOptions options_;
  bool has_mask_ = false;
  int64_t block_size_ = 0, cached_block_ = -1;
  std::vector<uint32_t> block_source_;    // source of each position in the cached block
  std::vector<int64_t> block_ordinal_;    // its ordinal among that source's positions
  int64_t step_ = 0;
  std::vector<int32_t> window_;
  std::vector<uint8_t> mask_;
};

// A permutation of [0, n) keyed by `key`, evaluated one index at a time.
int64_t permute_index(int64_t index, int64_t n, uint64_t key);

}  // namespace cohort::data
