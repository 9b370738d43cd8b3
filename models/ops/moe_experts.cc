// CPU reference of the experts' bf16 SwiGLU MLPs (moe_experts.h): each
// sorted row through its expert's slices with the decode projections'
// references (gemv.h), whose layouts the stacked weights keep.
#include "models/ops/moe_experts.h"

#include <cstddef>

#include "models/ops/gemv.h"

namespace cohort::models::cpu {

void moe_experts_swiglu(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* offsets,
                        const int32_t* source_rows, int E, int H, int I) {
  for (int e = 0; e < E; ++e) {
    const Bf16Bits* w = w_gu + static_cast<size_t>(e) * 2 * I * H;  // I gate rows, then I up rows
    for (int r = offsets[e]; r < offsets[e + 1]; ++r)
      gemv_swiglu_bf16(h + static_cast<size_t>(r) * I, x + static_cast<size_t>(source_rows[r]) * H, w, 1, H, I);
  }
}

void moe_experts_down(float* ys, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* offsets, int E,
                      int H, int I) {
  for (int e = 0; e < E; ++e) {
    const Bf16Bits* w = w_down + static_cast<size_t>(e) * H * I;
    for (int r = offsets[e]; r < offsets[e + 1]; ++r)
      gemv_bf16(ys + static_cast<size_t>(r) * H, h + static_cast<size_t>(r) * I, w, 1, I, H);
  }
}

}  // namespace cohort::models::cpu
