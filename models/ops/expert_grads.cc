// CPU reference of the experts' weight gradients (expert_grads.h).
#include "models/ops/expert_grads.h"

#include <vector>

#include "base/half_float.h"

namespace cohort::models::cpu {

void expert_weight_grads(float* dw, size_t expert_stride, const Bf16Bits* g, const Bf16Bits* x,
                         const int32_t* offsets, int E, int O, int I) {
  std::vector<float> xr(static_cast<size_t>(I));
  for (int e = 0; e < E; ++e) {
    float* d = dw + static_cast<size_t>(e) * expert_stride;
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const Bf16Bits* gr = g + static_cast<size_t>(r) * O;
      for (int i = 0; i < I; ++i) xr[i] = bf16_bits_to_float(x[static_cast<size_t>(r) * I + i]);
      for (int o = 0; o < O; ++o) {
        const float go = bf16_bits_to_float(gr[o]);
        float* row = d + static_cast<size_t>(o) * I;
        for (int i = 0; i < I; ++i) row[i] += go * xr[i];
      }
    }
  }
}

}  // namespace cohort::models::cpu
