// CPU reference of the experts' bf16 SwiGLU MLPs (moe_experts.h): each
// sorted row through its expert's slices with the decode projections'
// references (gemv.h), whose layouts the stacked weights keep.
#include "models/ops/moe_experts.h"

#include <cstddef>
#include <vector>

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

void moe_pairs_swiglu(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* experts, int n, int k,
                      int H, int I) {
  for (int p = 0; p < n * k; ++p) {
    const Bf16Bits* w = w_gu + static_cast<size_t>(experts[p]) * 2 * I * H;
    gemv_swiglu_bf16(h + static_cast<size_t>(p) * I, x + static_cast<size_t>(p / k) * H, w, 1, H, I);
  }
}

void moe_pairs_down_add(float* out, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* experts,
                        const float* weights, int n, int k, int H, int I) {
  std::vector<float> ys(static_cast<size_t>(k) * H);
  for (int r = 0; r < n; ++r) {
    for (int j = 0; j < k; ++j) {
      const int p = r * k + j;
      gemv_bf16(ys.data() + static_cast<size_t>(j) * H, h + static_cast<size_t>(p) * I,
                w_down + static_cast<size_t>(experts[p]) * H * I, 1, I, H);
    }
    for (int o = 0; o < H; ++o) {
      float sum = 0.0f;
      for (int j = 0; j < k; ++j) sum += weights[r * k + j] * ys[static_cast<size_t>(j) * H + o];
      out[static_cast<size_t>(r) * H + o] += sum;
    }
  }
}

}  // namespace cohort::models::cpu
