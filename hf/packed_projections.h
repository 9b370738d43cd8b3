// A pre-quantized Hugging Face folder's projection weights (quantized_tensors.h)
// in the row layout that cohort's quantized GEMV reads (models/quant/
// row_packed.h), each cut to this rank's tensor-parallel slice: what an
// engine that keeps a checkpoint's weights packed uploads instead of the
// values the loader dequantized. A weight stored plain (modules_to_not_convert)
// or in a format the row layout cannot hold (act-order GPTQ), or whose
// tensor-parallel cut would split the format's groups, gives nullopt, and
// the engine uses the loaded values for it. Thread-safe: reads are
// const over the mapped files.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "hf/quantization_config.h"
#include "hf/safetensors.h"
#include "models/param_layout.h"
#include "models/quant/quantized_weight.h"
#include "models/quant/row_packed.h"

namespace cohort::hf {

class PackedProjections {
 public:
  // nullptr (no error) when the folder is not quantized.
  static Result<std::unique_ptr<PackedProjections>> open(const std::string& dir);

  // `param`'s slice (its ParamSpec cut) in the row layout, or nullopt as above.
  Result<std::optional<models::quant::RowPackedWeight>> read(const models::ParamSpec& param) const;

  // The format whose bytes the packed projections take, for memory plans:
  // kFp8Block for FP8 folders, kInt4 or kInt8 for GPTQ and AWQ by their bits.
  models::quant::WeightFormat bytes_like() const;

 private:
  PackedProjections(SafetensorsCheckpoint checkpoint, QuantizationConfig config, std::string dir)
      : checkpoint_(std::move(checkpoint)), config_(std::move(config)), dir_(std::move(dir)) {}
  SafetensorsCheckpoint checkpoint_;
  QuantizationConfig config_;
  std::string dir_;
};

}  // namespace cohort::hf
