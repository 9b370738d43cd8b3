// [model] quantize's round trip and the weight-format summary
// (load_quantization.h).
#include "hf/load_quantization.h"

#include <algorithm>
#include <vector>

#include "base/parallel_for.h"
#include "hf/quantization_config.h"
#include "hf/quantized_tensors.h"
#include "hf/safetensors.h"
#include "models/param_layout.h"

namespace cohort::hf {
namespace {

using models::ParamSpec;
using models::ShardDim;
using models::quant::WeightFormat;

// The groups each format quantizes in, along rows and columns of [out, in].
struct Grid {
  int64_t rows = 1, cols = 1;
};

Grid grid_of(WeightFormat format, const models::quant::QuantizeOptions& options) {
  if (format == WeightFormat::kFp8Block) return {options.block_rows, options.block_cols};
  return {1, options.group_size};
}

std::string describe_made(WeightFormat format) {
  const models::quant::QuantizeOptions options;
  models::quant::QuantizedWeight w;
  w.format = format;
  w.group_size = format == WeightFormat::kNf4 ? options.nf4_block : options.group_size;
  w.block_rows = options.block_rows, w.block_cols = options.block_cols;
  return w.describe();
}

// A shard quantizes as the whole weight does only if its cut falls on the
// grid: it starts on a group boundary and ends on one or at the weight's end.
Status check_cut_on_grid(const ParamSpec& p, WeightFormat format, Grid grid) {
  if (p.shard_dim == ShardDim::kReplicated || p.shape.size() != 2) return Status::ok();
  const bool rows = p.shard_dim == ShardDim::kRows;
  const int64_t unit = rows ? grid.rows : grid.cols;
  const int64_t begin = p.shard_begin, end = begin + (rows ? p.shape[0] : p.shape[1]);
  const int64_t whole = rows ? p.global_shape[0] : p.global_shape[1];
  if (begin % unit == 0 && (end % unit == 0 || end == whole)) return Status::ok();
  const std::string axis = rows ? "row" : "column";
  return invalid_argument(
      "model.quantize = \"" + std::string(to_string(format)) + "\": tensor parallelism cuts " +
      p.name + " at " + axis + " " + std::to_string(begin % unit ? begin : end) +
      ", inside a group of " + std::to_string(unit) + " " + axis +
      "s, so this rank would quantize it differently from the whole weight; use a "
      "tensor-parallel degree that cuts on multiples of " +
      std::to_string(unit) + ", or tensor_parallel 1");
}

}  // namespace

Result<std::optional<WeightFormat>> parse_quantize_option(const std::string& value) {
  if (value.empty() || value == "none") return std::optional<WeightFormat>();
  if (value == "fp8") return std::optional<WeightFormat>(WeightFormat::kFp8Block);
  if (value == "int8") return std::optional<WeightFormat>(WeightFormat::kInt8);
  if (value == "int4") return std::optional<WeightFormat>(WeightFormat::kInt4);
  return invalid_argument("model.quantize = \"" + value + "\" is not one of none, fp8, int8, int4");
}

Status quantize_round_trip_group(models::Model& model, int g, WeightFormat format) {
  const models::quant::QuantizeOptions options;
  const Grid grid = grid_of(format, options);
  const models::ParamGroup& group = model.layout().groups[g];
  std::vector<const ParamSpec*> projections;
  for (const ParamSpec& p : group.params) {
    if (!is_projection_weight(p.name) || p.shape.size() != 2) continue;
    COHORT_RETURN_IF_ERROR(check_cut_on_grid(p, format, grid));
    projections.push_back(&p);
  }
  if (projections.empty()) return Status::ok();
  const bool on_host = model.backend().device() == models::Device::kCpu;
  std::vector<float> host;
  float* data = model.params(g);
  if (!on_host) {
    host.resize(group.numel);
    model.backend().copy_to_host(host.data(), data, group.numel * sizeof(float));
    data = host.data();
  }
  std::vector<Status> results(projections.size(), Status::ok());
  parallel_for(projections.size(), [&](size_t i) {
    const ParamSpec& p = *projections[i];
    float* w = data + p.offset;
    auto q = models::quant::quantize(format, p.name, w, p.shape[0], p.shape[1], options);
    results[i] = q.is_ok() ? models::quant::dequantize(*q, w) : q.status();
  });
  for (const Status& s : results) COHORT_RETURN_IF_ERROR(s.with_context("model.quantize"));
  if (!on_host) model.backend().copy_from_host(model.params(g), host.data(), group.numel * sizeof(float));
  return Status::ok();
}

Status quantize_round_trip(models::Model& model, WeightFormat format) {
  for (int g = 0; g < model.num_groups(); ++g) COHORT_RETURN_IF_ERROR(quantize_round_trip_group(model, g, format));
  return Status::ok();
}

Result<std::optional<WeightFormat>> quantize_option_for(const std::string& quantize, const std::string& hf_dir) {
  COHORT_ASSIGN_OR_RETURN(const auto format, parse_quantize_option(quantize));
  if (!format || hf_dir.empty()) return format;
  COHORT_ASSIGN_OR_RETURN(const QuantizationConfig stored, load_quantization_config(hf_dir));
  if (stored.quantized()) {
    return invalid_argument("model.quantize = \"" + quantize + "\" but " + hf_dir + " is already quantized (" +
                            stored.describe() + "); remove model.quantize to load it as it is");
  }
  return format;
}

Status apply_quantize_option(models::Model& model, const std::string& quantize,
                             const std::string& hf_dir) {
  COHORT_ASSIGN_OR_RETURN(const auto format, quantize_option_for(quantize, hf_dir));
  return format ? quantize_round_trip(model, *format) : Status::ok();
}

std::string WeightFormatSummary::describe() const {
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [format, count] : weights_by_format) by_count.emplace_back(count, format);
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (const auto& [count, format] : by_count)
    out += (out.empty() ? "" : ", ") + std::to_string(count) + " " + format;
  return out;
}

Result<WeightFormatSummary> summarize_weight_formats(const models::ModelConfig& config,
                                                     const std::string& hf_dir,
                                                     const std::string& quantize) {
  COHORT_ASSIGN_OR_RETURN(const auto format, parse_quantize_option(quantize));
  COHORT_ASSIGN_OR_RETURN(const models::ParamLayout layout, models::make_param_layout(config, {}));
  std::optional<SafetensorsCheckpoint> checkpoint;
  QuantizationConfig stored;
  if (!hf_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(checkpoint, SafetensorsCheckpoint::open(hf_dir));
    COHORT_ASSIGN_OR_RETURN(stored, load_quantization_config(hf_dir));
  }
  WeightFormatSummary summary;
  for (const models::ParamGroup& group : layout.groups) {
    for (const ParamSpec& p : group.params) {
      std::string name = "f32";
      if (format && is_projection_weight(p.name)) {
        name = describe_made(*format);
      } else if (checkpoint) {
        auto found = stored_weight_format(*checkpoint, stored, p.name);
        if (!found.is_ok()) return found.status().with_context(hf_dir);
        name = *found;
      }
      ++summary.weights_by_format[name];
    }
  }
  return summary;
}

}  // namespace cohort::hf
