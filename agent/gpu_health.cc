// GPU health rules: NVML readings to faults.
#include "agent/gpu_health.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace cohort::agent {

std::string describe_xid(uint64_t xid) {
  // The Xids that mean a failing GPU most often, and the application ones,
  // in the words of NVIDIA's Xid catalogue.
  static const std::map<uint64_t, const char*> kMeaning = {
      {13, "graphics engine exception"},
      {31, "GPU memory page fault"},
      {43, "GPU stopped processing"},
      {45, "preemptive cleanup after an earlier error"},
      {48, "double-bit ECC error"},
      {63, "ECC page retirement or row remapping"},
      {64, "ECC page retirement or row remapping failure"},
      {68, "video processor exception"},
      {74, "NVLink error"},
      {79, "GPU has fallen off the bus"},
      {92, "high single-bit ECC error rate"},
      {94, "contained ECC error"},
      {95, "uncontained ECC error"},
      {109, "context switch timeout"},
      {119, "GSP RPC timeout"},
      {120, "GSP error"},
      {999, "unknown Xid"},  // NVML's value for an Xid it cannot name
  };
  auto it = kMeaning.find(xid);
  std::string text = "Xid " + std::to_string(xid);
  return it == kMeaning.end() ? text : text + " (" + it->second + ")";
}

bool xid_is_application_error(uint64_t xid) {
  return xid == 13 || xid == 31 || xid == 43 || xid == 45 || xid == 68 || xid == 109;
}

std::vector<GpuFault> GpuHealthTracker::update(const std::vector<GpuHealthReading>& readings) {
  std::vector<GpuFault> faults;
  for (const auto& r : readings) {
    std::vector<std::string> reasons;
    if (!r.no_answer.empty()) reasons.push_back("does not answer: " + r.no_answer);
    if (r.uncorrected_ecc) {
      auto [base, first] = ecc_baseline_.emplace(r.index, *r.uncorrected_ecc);
      // Fewer than before: the counters were cleared (a reset), start again.
      if (*r.uncorrected_ecc < base->second) base->second = *r.uncorrected_ecc;
      if (!first && *r.uncorrected_ecc > base->second) {
        reasons.push_back(std::to_string(*r.uncorrected_ecc - base->second) +
                          " uncorrected ECC error(s) since the agent started");
      }
    }
    for (uint64_t xid : r.xids) {
      if (xid_is_application_error(xid)) {
        spdlog::info("GPU {}: {}, caused by the program that ran there; the GPU stays in service",
                     r.index, describe_xid(xid));
        continue;
      }
      std::string text = describe_xid(xid);
      if (std::find(reasons.begin(), reasons.end(), text) == reasons.end()) reasons.push_back(text);
    }
    if (reasons.empty()) continue;
    std::string joined;
    for (const auto& reason : reasons) joined += (joined.empty() ? "" : "; ") + reason;
    faults.push_back({r.index, joined});
  }
  std::sort(faults.begin(), faults.end(),
            [](const GpuFault& a, const GpuFault& b) { return a.index < b.index; });
  return faults;
}

}  // namespace cohort::agent
