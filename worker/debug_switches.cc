// read_debug_switches (see debug_switches.h).
#include "worker/debug_switches.h"

#include <optional>
#include <string>

#include "base/env_knobs.h"

namespace cohort::worker {
namespace {

std::string value_of(EnvKnob knob) {
  const char* v = read_env_knob(knob);
  return v ? v : "";
}

Status expect_one_of(const char* name, const std::string& value, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return Status::ok();
    list += list.empty() ? std::string(a) : std::string(", ") + a;
  }
  return invalid_argument(std::string(name) + "='" + value + "': expected one of " + list);
}

}  // namespace

Result<DebugSwitches> read_debug_switches() {
  DebugSwitches s;
  if (const std::string device = value_of(EnvKnob::kDevice); !device.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_DEVICE", device, {"cpu", "cuda"}));
    s.device = device == "cpu" ? DebugSwitches::Device::kCpu : DebugSwitches::Device::kCuda;
  }
  if (const std::string blocks = value_of(EnvKnob::kTrainBlocks); !blocks.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_TRAIN_BLOCKS", blocks, {"ops", "dense", "fused"}));
    s.fused_training_blocks = blocks != "ops";
    s.fused_moe_blocks = blocks == "fused";
  }
  s.op_times = read_env_knob(EnvKnob::kCudaOpTimes) != nullptr;
  s.serial_launches = env_knob_on(EnvKnob::kCudaSerialLaunches);
  if (const std::string engine = value_of(EnvKnob::kInferEngine); !engine.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_INFER_ENGINE", engine, {"model", "graphs"}));
    s.model_engine = engine == "model";
  }
  s.check_lockstep = env_knob_on(EnvKnob::kInferCheckLockstep);
  s.decode.attention = value_of(EnvKnob::kInferAttention);
  COHORT_ASSIGN_OR_RETURN(std::optional<int> rows, read_env_knob_count(EnvKnob::kInferFusedAttentionRows));
  if (rows) s.decode.fused_attention_rows = *rows;
  COHORT_ASSIGN_OR_RETURN(std::optional<int> lora_rows, read_env_knob_count(EnvKnob::kInferLoraRunRows));
  if (lora_rows) s.decode.lora_run_rows = *lora_rows;
  if (const std::string prompt = value_of(EnvKnob::kInferLoraPrompt); !prompt.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_INFER_LORA_PROMPT", prompt, {"dense", "kernels"}));
    s.decode.lora_dense = prompt == "dense";
  }
  if (const std::string decode = value_of(EnvKnob::kInferLoraDecode); !decode.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_INFER_LORA_DECODE", decode, {"dense", "kernel"}));
    s.decode.lora_dense_decode = decode == "dense";  // unset: the engine's rule
  }
  if (const std::string side = value_of(EnvKnob::kInferLoraSideStream); !side.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_INFER_LORA_SIDE_STREAM", side, {"on", "off"}));
    s.decode.lora_side_stream = side == "on";
  }
  s.decode.projections = value_of(EnvKnob::kInferProjections);
  if (!s.decode.projections.empty()) {
    COHORT_RETURN_IF_ERROR(expect_one_of("COHORT_INFER_PROJECTIONS", s.decode.projections, {"skinny", "cublaslt"}));
  }
  s.decode.time_steps = env_knob_on(EnvKnob::kInferStepTimes);
  return s;
}

}  // namespace cohort::worker
