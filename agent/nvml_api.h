// Private: the subset of nvml.h the agent uses. The control plane must start
// on hosts without the NVIDIA driver, so NVML is dlopen'ed rather than
// linked, and its few types are declared here instead of including nvml.h
// (which needs the CUDA toolkit at build time). The layouts and values are
// part of NVML's stable ABI.
#pragma once

#include <string>

#include <fmt/format.h>

namespace cohort::agent::nvml {

using Return = int;  // nvmlReturn_t
using Device = struct nvmlDevice_st*;
using EventSet = struct nvmlEventSet_st*;

struct PciInfo {  // nvmlPciInfo_t, the _v3 layout; v1/v2 share the first 36 bytes
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct Utilization {  // nvmlUtilization_t: percent of the last sample period
  unsigned int gpu, memory;
};
// nvmlEventData_t as nvmlEventSetWait_v2 fills it; the older
// nvmlEventSetWait fills only the first three fields.
struct EventData {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid, for kEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

constexpr const char* kLibrary = "libnvidia-ml.so.1";
constexpr Return kSuccess = 0;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorTimeout = 10;    // nvmlEventSetWait: no event waiting
constexpr Return kErrorIrqIssue = 11;   // the kernel's interrupts from the GPU fail
constexpr Return kErrorGpuIsLost = 15;  // fallen off the bus, or otherwise gone
constexpr Return kErrorResetRequired = 16;
constexpr unsigned long long kEventTypeXidCriticalError = 0x8;
constexpr int kMemoryErrorTypeUncorrected = 1;  // nvmlMemoryErrorType_t
constexpr int kVolatileEcc = 0;                 // nvmlEccCounterType_t: since the driver loaded
constexpr unsigned kUuidBufferSize = 96;        // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNameBufferSize = 96;        // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// True for the answers that say the GPU itself no longer answers, rather
// than that a query is unsupported or not permitted.
inline bool gpu_does_not_answer(Return rc) {
  return rc == kErrorGpuIsLost || rc == kErrorResetRequired || rc == kErrorIrqIssue;
}

// "GPU is lost (NVML error 15)", with nvmlErrorString where the library has it.
inline std::string describe(const char* (*error_string)(Return), Return rc) {
  const char* text = error_string ? error_string(rc) : nullptr;
  return text ? fmt::format("{} (NVML error {})", text, rc) : fmt::format("NVML error {}", rc);
}

}  // namespace cohort::agent::nvml
