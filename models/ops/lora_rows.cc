// CPU reference of the per-row LoRA shrink and expand (lora_rows.h).
#include "models/ops/lora_rows.h"

#include <cstddef>

#include "base/half_float.h"

namespace cohort::models::cpu {

void lora_shrink(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                 const int32_t* row_adapter, int n, int in, int r_max) {
  for (int r = 0; r < n; ++r) {
    const int adapter = row_adapter[r];
    for (int c = 0; c < r_max; ++c) {
      float sum = 0;
      if (adapter >= 0 && a[adapter] && c < ranks[adapter]) {
        const Bf16Bits* w = a[adapter] + static_cast<size_t>(c) * in;
        const Bf16Bits* xr = x + static_cast<size_t>(r) * in;
        for (int k = 0; k < in; ++k) sum += bf16_bits_to_float(w[k]) * bf16_bits_to_float(xr[k]);
      }
      t[static_cast<size_t>(r) * r_max + c] = sum;
    }
  }
}

void lora_expand(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                 const float* scales, const int32_t* row_adapter, int n, int out, int r_max) {
  for (int r = 0; r < n; ++r) {
    const int adapter = row_adapter[r];
    if (adapter < 0 || !b[adapter]) continue;
    const int rank = ranks[adapter];
    for (int o = 0; o < out; ++o) {
      const Bf16Bits* row = b[adapter] + static_cast<size_t>(o) * rank;
      float sum = 0;
      for (int c = 0; c < rank; ++c) sum += bf16_bits_to_float(row[c]) * t[static_cast<size_t>(r) * r_max + c];
      y[static_cast<size_t>(r) * y_stride + o] += scales[adapter] * sum;
    }
  }
}

}  // namespace cohort::models::cpu
