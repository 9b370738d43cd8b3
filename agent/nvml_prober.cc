// GPU discovery through NVML, loaded at run time.
//
// The control plane must start on hosts without the NVIDIA driver, so NVML is
// dlopen'ed rather than linked, and its few types are declared here instead of
// including nvml.h (which would need the CUDA toolkit at build time).
#include "agent/nvml_prober.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/dynamic_library.h"

namespace cohort::agent {
namespace {

// The subset of nvml.h used here; the layouts are part of NVML's stable ABI.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {  // the _v3 layout; v1/v2 share the first 36 bytes
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;  // percent of the last sample period
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*get_count)(unsigned*);
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_pci)(nvmlDevice_t, nvmlPciInfo_t*);
  bool pci_is_v3;  // busId[32] is filled; else format the bus id from numbers
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*);
};

std::string describe(const NvmlApi& api, nvmlReturn_t rc) {
  const char* text = api.error_string ? api.error_string(rc) : nullptr;
  return text ? fmt::format("{} (NVML error {})", text, rc) : fmt::format("NVML error {}", rc);
}

cohort::Result<GpuInfo> query_device(const NvmlApi& api, unsigned index) {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t rc = api.get_handle(index, &device);
  if (rc != kNvmlSuccess) {
    return io_error(fmt::format("nvmlDeviceGetHandleByIndex({}): {}", index, describe(api, rc)));
  }
  GpuInfo gpu;
  gpu.index = static_cast<int>(index);
  char uuid[kUuidBufferSize] = {};
  if ((rc = api.get_uuid(device, uuid, sizeof uuid)) != kNvmlSuccess) {
    return io_error(fmt::format("nvmlDeviceGetUUID(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.uuid = uuid;
  nvmlPciInfo_t pci = {};
  if ((rc = api.get_pci(device, &pci)) != kNvmlSuccess) {
    return io_error(fmt::format("nvmlDeviceGetPciInfo(GPU {}): {}", index, describe(api, rc)));
  }
  // nvidia-smi prints the 8-digit domain form; match it so both paths agree.
  gpu.pci_bus_id = api.pci_is_v3 && pci.busId[0]
                       ? std::string(pci.busId, strnlen(pci.busId, sizeof pci.busId))
                       : fmt::format("{:08X}:{:02X}:{:02X}.0", pci.domain, pci.bus, pci.device);
  char name[kNameBufferSize] = {};
  if ((rc = api.get_name(device, name, sizeof name)) != kNvmlSuccess) {
    return io_error(fmt::format("nvmlDeviceGetName(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.name = name;
  nvmlMemory_t memory = {};
  if ((rc = api.get_memory(device, &memory)) != kNvmlSuccess) {
    return io_error(fmt::format("nvmlDeviceGetMemoryInfo(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.memory_bytes = memory.total;
  return gpu;
}

}  // namespace

std::optional<cohort::Result<std::vector<GpuInfo>>> probe_with_nvml() {
  // Closed on every path out of here.
  auto opened = cohort::DynamicLibrary::open(kNvmlLibrary);
  if (!opened.is_ok()) {
    spdlog::debug("NVML not available ({}); trying nvidia-smi", opened.status().message());
    return std::nullopt;
  }
  const cohort::DynamicLibrary& lib = *opened;
  NvmlApi api = {};
  lib.find("nvmlErrorString", &api.error_string);  // optional, for messages
  api.pci_is_v3 = lib.find("nvmlDeviceGetPciInfo_v3", &api.get_pci);
  bool complete = lib.find("nvmlInit_v2", &api.init) &&
                  lib.find("nvmlShutdown", &api.shutdown) &&
                  lib.find("nvmlDeviceGetCount_v2", &api.get_count) &&
                  lib.find("nvmlDeviceGetHandleByIndex_v2", &api.get_handle) &&
                  lib.find("nvmlDeviceGetUUID", &api.get_uuid) &&
                  (api.get_pci || lib.find("nvmlDeviceGetPciInfo", &api.get_pci)) &&
                  lib.find("nvmlDeviceGetName", &api.get_name) &&
                  lib.find("nvmlDeviceGetMemoryInfo", &api.get_memory);
  if (!complete) {
    spdlog::warn("libnvidia-ml.so.1 lacks a symbol cohort needs; trying nvidia-smi");
    return std::nullopt;
  }
  nvmlReturn_t rc = api.init();
  if (rc != kNvmlSuccess) {
    spdlog::info("nvmlInit failed: {}; trying nvidia-smi", describe(api, rc));
    return std::nullopt;
  }
  std::vector<GpuInfo> gpus;
  unsigned count = 0;
  rc = api.get_count(&count);
  cohort::Status status = rc == kNvmlSuccess ? cohort::Status::ok()
                                             : io_error("nvmlDeviceGetCount: " + describe(api, rc));
  for (unsigned i = 0; status.is_ok() && i < count; ++i) {
    auto gpu = query_device(api, i);
    if (gpu.is_ok()) {
      gpus.push_back(std::move(gpu).value());
    } else {
      status = gpu.status();
    }
  }
  api.shutdown();
  if (!status.is_ok()) return cohort::Result<std::vector<GpuInfo>>(status);
  return cohort::Result<std::vector<GpuInfo>>(std::move(gpus));
}

struct NvmlSampler::Session {
  cohort::DynamicLibrary lib;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*get_count)(unsigned*) = nullptr;
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

NvmlSampler::~NvmlSampler() {
  if (session_) {
    session_->shutdown();
    delete session_;
  }
}

std::vector<GpuUsage> NvmlSampler::sample() {
  if (!tried_) {
    tried_ = true;
    auto opened = cohort::DynamicLibrary::open(kNvmlLibrary);
    if (!opened.is_ok()) return {};
    auto s = std::make_unique<Session>();
    s->lib = std::move(opened).value();
    nvmlReturn_t (*init)() = nullptr;
    const cohort::DynamicLibrary& lib = s->lib;
    bool complete = lib.find("nvmlInit_v2", &init) && lib.find("nvmlShutdown", &s->shutdown) &&
                    lib.find("nvmlDeviceGetCount_v2", &s->get_count) &&
                    lib.find("nvmlDeviceGetHandleByIndex_v2", &s->get_handle) &&
                    lib.find("nvmlDeviceGetUtilizationRates", &s->get_utilization) &&
                    lib.find("nvmlDeviceGetMemoryInfo", &s->get_memory);
    if (!complete || init() != kNvmlSuccess) return {};
    session_ = s.release();
  }
  std::vector<GpuUsage> out;
  if (!session_) return out;
  unsigned count = 0;
  if (session_->get_count(&count) != kNvmlSuccess) return out;
  for (unsigned i = 0; i < count && i < 1024; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlUtilization_t util = {};
    nvmlMemory_t memory = {};
    if (session_->get_handle(i, &device) != kNvmlSuccess || session_->get_utilization(device, &util) != kNvmlSuccess ||
        session_->get_memory(device, &memory) != kNvmlSuccess) {
      if (!warned_) spdlog::warn("NVML: cannot sample GPU {}; its utilisation is not reported", i);
      warned_ = true;
      continue;
    }
    out.push_back({int(i), std::min(util.gpu, 100u) / 100.0, memory.used});
  }
  return out;
}

}  // namespace cohort::agent
