// prefill_attention.h's tile list; the kernel is prefill_attention.cuh.
#include "models/ops/prefill_attention.h"

namespace cohort::models {

void prefill_attention_tiles(const int32_t* slots, const int32_t* positions, int begin, int end,
                             std::vector<int32_t>& tiles) {
  int first = begin;
  for (int r = begin; r < end; ++r) {
    const bool follows = r > first && slots[r] == slots[r - 1] && positions[r] == positions[r - 1] + 1;
    if (r > first && (!follows || r - first == kPrefillTileRows)) {
      tiles.push_back(first);
      tiles.push_back(r - first);
      first = r;
    }
  }
  if (end > first) {
    tiles.push_back(first);
    tiles.push_back(end - first);
  }
}

}  // namespace cohort::models
