// Model weights and the source's name for inference jobs (the config comes
// from worker::resolve_model_config, shared with training).
#include "infer/model_source.h"

#include "hf/weights.h"
#include "parallel/checkpoint.h"

namespace cohort::infer {

Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target) {
  if (!model.hf_dir.empty()) return hf::load_weights(target, model.hf_dir);
  if (!model.checkpoint.empty()) {
    return parallel::load_checkpoint_params(parallel::resolve_checkpoint_path(model.checkpoint), target);
  }
  target.init_weights(static_cast<uint64_t>(seed));
  return Status::ok();
}

std::string model_source(const jobs::ModelSection& model) {
  if (!model.hf_dir.empty()) return "hf_dir " + model.hf_dir;
  if (!model.checkpoint.empty()) return "checkpoint " + parallel::resolve_checkpoint_path(model.checkpoint);
  return "preset " + model.preset;
}

}  // namespace cohort::infer
