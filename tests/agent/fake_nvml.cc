// A stand-in for libnvidia-ml.so.1 (built with that name and soname), so
// that the agent's NVML reader runs its real calls on a host without a GPU:
// GPUs whose uncorrected ECC counts, Xid events and loss the test scripts
// through the fake_nvml_* functions. The layouts are written from NVML's
// documentation, apart from the agent's own declarations (nvml_api.h).
//
// A test loads it with dlopen(path, RTLD_NOW | RTLD_GLOBAL) before the prober
// looks: the prober's dlopen("libnvidia-ml.so.1") then finds it by soname.
#include <cstdio>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

namespace {

struct Gpu {
  unsigned long long uncorrected_ecc = 0;
  bool ecc_supported = true;
  bool lost = false;
};
std::vector<Gpu> gpus(2);
std::deque<std::pair<int, unsigned long long>> pending_xids;  // (GPU, Xid)

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kTimeout = 10, kGpuIsLost = 15;

}  // namespace

struct nvmlDevice_st {
  int index;
};
struct nvmlEventSet_st {
  std::vector<int> registered;
};

namespace {
nvmlDevice_st devices[16] = {{0}, {1}, {2},  {3},  {4},  {5},  {6},  {7},
                             {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
}

extern "C" {

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlEventData_t {
  nvmlDevice_st* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// ---- the test's controls ----
void fake_nvml_reset(int count) {
  gpus.assign(size_t(count), Gpu{});
  pending_xids.clear();
}
void fake_nvml_set_ecc(int gpu, unsigned long long count) {
  gpus.at(size_t(gpu)).uncorrected_ecc = count;
}
void fake_nvml_set_ecc_supported(int gpu, bool supported) {
  gpus.at(size_t(gpu)).ecc_supported = supported;
}
void fake_nvml_lose(int gpu, bool lost) {
  gpus.at(size_t(gpu)).lost = lost;
}
void fake_nvml_push_xid(int gpu, unsigned long long xid) {
  pending_xids.emplace_back(gpu, xid);
}

// ---- NVML ----
int nvmlInit_v2() {
  return kSuccess;
}
int nvmlShutdown() {
  return kSuccess;
}
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case kNotSupported:
      return "Not Supported";
    case kTimeout:
      return "Timeout";
    case kGpuIsLost:
      return "GPU is lost";
  }
  return "Unknown Error";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = unsigned(gpus.size());
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  if (index >= gpus.size()) return kInvalidArgument;
  if (gpus[index].lost) return kGpuIsLost;
  *device = &devices[index];
  return kSuccess;
}
int nvmlDeviceGetUUID(nvmlDevice_st* device, char* uuid, unsigned size) {
  std::snprintf(uuid, size, "GPU-fa4e0000-0000-4000-8000-%012d", device->index);
  return gpus[size_t(device->index)].lost ? kGpuIsLost : kSuccess;
}
int nvmlDeviceGetPciInfo_v3(nvmlDevice_st* device, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof *pci);
  pci->bus = unsigned(0x18 + device->index);
  std::snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
  return gpus[size_t(device->index)].lost ? kGpuIsLost : kSuccess;
}
int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned size) {
  std::snprintf(name, size, "Fake NVML GPU");
  return gpus[size_t(device->index)].lost ? kGpuIsLost : kSuccess;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, nvmlMemory_t* memory) {
  if (gpus[size_t(device->index)].lost) return kGpuIsLost;
  *memory = {80ull << 30, 79ull << 30, 1ull << 30};
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, nvmlUtilization_t* util) {
  if (gpus[size_t(device->index)].lost) return kGpuIsLost;
  *util = {50, 10};
  return kSuccess;
}
int nvmlDeviceGetTotalEccErrors(nvmlDevice_st* device, int error_type, int counter_type,
                                unsigned long long* count) {
  const Gpu& gpu = gpus[size_t(device->index)];
  if (gpu.lost) return kGpuIsLost;
  if (!gpu.ecc_supported) return kNotSupported;
  // The reader must ask for uncorrected (1) volatile (0) counts.
  if (error_type != 1 || counter_type != 0) return kInvalidArgument;
  *count = gpu.uncorrected_ecc;
  return kSuccess;
}
int nvmlEventSetCreate(nvmlEventSet_st** set) {
  *set = new nvmlEventSet_st;
  return kSuccess;
}
int nvmlDeviceRegisterEvents(nvmlDevice_st* device, unsigned long long types,
                             nvmlEventSet_st* set) {
  if (types != 0x8) return kInvalidArgument;  // only nvmlEventTypeXidCriticalError is asked for
  set->registered.push_back(device->index);
  return kSuccess;
}
int nvmlEventSetWait_v2(nvmlEventSet_st* set, nvmlEventData_t* data, unsigned timeout_ms) {
  if (timeout_ms != 0) return kInvalidArgument;  // the agent's loop must never wait here
  for (auto it = pending_xids.begin(); it != pending_xids.end(); ++it) {
    bool registered = false;
    for (int g : set->registered) registered |= g == it->first;
    if (!registered) continue;
    *data = {&devices[it->first], 0x8, it->second, 0xFFFFFFFFu, 0xFFFFFFFFu};
    pending_xids.erase(it);
    return kSuccess;
  }
  return kTimeout;
}
int nvmlEventSetFree(nvmlEventSet_st* set) {
  delete set;
  return kSuccess;
}

}  // extern "C"
