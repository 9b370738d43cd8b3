// CudaGraphEngine's quantized projections: each layer's q/k/v, o, gate/up
// and down in the row layout (models/quant/row_packed.h), fused as the bf16
// weights are (q|k|v rows, gate|up rows), made on the host (host_layer.h)
// and uploaded here. The step reads them through the quantized GEMV
// (models/ops/quant_gemv.h) up to 8 rows; beyond, e4m3 weights in 128 x 128
// blocks take the FP8 tensor cores (their activations quantized per row
// and 128 columns, cuBLASLt's block-scaled GEMM), the others the
// tensor-core skinny GEMM over the codes up to 64 rows or, beyond,
// expanded into bf16.
#include <algorithm>
#include <string>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/env_knobs.h"
#include "models/ops/fp8_rows.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {

size_t projection_bytes(const std::optional<quant::WeightFormat>& format, size_t rows, size_t cols) {
  if (!format) return rows * cols * 2;
  const size_t groups = (cols + 127) / 128;
  const bool four_bits = *format == quant::WeightFormat::kInt4;
  const bool zeros = *format != quant::WeightFormat::kFp8Block;
  return rows * cols / (four_bits ? 2 : 1) + rows * groups * 4 * (zeros ? 2 : 1);
}

Status CudaGraphEngine::upload_packed(Weight& weight, const quant::RowPackedWeight& w) {
  RowPackedView& view = weight.packed;
  view.kind = w.kind, view.rows = int(w.rows), view.cols = int(w.cols), view.group = int(w.group);
  // On the engine's stream, after device_alloc's zeros there (a plain
  // cudaMemcpy does not wait for a non-blocking stream's memset).
  auto put = [&](const void* data, size_t bytes) -> Result<void*> {
    COHORT_ASSIGN_OR_RETURN(void* p, device_alloc(bytes));
    COHORT_CUDA_CHECK(cudaMemcpyAsync(p, data, bytes, cudaMemcpyHostToDevice, stream_));
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return p;
  };
  COHORT_ASSIGN_OR_RETURN(void* codes, put(w.codes.data(), w.codes.size()));
  COHORT_ASSIGN_OR_RETURN(void* scales, put(w.scales.data(), w.scales.size() * 4));
  view.codes = static_cast<const uint8_t*>(codes), view.scales = static_cast<const float*>(scales);
  if (!w.zeros.empty()) {
    COHORT_ASSIGN_OR_RETURN(void* zeros, put(w.zeros.data(), w.zeros.size() * 4));
    view.zeros = static_cast<const float*>(zeros);
  }
  view.centred = quant::centred_uint4(w);
  const char* knob = read_env_knob(EnvKnob::kFp8Gemm);
  if (knob != nullptr && std::string(knob) == "0") return Status::ok();
  if (auto blocks = quant::fp8_block_scales(w)) {
    COHORT_ASSIGN_OR_RETURN(void* scales, put(blocks->data(), blocks->size() * 4));
    weight.fp8_scales = static_cast<const float*>(scales);
    fp8_weights_ = true;
  }
  return Status::ok();
}

bool CudaGraphEngine::fp8_gemm(const Weight& w, int n) const {
  return fp8_gemm_ready_ && w.fp8_scales != nullptr && n > models::cuda::kQuantGemvMaxRows;
}

void CudaGraphEngine::gemm_fp8(float* y, const Bf16* x, const Weight& w, int n, int in, int out, bool accumulate) {
  // Rows past n (up to a multiple of 4, which the row buffers hold) get
  // zero codes and add nothing.
  const int n_pad = models::fp8_rows_padded(n);
  if (x != fp8_x_holds_) models::cuda::quantize_rows_e4m3(fp8_x_, fp8_x_scales_, x, n, n_pad, in, stream_);
  fp8_x_holds_ = nullptr;
  TunedGemm::Fp8Operands operands;
  operands.x = fp8_x_, operands.x_scales = fp8_x_scales_, operands.w = w.packed.codes, operands.w_scales = w.fp8_scales;
  const Status s = lt_->run_fp8(y, operands, n_pad, in, out, accumulate);
  COHORT_CHECK_MSG(s.is_ok(), "[{}x{}]x[{}x{}] in e4m3: {}", n, in, out, in, s.message());
}

const Bf16* CudaGraphEngine::bf16_for(const Weight& w) {
  if (!w.quantized()) return w.bf16;
  models::cuda::dequantize_rows_bf16(expanded_, w.packed, stream_);
  return expanded_;
}

}  // namespace cohort::models::decode
