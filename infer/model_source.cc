// Model weights and the source's name for inference jobs (the config comes
// from worker::resolve_model_config, shared with training).
#include "infer/model_source.h"

#include "hf/load_quantization.h"
#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "parallel/checkpoint.h"

namespace cohort::infer {

Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target) {
  if (!model.hf_dir.empty()) {
    COHORT_RETURN_IF_ERROR(hf::load_weights(target, model.hf_dir));
  } else if (!model.checkpoint.empty()) {
    COHORT_RETURN_IF_ERROR(parallel::load_checkpoint_params(parallel::resolve_checkpoint_path(model.checkpoint), target));
  } else {
    target.init_weights(static_cast<uint64_t>(seed));
  }
  if (!model.adapter.empty()) {
    COHORT_RETURN_IF_ERROR(hf::merge_peft_adapter(model.adapter, target).with_context("model.adapter"));
  }
  return hf::apply_quantize_option(target, model.quantize, model.hf_dir);
}

Result<std::string> weight_formats(const jobs::ModelSection& model, const models::ModelConfig& config,
                                   std::map<std::string, int>* by_format) {
  COHORT_ASSIGN_OR_RETURN(hf::WeightFormatSummary summary,
                          hf::summarize_weight_formats(config, model.hf_dir, model.quantize));
  if (by_format) *by_format = summary.weights_by_format;
  return summary.describe();
}

std::string model_source(const jobs::ModelSection& model) {
  if (!model.hf_dir.empty()) return "hf_dir " + model.hf_dir;
  if (!model.checkpoint.empty()) return "checkpoint " + parallel::resolve_checkpoint_path(model.checkpoint);
  return "preset " + model.preset;
}

}  // namespace cohort::infer
