#include "jobs/spec.h"

namespace cohort::jobs {

const char* to_string(JobKind kind) {
  switch (kind) {
    case JobKind::kTrain: return "train";
    case JobKind::kInfer: return "infer";
    case JobKind::kServe: return "serve";
    case JobKind::kCommand: return "command";
  }
  return "?";
}

const char* to_string(DeviceVisibility devices) {
  return devices == DeviceVisibility::kNode ? "node" : "own";
}

bool parse_job_kind(std::string_view name, JobKind* kind) {
  for (JobKind k : {JobKind::kTrain, JobKind::kInfer, JobKind::kServe, JobKind::kCommand}) {
    if (name == to_string(k)) return *kind = k, true;
  }
  return false;
}

bool parse_devices(std::string_view name, DeviceVisibility* devices) {
  for (DeviceVisibility d : {DeviceVisibility::kOwn, DeviceVisibility::kNode}) {
    if (name == to_string(d)) return *devices = d, true;
  }
  return false;
}

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

int JobSpec::effective_global_batch(int nodes) const {
  if (train.global_batch > 0) return train.global_batch;
  return train.micro_batch * data_parallel(nodes);
}

int JobSpec::accumulation_steps(int nodes) const {
  int per_step = train.micro_batch * data_parallel(nodes);
  if (per_step <= 0) return 0;
  int global = effective_global_batch(nodes);
  if (global % per_step != 0) return 0;
  return global / per_step;
}

}  // namespace cohort::jobs
