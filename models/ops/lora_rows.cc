// CPU reference of the per-row LoRA shrink and expand (lora_rows.h).
#include "models/ops/lora_rows.h"

#include <cstddef>
#include <vector>

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

void lora_mask(float* out, const float* t, const int32_t* row_adapter, const int32_t* column, const int32_t* ranks,
               const float* scales, int n, int width, int columns) {
  for (int r = 0; r < n; ++r) {
    const int s = row_adapter[r];
    for (int i = 0; i < width; ++i) {
      const int c = i % columns;
      const bool kept = s >= 0 && c >= column[s] && c < column[s] + ranks[s];
      const size_t at = static_cast<size_t>(r) * width + i;
      out[at] = kept ? scales[s] * t[at] : 0.0f;
    }
  }
}

}  // namespace cohort::models::cpu

namespace cohort::models {

void lora_rows_by_adapter(int32_t* order, const int32_t* row_adapter, int n, int slots) {
  auto bucket = [&](int r) {
    const int a = row_adapter[r];
    return a >= 0 && a < slots ? a : slots;  // none last
  };
  std::vector<int> start(static_cast<size_t>(slots) + 2, 0);
  for (int r = 0; r < n; ++r) ++start[static_cast<size_t>(bucket(r)) + 1];
  for (int s = 0; s <= slots; ++s) start[static_cast<size_t>(s) + 1] += start[static_cast<size_t>(s)];
  for (int r = 0; r < n; ++r) order[start[static_cast<size_t>(bucket(r))]++] = r;
}

}  // namespace cohort::models
