// Private: GPU discovery through NVML, the system prober's first choice
// (gpu_discovery.cc falls back to nvidia-smi). nvml_monitor.h watches the
// GPUs once they are known.
#pragma once

#include <optional>
#include <vector>

#include "agent/gpu_discovery.h"

namespace cohort::agent {

// std::nullopt when NVML cannot be used here (no libnvidia-ml.so.1, a missing
// symbol, or nvmlInit failing because no driver is loaded): the caller then
// falls back to nvidia-smi. An error when NVML is up but a device query fails.
std::optional<cohort::Result<std::vector<GpuInfo>>> probe_with_nvml();

}  // namespace cohort::agent
