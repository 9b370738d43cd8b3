// CudaGraphEngine's quantized projections (CudaEngineOptions::projection_format):
// each layer's q/k/v, o, gate/up and down quantized on the host as
// models::quant::quantize() defines the format, packed into the row layout
// (models/quant/row_packed.h), fused as the bf16 weights are (q|k|v rows,
// gate|up rows) and uploaded; the step reads them through the quantized
// GEMV (models/ops/quant_gemv.h) or, beyond its rows, expanded into bf16.
#include <algorithm>

#include "base/cuda_check.h"
#include "base/parallel_for.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {
namespace {

// The quantizer's output in the row layout, rows [rows, cols] of `w`.
Result<quant::RowPackedWeight> quantize_rows(quant::WeightFormat format, const char* name,
                                             const float* w, int64_t rows, int64_t cols) {
  COHORT_ASSIGN_OR_RETURN(const quant::QuantizedWeight q, quant::quantize(format, name, w, rows, cols));
  return quant::pack_rows(q);
}

}  // namespace

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
  auto put = [&](const void* data, size_t bytes) -> Result<void*> {
    COHORT_ASSIGN_OR_RETURN(void* p, device_alloc(bytes));
    COHORT_CUDA_CHECK(cudaMemcpy(p, data, bytes, cudaMemcpyHostToDevice));
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

Status CudaGraphEngine::upload_quantized_layers(models::Model& model) {
  const models::ParamLayout& layout = model.layout();
  const int64_t H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const quant::WeightFormat format = *options_.projection_format;
  // Quantizing is the slow part (a pass over every weight): layers in
  // parallel on the host, uploads in order.
  struct Packed {
    quant::RowPackedWeight qkv, o, gu, down;
    Status status;
  };
  auto pack = [&](int l) {
    Packed p;
    const models::BlockTensors w = layout.block_tensors(l, model.params(layout.block_group(l)));
    auto stacked = [&](std::vector<std::pair<const float*, int64_t>> parts, int64_t cols,
                       quant::RowPackedWeight* out) -> Status {
      std::vector<quant::RowPackedWeight> packed;
      for (const auto& [data, rows] : parts) {
        COHORT_ASSIGN_OR_RETURN(auto one, quantize_rows(format, "projection", data, rows, cols));
        packed.push_back(std::move(one));
      }
      COHORT_ASSIGN_OR_RETURN(*out, quant::stack_rows(packed));
      return Status::ok();
    };
    p.status = stacked({{w.q, Qd}, {w.k, KVd}, {w.v, KVd}}, H, &p.qkv);
    if (p.status.is_ok()) p.status = stacked({{w.o, H}}, Qd, &p.o);
    if (p.status.is_ok()) p.status = stacked({{w.gate, I}, {w.up, I}}, H, &p.gu);
    if (p.status.is_ok()) p.status = stacked({{w.down, H}}, I, &p.down);
    return p;
  };
  const int L = config_.layers;
  constexpr int kLayersAtOnce = 8;  // bounds the host copies held at once
  for (int first = 0; first < L; first += kLayersAtOnce) {
    const int count = std::min(kLayersAtOnce, L - first);
    std::vector<Packed> packed(static_cast<size_t>(count));
    parallel_for(size_t(count), [&](size_t i) { packed[i] = pack(first + int(i)); });
    for (int i = 0; i < count; ++i) {
      Packed& p = packed[size_t(i)];
      if (!p.status.is_ok()) {
        return invalid_argument("layer " + std::to_string(first + i) + ": " + p.status.message());
      }
      Layer& d = layers_[first + i];
      COHORT_ASSIGN_OR_RETURN(d.wqkv.packed, upload_packed(p.qkv));
      COHORT_ASSIGN_OR_RETURN(d.wo.packed, upload_packed(p.o));
      COHORT_ASSIGN_OR_RETURN(d.wgu.packed, upload_packed(p.gu));
      COHORT_ASSIGN_OR_RETURN(d.wdown.packed, upload_packed(p.down));
    }
  }
  const size_t largest = size_t(std::max({(Qd + 2 * KVd) * H, H * Qd, 2 * I * H, H * I}));
  COHORT_ASSIGN_OR_RETURN(void* expanded, device_alloc(largest * 2));
  expanded_ = static_cast<Bf16*>(expanded);
  return Status::ok();
}

const Bf16* CudaGraphEngine::bf16_for(const Weight& w, int /*n*/) {
  if (!w.quantized()) return w.bf16;
  models::cuda::dequantize_rows_bf16(expanded_, w.packed, stream_);
  return expanded_;
}

}  // namespace cohort::models::decode
