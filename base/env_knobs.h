// Every COHORT_* environment variable cohort reads, in one table and read
// only here (the launch contract's variables that the agent sets for
// workers, and the settings a user exports).
//
// Each entry says what the variable does, which part of cohort reads it, and
// whether it is a debugging switch: those exist for tests and diagnosis, and
// a normal run never sets them. The "Environment variables" table of
// docs/gpus-and-performance.md is env_knobs_markdown();
// tests/base/env_knobs_test.cc keeps the two equal.
// Reading is thread-safe as long as nothing calls setenv meanwhile.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort {

enum class EnvKnob {
  kLog,
  kCoordinator,
  kKeys,
  kHttpToken,
  kStore,
  kStoreToken,
  kProgressFile,
  kNode,
  kCollectiveTimeoutS,
  kGlooHostname,
  kDevice,
  kPeakTflops,
  kCudaOpTimes,
  kCudaSerialLaunches,
  kQuantMma,
  kFp8Gemm,
  kInferEngine,
  kInferCheckLockstep,
  kInferDumpLogits,
  kInferIgnoreEos,
  kInferStepTimes,
  kInferRunAhead,
  kInferProjections,
  kInferFusedAttentionRows,
  kInferLoraRunRows,
  kInferLoraPrompt,
  kInferLoraDecode,
  kInferLoraSideStream,
  kInferAttention,
  kTrainDumpBatches,
  kTrainBlocks,
  kMoeGemms,
  kLoraTileRows,
  kLoraCluster,
  kCudnnLibrary,
};

struct EnvKnobDoc {
  EnvKnob knob;
  const char* name;     // "COHORT_LOG"
  const char* read_by;  // the folder that reads it: "base", "cli", "infer", ...
  const char* meaning;
  bool debug;           // a debugging switch, not for normal runs
};

// In EnvKnob order.
const std::vector<EnvKnobDoc>& env_knobs();
const char* env_knob_name(EnvKnob knob);

// The variable's value, or nullptr when it is unset or empty.
const char* read_env_knob(EnvKnob knob);
// True when the variable is set to exactly "1" (the switches' "on").
bool env_knob_on(EnvKnob knob);
// A non-negative integer knob: nullopt when unset or empty, an error naming
// the variable and its value when it is anything but digits that fit an int.
Result<std::optional<int>> read_env_knob_count(EnvKnob knob);

// The documented table (docs/gpus-and-performance.md): | variable | read by |
// what it does |, debugging switches marked as such.
std::string env_knobs_markdown();

}  // namespace cohort
