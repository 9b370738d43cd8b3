// Training data: token streams from text (byte-level) or token files, a
// held-out split, and a deterministic batch sampler.
//
// The sampler cuts the stream into windows of seq_len + 1 tokens (inputs and
// their next-token targets), visits them in a seeded permutation per epoch,
// and defines the *global* batch of step s as windows s*G .. s*G+G-1 of that
// order. A data-parallel rank takes a contiguous slice of the global batch,
// so what step s trains on does not depend on the world size, and the whole
// state is (seed, step): saving and restoring it is exact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::data {

// Bytes of a text file, or of every regular file under a directory (sorted
// by path, concatenated), as tokens 0..255.
Result<std::vector<int32_t>> read_text_bytes(const std::string& path);

enum class TokenFormat { kUint16, kUint32 };  // little-endian, no header
Result<std::vector<int32_t>> read_token_file(const std::string& path, TokenFormat format);
Status write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                        TokenFormat format);

struct TokenSplit {
  std::vector<int32_t> train, held_out;
};
// The last `held_out_fraction` of the stream is held out (a contiguous tail,
// so no window straddles both parts).
TokenSplit split_held_out(const std::vector<int32_t>& tokens, double held_out_fraction);

struct SamplerOptions {
  int64_t global_batch = 8;  // sequences per optimizer step, over all ranks
  int seq_len = 64;
  uint64_t seed = 0;
  bool shuffle = true;  // false: windows in stream order (evaluation)
};

struct SamplerState {
  uint64_t seed = 0;
  int64_t step = 0;
  std::string to_json() const;
  static Result<SamplerState> from_json(const std::string& text);
};

// Not thread-safe (it caches the current epoch's permutation).
class BatchSampler {
 public:
  // Errors when the stream holds fewer than seq_len + 1 tokens.
  static Result<BatchSampler> create(const std::vector<int32_t>* tokens,
                                     const SamplerOptions& options);

  int64_t windows() const { return windows_; }
  const SamplerOptions& options() const { return options_; }
  // Sequences [first, first + count) of step `step`'s global batch, each
  // seq_len inputs and seq_len targets, row-major.
  void fill(int64_t step, int64_t first, int64_t count, int32_t* inputs, int32_t* targets);
  // Rank `rank` of `world` data-parallel ranks: global_batch / world
  // sequences. Errors when global_batch is not divisible by world.
  Status fill_rank(int64_t step, int rank, int world, int32_t* inputs, int32_t* targets);

  // Position for checkpoints: the step the next call to next_step() returns.
  int64_t step() const { return step_; }
  int64_t next_step() { return step_++; }
  SamplerState state() const { return SamplerState{options_.seed, step_}; }
  // Errors when the state was saved with another seed.
  Status restore(const SamplerState& state);

 private:
  BatchSampler(const std::vector<int32_t>* tokens, const SamplerOptions& options);
  int64_t window_of(int64_t sequence);
  const std::vector<int32_t>* tokens_;
  SamplerOptions options_;
  int64_t windows_ = 0;
  int64_t step_ = 0;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> permutation_;
};

}  // namespace cohort::data
