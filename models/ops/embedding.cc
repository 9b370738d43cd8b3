// CPU embedding: a row copy per token; backward scatters rows back.
#include "models/ops/embedding.h"

#include <cstring>

namespace cohort::models::cpu {

void embedding_forward(float* out, const int32_t* ids, const float* table, int n, int dim,
                       int vocab_begin, int rows) {
  for (int i = 0; i < n; ++i) {
    const int row = ids[i] - vocab_begin;
    float* o = out + static_cast<size_t>(i) * dim;
    if (row >= 0 && row < rows) {
      std::memcpy(o, table + static_cast<size_t>(row) * dim, sizeof(float) * dim);
    } else {
      std::memset(o, 0, sizeof(float) * dim);
    }
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int n, int dim,
                        int vocab_begin, int rows) {
  for (int i = 0; i < n; ++i) {
    const int row = ids[i] - vocab_begin;
    if (row < 0 || row >= rows) continue;
    float* d = dtable + static_cast<size_t>(row) * dim;
    const float* g = dout + static_cast<size_t>(i) * dim;
    for (int j = 0; j < dim; ++j) d[j] += g[j];
  }
}

void gather_rows(float* dst, const float* src, const int32_t* idx, int k, int dim) {
  for (int i = 0; i < k; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * dim, src + static_cast<size_t>(idx[i]) * dim,
                sizeof(float) * dim);
  }
}

}  // namespace cohort::models::cpu
