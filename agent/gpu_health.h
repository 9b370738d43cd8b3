// Private: what makes a GPU unhealthy, from what NVML says about it. The
// system prober reads NVML (nvml_prober.cc) into GpuHealthReadings; the
// tracker here turns them into GpuFaults (gpu_discovery.h), which the agent
// reports and the coordinator drains the node for. Kept apart from NVML so
// that the rules are tested without a GPU.
//
// The rules:
//   - a GPU that does not answer (NVML_ERROR_GPU_IS_LOST, a reset required)
//     is unhealthy for as long as it does not answer;
//   - uncorrected (double-bit) ECC errors counted since the agent started
//     make it unhealthy until the count goes back (a GPU reset or a driver
//     reload clears the volatile counters; the agent restarting too);
//   - a critical Xid event makes it unhealthy once (the coordinator keeps the
//     node drained until `cohort undrain`), except the Xids that a program's
//     own bug causes (13, 31, 43, 45, 68, 109, the list NVIDIA's device
//     plugin for Kubernetes ignores too): draining a node for those would
//     drain the cluster one failing job at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace cohort::agent {

// What NVML said about one GPU at one look.
struct GpuHealthReading {
  int index = 0;
  // "" while the GPU answers; else why not ("GPU is lost (NVML error 15)").
  std::string no_answer;
  // Uncorrected ECC errors since the driver loaded (NVML's volatile
  // counter); nullopt where ECC is off or not reported.
  std::optional<uint64_t> uncorrected_ecc;
  // The critical Xid events NVML delivered for it since the last look.
  std::vector<uint64_t> xids;
};

// "Xid 79 (GPU has fallen off the bus)"; "Xid 200" for one it does not know.
std::string describe_xid(uint64_t xid);
// True for the Xids a program's own error causes (see above).
bool xid_is_application_error(uint64_t xid);

// Turns readings into faults, one per unhealthy GPU (its reasons joined by
// "; "), by index. Remembers each GPU's first ECC count. Thread-compatible.
class GpuHealthTracker {
 public:
  std::vector<GpuFault> update(const std::vector<GpuHealthReading>& readings);

 private:
  std::map<int, uint64_t> ecc_baseline_;
};

}  // namespace cohort::agent
