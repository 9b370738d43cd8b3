// What the decode kernels' parity tests share (decode_ops_parity_test.cc,
// decode_projection_parity_test.cc): bf16 conversions, the tolerance, and a
// fixture with a CUDA backend that skips where no GPU is visible.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "base/half_float.h"
#include "models/cuda_backend.h"
#include "models/ops/decode_attention.h"
#include "tests/models/cuda_backend_test.h"
#include "tests/models/grad_check.h"

namespace cohort::models::decode_parity {

constexpr double kBf16Tol = 1e-2;
constexpr uint16_t kBf16NaN = 0x7fc0;

// Norm-relative error; infinite when `got` holds a NaN (an unwritten element).
using testing::norm_relative;

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16_bits(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits_to_float(v[i]);
  return out;
}
// v rounded through bf16, as a kernel reading a bf16 copy of it sees it.
inline std::vector<float> rounded(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}

class DecodeOpsParity : public testing::CudaBackendTest {
 protected:
  DecodeOpsParity() : CudaBackendTest("decode kernel parity tests") {}
  void SetUp() override {
    CudaBackendTest::SetUp();
    if (!IsSkipped()) stream_ = static_cast<CUstream_st*>(gpu_->stream());
  }
  // Attention's split scratch, its counts zeroed once: every launch must
  // leave them at zero for the next.
  cuda::DecodeAttentionScratch attention_scratch() {
    if (scratch_.partials == nullptr) {
      scratch_.partials = up(std::vector<float>(cuda::kDecodeAttnScratchFloats, NAN));
      scratch_.arrivals = up(std::vector<int>(cuda::kDecodeAttnScratchBlocks, 0));
    }
    return scratch_;
  }
  CUstream_st* stream_ = nullptr;
  cuda::DecodeAttentionScratch scratch_;
};

}  // namespace cohort::models::decode_parity
