// LoraConfig: names, checks, shapes and the one-line plan (lora_config.h).
#include "models/lora_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace cohort::models {

const char* peft_module_name(LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ:
      return "q_proj";
    case LoraTarget::kK:
      return "k_proj";
    case LoraTarget::kV:
      return "v_proj";
    case LoraTarget::kO:
      return "o_proj";
    case LoraTarget::kGate:
      return "gate_proj";
    case LoraTarget::kUp:
      return "up_proj";
    case LoraTarget::kDown:
      return "down_proj";
  }
  return "?";
}

const char* hf_module_path(LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ:
      return "self_attn.q_proj";
    case LoraTarget::kK:
      return "self_attn.k_proj";
    case LoraTarget::kV:
      return "self_attn.v_proj";
    case LoraTarget::kO:
      return "self_attn.o_proj";
    case LoraTarget::kGate:
      return "mlp.gate_proj";
    case LoraTarget::kUp:
      return "mlp.up_proj";
    case LoraTarget::kDown:
      return "mlp.down_proj";
  }
  return "?";
}

bool parse_lora_target(std::string_view name, LoraTarget* target) {
  for (LoraTarget t : kAllLoraTargets) {
    if (name == peft_module_name(t)) {
      *target = t;
      return true;
    }
  }
  return false;
}

bool is_column_parallel(LoraTarget target) {
  return target != LoraTarget::kO && target != LoraTarget::kDown;
}

const char* to_string(LoraInit init) {
  return init == LoraInit::kGaussian ? "gaussian" : "kaiming_uniform";
}

float LoraConfig::scale() const {
  return float(use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank));
}

bool LoraConfig::has_target(LoraTarget target) const {
  return std::find(targets.begin(), targets.end(), target) != targets.end();
}

Status LoraConfig::validate() const {
  if (rank < 1 || rank > kMaxRank)
    return invalid_argument(fmt::format("lora: rank {} must be between 1 and {}", rank, kMaxRank));
  if (!(alpha > 0) || !std::isfinite(alpha))
    return invalid_argument(fmt::format("lora: alpha {} must be a positive number", alpha));
  if (!(dropout >= 0 && dropout < 1))
    return invalid_argument(fmt::format("lora: dropout {} must be in [0, 1)", dropout));
  if (targets.empty()) return invalid_argument("lora: no target modules");
  for (size_t i = 0; i < targets.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (targets[i] == targets[j])
        return invalid_argument(std::string("lora: target module ") + peft_module_name(targets[i]) +
                                " named twice");
  if (base_dtype != DType::kBF16 && base_dtype != DType::kF32)
    return invalid_argument(std::string("lora: a frozen base in ") + dtype_name(base_dtype) +
                            " is not available (bf16 or fp32)");
  return Status::ok();
}

const char* base_dtype_name(const LoraConfig& lora) {
  switch (lora.base_format) {
    case LoraConfig::BaseFormat::kNf4: return "nf4";
    case LoraConfig::BaseFormat::kFp8: return "fp8";
    case LoraConfig::BaseFormat::kPlain: break;
  }
  return lora.base_dtype == DType::kF32 ? "fp32" : "bf16";
}

Result<LoraConfig> make_lora_config(int rank, double alpha, double dropout,
                                    const std::vector<std::string>& target_modules, bool use_rslora,
                                    const std::string& init, const std::string& base_dtype) {
  LoraConfig lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.dropout = dropout;
  lora.use_rslora = use_rslora;
  lora.targets.clear();
  if (target_modules.size() == 1 && target_modules[0] == "all-linear") {
    lora.targets.assign(std::begin(kAllLoraTargets), std::end(kAllLoraTargets));
  } else {
    for (const std::string& name : target_modules) {
      LoraTarget t;
      if (!parse_lora_target(name, &t))
        return invalid_argument(
            "lora: unknown target module \"" + name +
            "\" (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or "
            "\"all-linear\" alone)");
      lora.targets.push_back(t);
    }
    std::sort(lora.targets.begin(),
              lora.targets.end());  // block order, whatever order they were named in
  }
  if (init == "kaiming_uniform")
    lora.init = LoraInit::kKaimingUniform;
  else if (init == "gaussian")
    lora.init = LoraInit::kGaussian;
  else
    return invalid_argument("lora: unknown init \"" + init + "\" (kaiming_uniform or gaussian)");
  if (base_dtype == "bf16" || base_dtype == "nf4" || base_dtype == "fp8")
    lora.base_dtype = DType::kBF16;
  else if (base_dtype == "fp32")
    lora.base_dtype = DType::kF32;
  else
    return invalid_argument("lora: base_dtype \"" + base_dtype + "\" is not available (bf16, fp32, nf4 or fp8)");
  if (base_dtype == "nf4") lora.base_format = LoraConfig::BaseFormat::kNf4;
  if (base_dtype == "fp8") lora.base_format = LoraConfig::BaseFormat::kFp8;
  COHORT_RETURN_IF_ERROR(lora.validate());
  return lora;
}

ProjectionShape projection_shape(const ModelConfig& c, LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ:
      return {c.q_dim(), c.hidden};
    case LoraTarget::kK:
    case LoraTarget::kV:
      return {c.kv_dim(), c.hidden};
    case LoraTarget::kO:
      return {c.hidden, c.q_dim()};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return {c.intermediate, c.hidden};
    case LoraTarget::kDown:
      return {c.hidden, c.intermediate};
  }
  return {};
}

int64_t lora_parameter_count(const ModelConfig& config, const LoraConfig& lora) {
  int64_t per_layer = 0;
  for (LoraTarget t : lora.targets) {
    const ProjectionShape s = projection_shape(config, t);
    per_layer += int64_t(lora.rank) * (s.in + s.out);
  }
  return per_layer * config.layers;
}

std::string peft_tensor_name(int layer, LoraTarget target, bool a) {
  return fmt::format("base_model.model.model.layers.{}.{}.lora_{}.weight", layer,
                     hf_module_path(target), a ? 'A' : 'B');
}

std::string describe(const LoraConfig& lora) {
  std::string modules;
  for (LoraTarget t : lora.targets)
    modules += std::string(modules.empty() ? "" : ", ") + peft_module_name(t);
  return fmt::format(
      "rank {}, alpha {:g} ({}scale {:g}), dropout {:g} on {}; A {}, B zero; frozen base {}",
      lora.rank, lora.alpha, lora.use_rslora ? "rsLoRA " : "", lora.scale(), lora.dropout, modules,
      to_string(lora.init), base_dtype_name(lora));
}

}  // namespace cohort::models
