// The debugging switches of base/env_knobs.h that choose devices, kernels or
// engines, read in one place and handed to the code they steer as options:
// production code (models/, models/decode/, infer/) never reads the
// environment. A normal run sets none of them; they exist for parity
// checks, kernel timers and A/B runs.
#pragma once

#include "base/status.h"
#include "models/decode/cuda_graph_engine.h"

namespace cohort::worker {

struct DebugSwitches {
  enum class Device { kAuto, kCpu, kCuda };
  Device device = Device::kAuto;        // COHORT_DEVICE=cpu|cuda
  bool fused_training_blocks = true;    // COHORT_TRAIN_BLOCKS=ops: off
  bool fused_moe_blocks = true;         // COHORT_TRAIN_BLOCKS=dense (or ops): sparse layers op by op
  bool op_times = false;                // COHORT_CUDA_OP_TIMES
  bool serial_launches = false;         // COHORT_CUDA_SERIAL_LAUNCHES=1
  // COHORT_INFER_ENGINE=model: the fp32 models engine on CUDA (=graphs,
  // the default: the bf16 graph engine wherever it fits the model).
  bool model_engine = false;
  bool check_lockstep = false;          // COHORT_INFER_CHECK_LOCKSTEP=1
  // COHORT_INFER_ATTENTION, COHORT_INFER_FUSED_ATTENTION_ROWS,
  // COHORT_INFER_PROJECTIONS, COHORT_INFER_STEP_TIMES.
  models::decode::CudaEngineOptions::Overrides decode;
};

// Errors name the variable and its bad value.
Result<DebugSwitches> read_debug_switches();

}  // namespace cohort::worker
