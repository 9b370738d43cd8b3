// ShardLayout: how one parameter group's flat buffer is split over the ranks
// of the data-parallel axis.
//
// Two shapes, one interface:
//  - flat (ZeRO-1/2/3): the group buffer, padded to dp × S floats, is cut into
//    dp contiguous ranges of S; rank r owns [r·S, (r+1)·S). Gathering into the
//    padded buffer needs no reordering.
//  - per-parameter dim-0 (FSDP2): every parameter is cut along its first
//    dimension into dp row blocks of ceil(rows / dp) rows (the last ones
//    padded); rank r's shard is its row block of every parameter, back to
//    back. Gathered shards arrive as [dp][S] and are unpacked into the
//    group's layout (pack does the reverse for gradient reduce-scatter).
// In both, every rank's shard has the same size S, which collectives need.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "models/backend.h"
#include "models/param_layout.h"

namespace cohort::parallel {

// A piece of one parameter inside a rank's shard.
struct ShardSegment {
  size_t shard_offset = 0;  // floats from the start of the shard
  size_t full_offset = 0;   // floats from the start of the group buffer
  size_t length = 0;
  int param = 0;            // index into ParamGroup::params
};

class ShardLayout {
 public:
  static ShardLayout flat(const models::ParamGroup& group, int dp);
  static ShardLayout per_param_dim0(const models::ParamGroup& group, int dp);
  // The whole group on every rank (DDP): one shard of everything.
  static ShardLayout replicated(const models::ParamGroup& group);

  bool is_flat() const { return flat_; }
  int dp() const { return dp_; }
  size_t shard_numel() const { return shard_numel_; }
  size_t full_numel() const { return full_numel_; }
  // Size of a buffer that holds every rank's shard: dp × S (≥ full_numel).
  size_t padded_numel() const { return shard_numel_ * size_t(dp_); }
  const std::vector<ShardSegment>& segments(int dp_rank) const { return segments_[dp_rank]; }

  // gathered [dp][S] → group layout (gathered in f32, bf16 or f16, widened
  // to f32); packed ← group layout as [dp][S]. For flat layouts both are the
  // identity and need no call. Each is one CopyPlan on `backend`, made at the
  // first call (set-up or the first step) and reused.
  void unpack(models::Backend& backend, const void* gathered, models::DType dtype, float* full) const;
  void pack(models::Backend& backend, const float* full, float* packed) const;

 private:
  std::vector<models::CopyRange> unpack_ranges() const;
  // Shared between copies of a layout; made lazily, hence mutable.
  mutable std::shared_ptr<models::CopyPlan> unpack_plan_, pack_plan_;
  bool flat_ = true;
  int dp_ = 1;
  size_t shard_numel_ = 0;
  size_t full_numel_ = 0;
  std::vector<std::vector<ShardSegment>> segments_;
};

}  // namespace cohort::parallel
