#include "parallel/shard_layout.h"

#include <algorithm>
#include <utility>

namespace cohort::parallel {

ShardLayout ShardLayout::flat(const models::ParamGroup& group, int dp) {
  ShardLayout layout;
  layout.flat_ = true;
  layout.dp_ = dp;
  layout.full_numel_ = group.numel;
  layout.shard_numel_ = (group.numel + size_t(dp) - 1) / size_t(dp);
  layout.segments_.resize(dp);
  for (int r = 0; r < dp; ++r) {
    size_t begin = size_t(r) * layout.shard_numel_, end = begin + layout.shard_numel_;
    for (size_t p = 0; p < group.params.size(); ++p) {
      const auto& spec = group.params[p];
      size_t lo = std::max(begin, spec.offset), hi = std::min(end, spec.offset + spec.numel);
      if (lo < hi) layout.segments_[r].push_back({lo - begin, lo, hi - lo, int(p)});
    }
  }
  return layout;
}

ShardLayout ShardLayout::per_param_dim0(const models::ParamGroup& group, int dp) {
  ShardLayout layout;
  layout.flat_ = dp == 1;
  layout.dp_ = dp;
  layout.full_numel_ = group.numel;
  layout.segments_.resize(dp);
  size_t shard_offset = 0;
  for (size_t p = 0; p < group.params.size(); ++p) {
    const auto& spec = group.params[p];
    size_t rows = spec.shape.empty() ? 1 : size_t(spec.shape[0]);
    size_t row_numel = rows ? spec.numel / rows : 0;
    size_t rows_per_rank = (rows + size_t(dp) - 1) / size_t(dp);
    for (int r = 0; r < dp; ++r) {
      size_t first = std::min(rows, size_t(r) * rows_per_rank);
      size_t last = std::min(rows, first + rows_per_rank);
      if (last > first)
        layout.segments_[r].push_back(
            {shard_offset, spec.offset + first * row_numel, (last - first) * row_numel, int(p)});
    }
    shard_offset += rows_per_rank * row_numel;
  }
  layout.shard_numel_ = shard_offset;
  return layout;
}

ShardLayout ShardLayout::replicated(const models::ParamGroup& group) { return flat(group, 1); }

std::vector<models::CopyRange> ShardLayout::unpack_ranges() const {
  std::vector<models::CopyRange> ranges;
  for (int r = 0; r < dp_; ++r)
    for (const auto& s : segments_[r])
      ranges.push_back({s.full_offset, size_t(r) * shard_numel_ + s.shard_offset, s.length});
  return ranges;
}

void ShardLayout::unpack(models::Backend& backend, const void* gathered, models::DType dtype, float* full) const {
  if (!unpack_plan_) unpack_plan_ = backend.make_copy_plan(unpack_ranges());
  backend.run_copy_plan(*unpack_plan_, full, gathered, dtype);
}

void ShardLayout::pack(models::Backend& backend, const float* full, float* packed) const {
  if (!pack_plan_) {
    auto ranges = unpack_ranges();
    for (auto& r : ranges) std::swap(r.dst_offset, r.src_offset);
    pack_plan_ = backend.make_copy_plan(ranges);
  }
  backend.run_copy_plan(*pack_plan_, packed, full, models::DType::kF32);
}

}  // namespace cohort::parallel
