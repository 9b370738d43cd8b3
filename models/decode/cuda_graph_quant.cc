// CudaGraphEngine's quantized projections: each layer's q/k/v, o, gate/up
// and down in the row layout (models/quant/row_packed.h), fused as the bf16
// weights are (q|k|v rows, gate|up rows): a pre-quantized folder's own
// weights (CudaEngineOptions::packed_projection), or the loaded ones
// quantized as models::quant::quantize() defines projection_format. The
// step reads them through the quantized GEMV (models/ops/quant_gemv.h) or,
// beyond its rows, expanded into bf16.
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

Result<std::vector<CudaGraphEngine::PackedLayer>> CudaGraphEngine::pack_projections(models::Model& model) {
  std::vector<PackedLayer> packed(static_cast<size_t>(config_.layers));
  if (!options_.packed_projection && !options_.projection_format) return packed;
  const models::ParamLayout& layout = model.layout();
  // One fused projection from its parts (each an HF weight of this layer):
  // the folder's own packed weights when it gives every part, else the
  // loaded values quantized to projection_format, else nothing (bf16).
  auto fuse = [&](int l, const std::vector<const char*>& names) -> Result<std::optional<quant::RowPackedWeight>> {
    const int g = layout.block_group(l);
    const models::ParamGroup& group = layout.groups[g];
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    std::vector<const models::ParamSpec*> specs;
    for (const char* name : names) {
      const models::ParamSpec* spec = group.find(prefix + name);
      if (!spec) return internal_error(prefix + name + " is not in the layout");
      specs.push_back(spec);
    }
    std::vector<quant::RowPackedWeight> parts;
    if (options_.packed_projection) {
      for (const models::ParamSpec* spec : specs) {
        COHORT_ASSIGN_OR_RETURN(auto part, options_.packed_projection(*spec));
        if (!part) break;
        parts.push_back(std::move(*part));
      }
      if (parts.size() == specs.size()) {
        auto stacked = quant::stack_rows(parts);
        if (stacked.is_ok()) return std::optional<quant::RowPackedWeight>(std::move(*stacked));
      }
      parts.clear();
    }
    if (!options_.projection_format) return std::optional<quant::RowPackedWeight>();
    const float* values = model.params(g);
    for (const models::ParamSpec* spec : specs) {
      COHORT_ASSIGN_OR_RETURN(auto part, quantize_rows(*options_.projection_format, spec->name.c_str(),
                                                       values + spec->offset, spec->shape[0], spec->shape[1]));
      parts.push_back(std::move(part));
    }
    COHORT_ASSIGN_OR_RETURN(auto stacked, quant::stack_rows(parts));
    return std::optional<quant::RowPackedWeight>(std::move(stacked));
  };
  static const std::vector<std::vector<const char*>> kFused = {
      {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"},
      {"self_attn.o_proj.weight"},
      {"mlp.gate_proj.weight", "mlp.up_proj.weight"},
      {"mlp.down_proj.weight"}};
  // Reading and quantizing are the slow part (a pass over every weight):
  // layers in parallel on the host.
  std::vector<Status> results(packed.size(), Status::ok());
  parallel_for(packed.size(), [&](size_t l) {
    for (size_t i = 0; i < kFused.size() && results[l].is_ok(); ++i) {
      // A sparse layer's experts stay bf16 (moe_experts.h): only its attention packs.
      if (i >= 2 && config_.is_moe_layer(static_cast<int>(l))) continue;
      auto made = fuse(static_cast<int>(l), kFused[i]);
      if (made.is_ok()) packed[l][i] = std::move(*made);
      else results[l] = made.status().with_context("layer " + std::to_string(l));
    }
  });
  for (const Status& s : results) COHORT_RETURN_IF_ERROR(s);
  for (const PackedLayer& layer : packed)
    for (const auto& w : layer)
      if (w && packed_format_.empty()) packed_format_ = w->format;
  return packed;
}

const Bf16* CudaGraphEngine::bf16_for(const Weight& w) {
  if (!w.quantized()) return w.bf16;
  models::cuda::dequantize_rows_bf16(expanded_, w.packed, stream_);
  return expanded_;
}

}  // namespace cohort::models::decode
