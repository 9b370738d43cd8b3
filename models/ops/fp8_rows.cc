// The CPU reference of fp8_rows.h.
#include "models/ops/fp8_rows.h"

#include <algorithm>
#include <cstring>

#include "base/half_float.h"
#include "models/quant/fp8_e4m3.h"

namespace cohort::models::cpu {

void quantize_rows_e4m3(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad, int cols) {
  const int blocks = cols / kFp8RowBlock;
  for (int r = 0; r < n_pad; ++r) {
    for (int b = 0; b < blocks; ++b) {
      uint8_t* out = codes + static_cast<size_t>(r) * cols + size_t(b) * kFp8RowBlock;
      float& scale = scales[static_cast<size_t>(b) * n_pad + r];
      if (r >= n) {
        std::memset(out, 0, kFp8RowBlock);
        scale = 1.0f;
        continue;
      }
      const Bf16Bits* in = x + static_cast<size_t>(r) * cols + size_t(b) * kFp8RowBlock;
      float amax = 0.0f;
      for (int c = 0; c < kFp8RowBlock; ++c) amax = std::max(amax, std::fabs(bf16_bits_to_float(in[c])));
      scale = fp8_rows_scale(amax);
      for (int c = 0; c < kFp8RowBlock; ++c) out[c] = quant::float_to_e4m3(bf16_bits_to_float(in[c]) / scale);
    }
  }
}

}  // namespace cohort::models::cpu
