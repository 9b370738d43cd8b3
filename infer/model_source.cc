// Model config and weights for inference jobs.
#include "infer/model_source.h"

#include <filesystem>
#include <fstream>

#include "parallel/checkpoint.h"
#include "hf/weights.h"
#include "hf/config_json.h"

namespace cohort::infer {
namespace fs = std::filesystem;

std::string resolve_checkpoint_dir(const std::string& path) {
  if (!fs::is_regular_file(path)) return path;
  std::ifstream in(path);
  std::string name;
  if (!(in >> name)) return path;
  return (fs::path(path).parent_path() / name).string();
}

Result<models::ModelConfig> infer_model_config(const jobs::ModelSection& model) {
  models::ModelConfig config;
  if (!model.hf_dir.empty()) {
    // A generous cap: the RoPE table is cheap and the KV cache is sized by the
    // prompts, not by max_seq.
    const int cap = model.max_seq > 0 ? model.max_seq : 32768;
    COHORT_ASSIGN_OR_RETURN(config, hf::load_config_json(model.hf_dir, cap));
  } else if (!model.checkpoint.empty()) {
    COHORT_ASSIGN_OR_RETURN(config, parallel::checkpoint_model_config(resolve_checkpoint_dir(model.checkpoint)));
  } else if (!model.preset.empty()) {
    COHORT_ASSIGN_OR_RETURN(config, models::preset_config(model.preset));
  } else {
    return invalid_argument("[model] needs one of preset, hf_dir or checkpoint");
  }
  if (model.max_seq > 0) config.max_seq = model.max_seq;
  COHORT_RETURN_IF_ERROR(config.validate().with_context("[model]"));
  return config;
}

Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target) {
  if (!model.hf_dir.empty()) return hf::load_weights(target, model.hf_dir);
  if (!model.checkpoint.empty()) {
    return parallel::load_checkpoint_params(resolve_checkpoint_dir(model.checkpoint), target);
  }
  target.init_weights(static_cast<uint64_t>(seed));
  return Status::ok();
}

std::string model_source(const jobs::ModelSection& model) {
  if (!model.hf_dir.empty()) return "hf_dir " + model.hf_dir;
  if (!model.checkpoint.empty()) return "checkpoint " + resolve_checkpoint_dir(model.checkpoint);
  return "preset " + model.preset;
}

}  // namespace cohort::infer
