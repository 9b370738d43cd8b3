// CPU greedy pick over vocab-sharded logits.
#include "models/ops/argmax.h"

#include <cstddef>
#include <cstring>

namespace cohort::models::cpu {

void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin) {
  for (int r = 0; r < n; ++r) {
    const float* row = logits + static_cast<size_t>(r) * vocab_rows;
    int best = 0;
    for (int j = 1; j < vocab_rows; ++j) {
      if (row[j] > row[best]) best = j;  // strict: the first maximum stays
    }
    const int32_t index = best + vocab_begin;
    out[2 * r] = row[best];
    std::memcpy(&out[2 * r + 1], &index, sizeof(index));
  }
}

void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n) {
  for (int r = 0; r < n; ++r) {
    float best = 0;
    for (int k = 0; k < tp; ++k) {  // ascending vocab ranges: strict keeps the lowest index
      const float* pair = gathered + (static_cast<size_t>(k) * n + r) * 2;
      if (k == 0 || pair[0] > best) {
        best = pair[0];
        std::memcpy(&tokens[r], &pair[1], sizeof(int32_t));
      }
    }
  }
}

void take_tokens(int32_t* rows, const int32_t* previous, const int32_t* source, int n) {
  for (int b = 0; b < n; ++b) {
    if (source[b] >= 0) rows[b] = previous[source[b]];
  }
}

}  // namespace cohort::models::cpu
