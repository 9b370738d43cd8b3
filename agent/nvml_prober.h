// Private: the NVML half of the system prober (gpu_discovery.cc is the other).
#pragma once

#include <optional>
#include <vector>

#include "agent/gpu_discovery.h"

namespace cohort::agent {

// std::nullopt when NVML cannot be used here (no libnvidia-ml.so.1, a missing
// symbol, or nvmlInit failing because no driver is loaded): the caller then
// falls back to nvidia-smi. An error when NVML is up but a device query fails.
std::optional<cohort::Result<std::vector<GpuInfo>>> probe_with_nvml();

// Utilisation and memory in use through NVML, kept open between samples
// (nvmlInit costs far more than a query). Empty without NVML; a device that
// fails a query is left out, logged once.
class NvmlSampler {
 public:
  NvmlSampler() = default;
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;
  std::vector<GpuUsage> sample();

 private:
  struct Session;
  Session* session_ = nullptr;
  bool tried_ = false;
  bool warned_ = false;
};

}  // namespace cohort::agent
