// LoRA checkpoints: the index entry, the resume rules, the PEFT folder from
// the pieces and the merged model (lora_checkpoint.h).
#include "parallel/lora_checkpoint.h"

#include <fmt/format.h>

#include "hf/load_quantization.h"
#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "models/lora.h"

namespace cohort::parallel {

using nlohmann::json;

nlohmann::json lora_index_entry(const models::LoraConfig& lora, const BaseModelSource& base) {
  json targets = json::array();
  for (models::LoraTarget t : lora.targets) targets.push_back(models::peft_module_name(t));
  json source = json::object();
  if (!base.hf_dir.empty())
    source["hf_dir"] = base.hf_dir;
  else if (!base.checkpoint.empty())
    source["checkpoint"] = base.checkpoint;
  else
    source["seed"] = base.seed;
  return {{"rank", lora.rank},
          {"alpha", lora.alpha},
          {"dropout", lora.dropout},
          {"target_modules", targets},
          {"use_rslora", lora.use_rslora},
          {"init", models::to_string(lora.init)},
          {"base_dtype", models::base_dtype_name(lora)},
          {"base", source}};
}

Result<std::optional<LoraCheckpoint>> read_lora_entry(const nlohmann::json& index,
                                                      const std::string& dir) {
  if (!index.contains("lora")) return std::optional<LoraCheckpoint>();
  const json& entry = index.at("lora");
  try {
    auto lora = models::make_lora_config(
        entry.at("rank").get<int>(), entry.at("alpha").get<double>(),
        entry.at("dropout").get<double>(),
        entry.at("target_modules").get<std::vector<std::string>>(),
        entry.at("use_rslora").get<bool>(), entry.at("init").get<std::string>(),
        entry.at("base_dtype").get<std::string>());
    if (!lora) return lora.status().with_context(dir + "/index.json: lora");
    LoraCheckpoint out{*lora, {}};
    const json& base = entry.at("base");
    out.base.hf_dir = base.value("hf_dir", std::string());
    out.base.checkpoint = base.value("checkpoint", std::string());
    out.base.seed = base.value("seed", uint64_t{0});
    return std::optional<LoraCheckpoint>(std::move(out));
  } catch (const json::exception& e) {
    return invalid_argument(dir + "/index.json: lora: " + e.what());
  }
}

Status check_resumable(const std::string& dir, const std::optional<LoraCheckpoint>& saved,
                       const models::LoraConfig* job) {
  if (saved && !job)
    return failed_precondition(
        dir + " holds LoRA adapters (" + models::describe(saved->lora) +
        "), not a whole model: resume it with the same [lora] section, or `cohort export "
        "--merge` it and train from the merged folder");
  if (!saved && job)
    return failed_precondition(
        dir +
        " is a full-model checkpoint; a [lora] run resumes only from its own "
        "adapters (to train adapters on that model, start a new run with [model] "
        "checkpoint = \"" +
        dir + "\")");
  // Dropout and init may change between attempts; what the adapters compute may not.
  if (saved && (saved->lora.rank != job->rank || saved->lora.targets != job->targets ||
                saved->lora.scale() != job->scale() || saved->lora.base_dtype != job->base_dtype ||
                saved->lora.base_format != job->base_format))
    return failed_precondition(
        dir + " holds adapters of " + models::describe(saved->lora) +
        "; this run's [lora] "
        "asks for " +
        models::describe(*job) +
        " (rank, target modules, scale and base dtype must match to resume)");
  return Status::ok();
}

Result<bool> write_checkpoint_adapter(const std::string& dir, const LoraCheckpoint& saved,
                                      const PieceIndex& pieces, const models::ModelConfig& config,
                                      const std::string& out_dir, bool covered_only) {
  std::vector<std::vector<float>> storage;
  std::vector<hf::TensorToWrite> tensors;
  storage.reserve(size_t(config.layers) * saved.lora.targets.size() * 2);
  const int64_t r = saved.lora.rank;
  for (int l = 0; l < config.layers; ++l) {
    for (models::LoraTarget t : saved.lora.targets) {
      const models::ProjectionShape w = models::projection_shape(config, t);
      for (bool a : {true, false}) {
        const std::string name = models::peft_tensor_name(l, t, a);
        const std::vector<int64_t> shape =
            a ? std::vector<int64_t>{r, w.in} : std::vector<int64_t>{w.out, r};
        std::vector<char> covered;
        COHORT_ASSIGN_OR_RETURN(auto global,
                                assemble_global(dir, pieces, name, PieceTensor::kParam, shape,
                                                covered_only ? &covered : nullptr));
        for (char c : covered)
          if (!c) return false;
        storage.push_back(std::move(global));
        tensors.push_back(hf::TensorToWrite{name, shape, storage.back().data(), DType::kF32});
      }
    }
  }
  const std::string base = !saved.base.hf_dir.empty() ? saved.base.hf_dir : saved.base.checkpoint;
  COHORT_RETURN_IF_ERROR(hf::write_peft_adapter(out_dir, saved.lora, base, tensors));
  return true;
}

Status load_merged_lora(const std::string& dir, const LoraCheckpoint& saved,
                        const PieceIndex& pieces, models::Model& model) {
  const BaseModelSource& base = saved.base;
  if (!base.hf_dir.empty()) {
    Status loaded = hf::load_weights(model, base.hf_dir);
    if (!loaded.is_ok()) return loaded.with_context(dir + ": the LoRA run's base model.hf_dir");
  } else if (!base.checkpoint.empty()) {
    Status loaded = load_checkpoint_params(resolve_checkpoint_path(base.checkpoint), model);
    if (!loaded.is_ok()) return loaded.with_context(dir + ": the LoRA run's base model.checkpoint");
  } else {
    model.init_weights(base.seed);
  }
  models::round_frozen_base(model, saved.lora.base_dtype);
  // A quantized base (QLoRA): the adapters trained against its projections
  // round-tripped through the format, as this gives them.
  if (saved.lora.base_format != models::LoraConfig::BaseFormat::kPlain) {
    Status quantized = hf::quantize_round_trip(model, saved.lora.base_format == models::LoraConfig::BaseFormat::kNf4
                                                          ? models::quant::WeightFormat::kNf4
                                                          : models::quant::WeightFormat::kFp8Block);
    if (!quantized.is_ok()) return quantized.with_context(dir + ": the LoRA run's quantized base");
  }
  const models::ModelConfig& config = model.config();
  const int r = saved.lora.rank;
  std::vector<float> local;
  for (int l = 0; l < config.layers; ++l) {
    const int g = model.layout().block_group(l);
    for (models::LoraTarget t : saved.lora.targets) {
      const models::ProjectionShape w = models::projection_shape(config, t);
      COHORT_ASSIGN_OR_RETURN(auto a,
                              assemble_global(dir, pieces, models::peft_tensor_name(l, t, true),
                                              PieceTensor::kParam, {r, w.in}));
      COHORT_ASSIGN_OR_RETURN(auto b,
                              assemble_global(dir, pieces, models::peft_tensor_name(l, t, false),
                                              PieceTensor::kParam, {w.out, r}));
      std::vector<float> delta(size_t(w.out) * size_t(w.in), 0.0f);
      models::merge_lora_delta(delta.data(), a.data(), b.data(), w.out, w.in, r,
                               saved.lora.scale());
      const std::string name =
          fmt::format("model.layers.{}.{}.weight", l, models::hf_module_path(t));
      const models::ParamSpec* spec = model.layout().groups[g].find(name);
      if (!spec) return internal_error("the model has no " + name);
      std::vector<float> slice(spec->numel);
      slice_local(delta, *spec, slice.data());
      local.resize(spec->numel);
      float* weight = model.params(g) + spec->offset;
      model.backend().copy_to_host(local.data(), weight, spec->numel * sizeof(float));
      for (size_t i = 0; i < local.size(); ++i) local[i] += slice[i];
      model.backend().copy_from_host(weight, local.data(), spec->numel * sizeof(float));
    }
  }
  return Status::ok();
}

}  // namespace cohort::parallel
