// PackedProjections (packed_projections.h).
#include "hf/packed_projections.h"

#include "hf/quantized_tensors.h"

namespace cohort::hf {

Result<std::unique_ptr<PackedProjections>> PackedProjections::open(const std::string& dir) {
  COHORT_ASSIGN_OR_RETURN(QuantizationConfig config, load_quantization_config(dir));
  if (!config.quantized()) return std::unique_ptr<PackedProjections>();
  COHORT_ASSIGN_OR_RETURN(SafetensorsCheckpoint checkpoint, SafetensorsCheckpoint::open(dir));
  return std::unique_ptr<PackedProjections>(new PackedProjections(std::move(checkpoint), std::move(config), dir));
}

Result<std::optional<models::quant::RowPackedWeight>> PackedProjections::read(const models::ParamSpec& p) const {
  using Packed = std::optional<models::quant::RowPackedWeight>;
  if (p.shape.size() != 2) return Packed();
  auto stored = read_quantized_weight(checkpoint_, config_, p.name, p.global_shape);
  if (!stored.is_ok()) return stored.status().with_context(dir_);
  if (!*stored) return Packed();
  auto packed = models::quant::pack_rows(**stored);
  if (!packed.is_ok()) return Packed();  // no row layout: the engine takes the loaded values
  int64_t row_begin = 0, col_begin = 0;
  if (p.shard_dim == models::ShardDim::kRows) row_begin = p.shard_begin;
  if (p.shard_dim == models::ShardDim::kCols) col_begin = p.shard_begin;
  if (row_begin == 0 && col_begin == 0 && p.shape == p.global_shape) return Packed(std::move(*packed));
  // A cut through the format's groups (a 128-column FP8 tile split by a
  // rank's columns): the loaded values serve that weight instead.
  auto cut = models::quant::slice(*packed, row_begin, p.shape[0], col_begin, p.shape[1]);
  if (!cut.is_ok()) return Packed();
  return Packed(std::move(*cut));
}

models::quant::WeightFormat PackedProjections::bytes_like() const {
  if (config_.method == QuantMethod::kFp8) return models::quant::WeightFormat::kFp8Block;
  return config_.bits == 8 ? models::quant::WeightFormat::kInt8 : models::quant::WeightFormat::kInt4;
}

}  // namespace cohort::hf
