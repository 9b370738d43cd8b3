// CudaGraphEngine's quantized projections: each layer's q/k/v, o, gate/up
// and down in the row layout (models/quant/row_packed.h), fused as the bf16
// weights are (q|k|v rows, gate|up rows), made on the host (host_layer.h)
// and uploaded here. The step reads them through the quantized GEMV
// (models/ops/quant_gemv.h) up to 8 rows, the tensor-core skinny GEMM over
// the codes up to 64, or, beyond, expanded into bf16.
#include <algorithm>

#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {

size_t projection_bytes(const std::optional<quant::WeightFormat>& format, size_t rows, size_t cols) {
  if (!format) return rows * cols * 2;
  const size_t groups = (cols + 127) / 128;
  const bool four_bits = *format == quant::WeightFormat::kInt4;
  const bool zeros = *format != quant::WeightFormat::kFp8Block;
  return rows * cols / (four_bits ? 2 : 1) + rows * groups * 4 * (zeros ? 2 : 1);
}

Result<RowPackedView> CudaGraphEngine::upload_packed(const quant::RowPackedWeight& w) {
  RowPackedView view;
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
  return view;
}

const Bf16* CudaGraphEngine::bf16_for(const Weight& w) {
  if (!w.quantized()) return w.bf16;
  models::cuda::dequantize_rows_bf16(expanded_, w.packed, stream_);
  return expanded_;
}

}  // namespace cohort::models::decode
