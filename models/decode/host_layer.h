// One decoder layer's weights as the bf16 graph engine uploads them, made on
// the host from the layer's block group while its values are there: the
// fused projections (q|k|v rows, o, gate|up rows, down) in bf16 or, where
// the engine's options give a format or a pre-quantized folder's weights,
// in the row layout (models/quant/row_packed.h); a sparse layer's router and
// stacked experts in bf16 (models/ops/moe_experts.h) instead of its MLP; the
// norms and biases in fp32.
//
// The engine makes one per layer as the loader fills each block
// (models::Model::Buffers::kStreamedBlocks, group_filled), so a model is
// never whole in fp32 on the host: the layers wait in bf16 (or packed)
// until the GPU is ready for them. Host code only; tested on CPU against
// the whole model's values.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/status.h"
#include "models/model.h"
#include "models/ops/decode_rows.h"
#include "models/quant/quantized_weight.h"
#include "models/quant/row_packed.h"

namespace cohort::models::decode {

// Where the projections' storage comes from (CudaEngineOptions'): a
// pre-quantized folder's own packed weights, by parameter (nullopt: it has
// none for it), else the loaded values quantized to projection_format, else
// bf16. Called from several threads at once.
struct HostLayerFormats {
  std::optional<quant::WeightFormat> projection_format;
  std::function<Result<std::optional<quant::RowPackedWeight>>(const ParamSpec&)> packed_projection;
};

struct HostLayer {
  enum Projection { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };
  // bf16 [rows, cols] each, empty where packed (or a sparse layer's MLP).
  std::array<std::vector<Bf16Bits>, 4> bf16;
  std::array<std::optional<quant::RowPackedWeight>, 4> packed;
  bool sparse = false;
  std::vector<Bf16Bits> router;        // [E, H]
  std::vector<Bf16Bits> experts_gu;    // [E, 2 Ie, H]: each expert's gate rows, then its up rows
  std::vector<Bf16Bits> experts_down;  // [E, H, Ie]
  std::vector<float> attn_norm, mlp_norm, q_norm, k_norm;
  std::vector<float> qkv_bias;  // q|k|v biases, empty without attention biases
};

// Layer `layer` of `model` (a CPU-backend model whose block group holds
// that layer's values now).
Result<HostLayer> make_host_layer(const Model& model, int layer, const HostLayerFormats& formats);

}  // namespace cohort::models::decode
