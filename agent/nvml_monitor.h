// Private: the system prober's look at its GPUs between probes, through
// NVML (nvml_api.h says how it is loaded): utilisation and memory for the
// coordinator's GPU figures, and the readings gpu_health.h turns into faults.
#pragma once

#include <vector>

#include "agent/gpu_discovery.h"
#include "agent/gpu_health.h"

namespace cohort::agent {

// Utilisation, memory in use and health through NVML, kept open between
// looks (nvmlInit costs far more than a query, and Xid events reach only an
// event set that stays registered). Empty answers without NVML. A device
// that fails a utilisation query is left out of sample(), logged once.
// Thread-compatible: the agent's loop calls it.
class NvmlMonitor {
 public:
  NvmlMonitor() = default;
  ~NvmlMonitor();
  NvmlMonitor(const NvmlMonitor&) = delete;
  NvmlMonitor& operator=(const NvmlMonitor&) = delete;
  std::vector<GpuUsage> sample();
  // Every GPU's health now (gpu_health.h): whether it answers, its volatile
  // uncorrected ECC count, and the critical Xid events since the last call
  // (read with a zero timeout: this never waits).
  std::vector<GpuHealthReading> read_health();

 private:
  struct Session;
  // Opens NVML on first use; false (for good) where it cannot be used.
  bool open();
  Session* session_ = nullptr;
  bool tried_ = false;
  bool warned_ = false;
};

}  // namespace cohort::agent
