// PEFT adapter folders in and out (peft_adapter.h).
#include "hf/peft_adapter.h"

#include <filesystem>
#include <fstream>

namespace cohort::hf {

namespace fs = std::filesystem;

namespace {

// This rank's slice of `p` from its unsharded tensor in `file`.
Status read_slice(const SafetensorsFile& file, const models::ParamSpec& p, float* dst) {
  switch (p.shard_dim) {
    case models::ShardDim::kRows:
      return file.read_rows_f32(p.name, p.shard_begin, p.shard_begin + p.shape[0], dst);
    case models::ShardDim::kCols:
      return file.read_cols_f32(p.name, p.shard_begin, p.shard_begin + p.shape[1], dst);
    case models::ShardDim::kReplicated:
      return file.read_f32(p.name, dst);
  }
  return internal_error("unknown shard dimension");
}

}  // namespace

Status write_peft_adapter(const std::string& dir, const models::LoraConfig& lora,
                          const std::string& base_model,
                          const std::vector<TensorToWrite>& tensors) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  COHORT_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(),
                                           tensors, {{"format", "pt"}}));
  const fs::path config = fs::path(dir) / "adapter_config.json";
  std::ofstream(config) << peft_config_json(lora, base_model);
  if (!fs::exists(config)) return io_error("cannot write " + config.string());
  return Status::ok();
}

Status load_peft_adapter(const std::string& dir, models::LoraAdapters& adapters) {
  COHORT_ASSIGN_OR_RETURN(PeftAdapterConfig config, read_peft_config(dir));
  const models::LoraConfig& want = adapters.config();
  if (config.lora.rank != want.rank || config.lora.targets != want.targets)
    return invalid_argument(dir + "/adapter_config.json: r " + std::to_string(config.lora.rank) +
                            " on " + models::describe(config.lora) +
                            "; the adapters to fill have rank " + std::to_string(want.rank) +
                            " on " + models::describe(want));
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  COHORT_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(path));
  models::Backend& backend = adapters.backend();
  std::vector<float> host;
  for (int g = 0; g < adapters.num_groups(); ++g) {
    const models::ParamGroup& group = adapters.layout().groups[g];
    if (group.numel == 0) continue;
    host.assign(group.numel, 0.0f);
    for (const models::ParamSpec& p : group.params) {
      const SafetensorsInfo* info = file->find(p.name);
      if (!info)
        return not_found(path + " has no " + p.name + " (adapter_config.json names its module)");
      if (info->shape != p.global_shape)
        return invalid_argument(path + ": " + p.name + " has shape " +
                                models::shape_string(info->shape) + ", the model and r imply " +
                                models::shape_string(p.global_shape));
      COHORT_RETURN_IF_ERROR(read_slice(*file, p, host.data() + p.offset));
    }
    backend.copy_from_host(adapters.params(g), host.data(), host.size() * sizeof(float));
  }
  return Status::ok();
}


Result<std::unique_ptr<models::LoraAdapters>> read_peft_adapter_for(const std::string& dir,
                                                                    const models::Model& model) {
  COHORT_ASSIGN_OR_RETURN(PeftAdapterConfig config, read_peft_config(dir));
  auto adapters = models::LoraAdapters::create(model, config.lora);
  if (!adapters.is_ok()) return adapters.status().with_context(dir);
  COHORT_RETURN_IF_ERROR(load_peft_adapter(dir, **adapters));
  return std::move(*adapters);
}

Status merge_peft_adapter(const std::string& dir, models::Model& model) {
  COHORT_ASSIGN_OR_RETURN(auto adapters, read_peft_adapter_for(dir, model));
  return models::merge_lora_adapters(*adapters, model).with_context(dir);
}

}  // namespace cohort::hf
