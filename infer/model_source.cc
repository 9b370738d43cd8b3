// Model weights and the source's name for inference jobs (the config comes
// from worker::resolve_model_config, shared with training).
#include "infer/model_source.h"

#include "hf/load_quantization.h"
#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "parallel/checkpoint.h"

namespace cohort::infer {

namespace {

Status load_source(const jobs::ModelSection& model, int64_t seed, models::Model& target) {
  if (!model.hf_dir.empty()) return hf::load_weights(target, model.hf_dir);
  if (!model.checkpoint.empty()) {
    return parallel::load_checkpoint_params(parallel::resolve_checkpoint_path(model.checkpoint), target);
  }
  target.init_weights(static_cast<uint64_t>(seed));
  return Status::ok();
}

}  // namespace

bool model_streams_blocks(const jobs::ModelSection& model) {
  return model.checkpoint.empty() || !parallel::is_lora_checkpoint(parallel::resolve_checkpoint_path(model.checkpoint));
}

Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target) {
  COHORT_ASSIGN_OR_RETURN(const auto format, hf::quantize_option_for(model.quantize, model.hf_dir));
  if (!model_streams_blocks(model)) {
    COHORT_RETURN_IF_ERROR(load_source(model, seed, target));
    if (!model.adapter.empty()) {
      COHORT_RETURN_IF_ERROR(hf::merge_peft_adapter(model.adapter, target).with_context("model.adapter"));
    }
    return format ? hf::quantize_round_trip(target, *format) : Status::ok();
  }
  // Each group finished as it fills, before the listener sees it.
  std::unique_ptr<models::LoraAdapters> adapter;
  if (!model.adapter.empty()) {
    auto read = hf::read_peft_adapter_for(model.adapter, target);
    if (!read.is_ok()) return read.status().with_context("model.adapter");
    adapter = std::move(*read);
  }
  const models::Model::GroupFilled listener = target.group_filled_listener();
  Status finished;
  target.set_group_filled_listener([&](int g, const float* host) {
    if (finished.is_ok() && adapter) {
      finished = models::merge_lora_group(*adapter, target, g).with_context("model.adapter " + model.adapter);
    }
    if (finished.is_ok() && format) finished = hf::quantize_round_trip_group(target, g, *format);
    // The buffer changed where either ran: the loader's host copy is stale.
    if (listener) listener(g, adapter || format ? nullptr : host);
  });
  const Status loaded = load_source(model, seed, target);
  target.set_group_filled_listener(listener);
  COHORT_RETURN_IF_ERROR(loaded);
  return finished;
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
