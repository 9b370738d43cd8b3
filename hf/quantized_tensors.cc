// Reading quantized tensor sets (quantized_tensors.h): find the set by name,
// check every tensor's dtype and shape against what the config and the
// weight's shape imply, copy the bytes out of the mapped file, and let
// models/quant validate the whole.
#include "hf/quantized_tensors.h"

#include <cstring>

namespace cohort::hf {
namespace {

using models::quant::QuantizedWeight;
using models::quant::WeightFormat;

struct StoredTensor {
  std::string name;
  const SafetensorsFile* file = nullptr;
  const SafetensorsInfo* info = nullptr;
};

Result<std::optional<StoredTensor>> find_tensor(const SafetensorsCheckpoint& ckpt,
                                                const std::string& name) {
  if (!ckpt.contains(name)) return std::optional<StoredTensor>();
  COHORT_ASSIGN_OR_RETURN(const SafetensorsFile* file, ckpt.file(name));
  const SafetensorsInfo* info = file->find(name);
  if (!info)
    return not_found(file->path() + ": no tensor named " + name + " although the index lists it");
  return std::optional<StoredTensor>(StoredTensor{name, file, info});
}

Result<StoredTensor> need_tensor(const SafetensorsCheckpoint& ckpt, const std::string& name,
                                 const std::string& why) {
  COHORT_ASSIGN_OR_RETURN(auto found, find_tensor(ckpt, name));
  if (!found) return not_found(name + " is missing (" + why + ")");
  return *found;
}

bool is_float(const StoredTensor& t) {
  return t.info->supported && t.info->dtype != DType::kI32;
}

Status expect(const StoredTensor& t, bool want_int32, const std::vector<int64_t>& shape,
              const std::string& why) {
  const bool dtype_ok = want_int32 ? t.info->dtype_name == "I32" : is_float(t);
  if (dtype_ok && t.info->shape == shape) return Status::ok();
  return invalid_argument(t.name + " is " + t.info->dtype_name + " " +
                          models::shape_string(t.info->shape) + "; " + why + " needs " +
                          (want_int32 ? "I32 " : "F32/BF16/F16 ") + models::shape_string(shape));
}

Result<std::vector<uint8_t>> bytes_of(const StoredTensor& t) {
  COHORT_ASSIGN_OR_RETURN(std::string_view raw, t.file->raw_bytes(t.name));
  return std::vector<uint8_t>(raw.begin(), raw.end());
}

Result<std::vector<float>> floats_of(const StoredTensor& t) {
  size_t n = 1;
  for (int64_t d : t.info->shape) n *= size_t(d);
  std::vector<float> out(n);
  COHORT_RETURN_IF_ERROR(t.file->read_f32(t.name, out.data()));
  return out;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::string prefix_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() <= suffix.size() ||
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return weight_name.substr(0, weight_name.size() - suffix.size());
}

// FP8: the scale tensor's shape says which granularity it is.
Result<QuantizedWeight> read_fp8(const SafetensorsCheckpoint& ckpt,
                                 const QuantizationConfig& config, const StoredTensor& weight,
                                 const std::string& prefix, int64_t out, int64_t in,
                                 bool with_data) {
  QuantizedWeight q;
  q.name = weight.name;
  q.rows = out, q.cols = in, q.bits = 8;
  COHORT_ASSIGN_OR_RETURN(auto scale, find_tensor(ckpt, prefix + ".weight_scale_inv"));
  if (!scale) {
    COHORT_ASSIGN_OR_RETURN(scale, find_tensor(ckpt, prefix + ".weight_scale"));
  }
  if (!scale) {
    return not_found(weight.name + " is F8_E4M3 but neither " + prefix + ".weight_scale_inv nor " +
                     prefix + ".weight_scale is in the checkpoint");
  }
  if (!is_float(*scale))
    return invalid_argument(scale->name + " is " + scale->info->dtype_name +
                            "; scales are F32/BF16/F16");
  const std::vector<int64_t>& s = scale->info->shape;
  int64_t numel = 1;
  for (int64_t d : s) numel *= d;
  const auto [block_rows, block_cols] = config.weight_block_size;
  const std::vector<int64_t> tiles =
      block_rows > 0 ? std::vector<int64_t>{ceil_div(out, block_rows), ceil_div(in, block_cols)}
                     : std::vector<int64_t>{};
  if (block_rows > 0 && s == tiles) {
    q.format = WeightFormat::kFp8Block;
    q.block_rows = block_rows, q.block_cols = block_cols;
  } else if (numel == 1) {
    q.format = WeightFormat::kFp8Tensor;
  } else if (s == std::vector<int64_t>{out} || s == std::vector<int64_t>{out, 1}) {
    q.format = WeightFormat::kFp8Channel;
  } else {
    return invalid_argument(scale->name + " has shape " + models::shape_string(s) + "; " +
                            (block_rows > 0 ? "weight_block_size [" + std::to_string(block_rows) +
                                                  ", " + std::to_string(block_cols) + "] needs " +
                                                  models::shape_string(tiles) + ", "
                                            : std::string()) +
                            "a per-tensor scale has one value and a per-channel one [" +
                            std::to_string(out) + "]");
  }
  if (with_data) {
    COHORT_ASSIGN_OR_RETURN(q.packed, bytes_of(weight));
    COHORT_ASSIGN_OR_RETURN(q.scales, floats_of(*scale));
  }
  return q;
}

// GPTQ and AWQ: qweight, qzeros, scales (and GPTQ's g_idx) at the shapes
// their packings imply.
Result<QuantizedWeight> read_int4_set(const SafetensorsCheckpoint& ckpt,
                                      const QuantizationConfig& config, const std::string& prefix,
                                      const std::string& weight_name, int64_t out, int64_t in,
                                      bool with_data) {
  const bool gptq = config.method == QuantMethod::kGptq;
  QuantizedWeight q;
  q.format = gptq ? WeightFormat::kGptq : WeightFormat::kAwq;
  q.name = weight_name;
  q.rows = out, q.cols = in, q.bits = config.bits;
  q.group_size = config.group_size == -1 ? in : config.group_size;
  q.gptq_zeros = config.gptq_zeros;
  const int64_t per_word = 32 / q.bits;
  const std::string what =
      config.describe() + " of a [" + std::to_string(out) + ", " + std::to_string(in) + "] weight";
  if ((gptq && in % per_word != 0) || out % per_word != 0 || (!gptq && in % q.group_size != 0)) {
    return invalid_argument(
        weight_name + ": " + what + " cannot be packed: in_features and out_features must be " +
        "multiples of " + std::to_string(per_word) + (gptq ? "" : " and of the group size"));
  }
  const int64_t groups = ceil_div(in, q.group_size);
  COHORT_ASSIGN_OR_RETURN(StoredTensor qweight, need_tensor(ckpt, prefix + ".qweight", what));
  COHORT_ASSIGN_OR_RETURN(StoredTensor qzeros, need_tensor(ckpt, prefix + ".qzeros", what));
  COHORT_ASSIGN_OR_RETURN(StoredTensor scales, need_tensor(ckpt, prefix + ".scales", what));
  COHORT_RETURN_IF_ERROR(expect(
      qweight, true,
      gptq ? std::vector<int64_t>{in / per_word, out} : std::vector<int64_t>{in, out / per_word},
      what));
  COHORT_RETURN_IF_ERROR(expect(qzeros, true, {groups, out / per_word}, what));
  COHORT_RETURN_IF_ERROR(expect(scales, false, {groups, out}, what));
  COHORT_ASSIGN_OR_RETURN(auto g_idx, find_tensor(ckpt, prefix + ".g_idx"));
  if (gptq && g_idx) COHORT_RETURN_IF_ERROR(expect(*g_idx, true, {in}, what));
  if (gptq && !g_idx && config.desc_act) {
    return not_found(
        prefix + ".g_idx is missing: desc_act (act-order) checkpoints need each column's group");
  }
  if (!with_data) return q;
  COHORT_ASSIGN_OR_RETURN(q.packed, bytes_of(qweight));
  COHORT_ASSIGN_OR_RETURN(q.zeros, bytes_of(qzeros));
  COHORT_ASSIGN_OR_RETURN(q.scales, floats_of(scales));
  if (gptq && g_idx) {
    COHORT_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, bytes_of(*g_idx));
    q.g_idx.resize(raw.size() / 4);
    std::memcpy(q.g_idx.data(), raw.data(), q.g_idx.size() * 4);
  }
  return q;
}

// The set stored for weight_name, read fully or (with_data false) its
// description only.
Result<std::optional<QuantizedWeight>> recognise(const SafetensorsCheckpoint& ckpt,
                                                 const QuantizationConfig& config,
                                                 const std::string& weight_name,
                                                 const std::vector<int64_t>& shape,
                                                 bool with_data) {
  const std::string prefix = prefix_of(weight_name);
  if (prefix.empty() || shape.size() != 2) return std::optional<QuantizedWeight>();
  COHORT_ASSIGN_OR_RETURN(auto weight, find_tensor(ckpt, weight_name));
  if (weight && weight->info->dtype_name.rfind("F8_", 0) == 0) {
    if (config.method != QuantMethod::kFp8) {
      return invalid_argument(
          weight_name + " is " + weight->info->dtype_name +
          " but config.json's quantization_config does not declare quant_method \"fp8\"");
    }
    if (weight->info->dtype_name != "F8_E4M3") {
      return invalid_argument(weight_name + " is " + weight->info->dtype_name +
                              "; cohort reads F8_E4M3 weights");
    }
    if (weight->info->shape != shape) {
      return invalid_argument(weight_name + " has shape " +
                              models::shape_string(weight->info->shape) + ", config.json implies " +
                              models::shape_string(shape));
    }
    COHORT_ASSIGN_OR_RETURN(QuantizedWeight q,
                            read_fp8(ckpt, config, *weight, prefix, shape[0], shape[1], with_data));
    return std::optional<QuantizedWeight>(std::move(q));
  }
  if (weight || !ckpt.contains(prefix + ".qweight")) return std::optional<QuantizedWeight>();
  if (config.method != QuantMethod::kGptq && config.method != QuantMethod::kAwq) {
    return invalid_argument(
        prefix +
        ".qweight is in the checkpoint but config.json's quantization_config declares "
        "neither gptq nor awq");
  }
  COHORT_ASSIGN_OR_RETURN(QuantizedWeight q, read_int4_set(ckpt, config, prefix, weight_name,
                                                           shape[0], shape[1], with_data));
  return std::optional<QuantizedWeight>(std::move(q));
}

}  // namespace

Result<std::optional<QuantizedWeight>> read_quantized_weight(const SafetensorsCheckpoint& ckpt,
                                                             const QuantizationConfig& config,
                                                             const std::string& weight_name,
                                                             const std::vector<int64_t>& shape) {
  COHORT_ASSIGN_OR_RETURN(auto q, recognise(ckpt, config, weight_name, shape, /*with_data=*/true));
  if (q) COHORT_RETURN_IF_ERROR(models::quant::validate(*q));
  return q;
}

Result<std::string> stored_weight_format(const SafetensorsCheckpoint& ckpt,
                                         const QuantizationConfig& config,
                                         const std::string& name) {
  COHORT_ASSIGN_OR_RETURN(auto tensor, find_tensor(ckpt, name));
  std::vector<int64_t> shape = tensor ? tensor->info->shape : std::vector<int64_t>{};
  if (!tensor) {
    // Only a quantized set stands in for a missing P.weight; its shape is
    // what the set says (qweight's, unpacked).
    const std::string prefix = prefix_of(name);
    COHORT_ASSIGN_OR_RETURN(auto qweight, find_tensor(ckpt, prefix + ".qweight"));
    if (prefix.empty() || !qweight) return not_found("no tensor named " + name);
    const int64_t per_word = config.bits > 0 ? 32 / config.bits : 8;
    const auto& s = qweight->info->shape;
    if (s.size() != 2) return invalid_argument(qweight->name + " is not 2-D");
    shape = config.method == QuantMethod::kGptq ? std::vector<int64_t>{s[1], s[0] * per_word}
                                                : std::vector<int64_t>{s[1] * per_word, s[0]};
  }
  COHORT_ASSIGN_OR_RETURN(auto q, recognise(ckpt, config, name, shape, /*with_data=*/false));
  if (!q) return std::string(dtype_name(tensor->info->dtype));
  if (q->format == WeightFormat::kGptq || q->format == WeightFormat::kAwq) return config.describe();
  return q->describe();
}

Status dequantize_param_rows(const QuantizedWeight& weight, const models::ParamSpec& param,
                             int64_t row_begin, int64_t row_end, float* param_data) {
  const int64_t cols = param.shape[1];
  if (param.shard_dim != models::ShardDim::kCols) {
    const int64_t first = param.shard_dim == models::ShardDim::kRows ? param.shard_begin : 0;
    return models::quant::dequantize_rows(weight, first + row_begin, first + row_end,
                                          param_data + row_begin * cols);
  }
  // Row-parallel (o_proj, down_proj): whole rows of the global weight, then
  // this rank's columns of them.
  std::vector<float> rows(static_cast<size_t>((row_end - row_begin) * weight.cols));
  COHORT_RETURN_IF_ERROR(models::quant::dequantize_rows(weight, row_begin, row_end, rows.data()));
  for (int64_t r = row_begin; r < row_end; ++r) {
    std::memcpy(param_data + r * cols,
                rows.data() + (r - row_begin) * weight.cols + param.shard_begin,
                size_t(cols) * sizeof(float));
  }
  return Status::ok();
}

}  // namespace cohort::hf
