// GPU discovery through NVML, loaded at run time (nvml_api.h says why).
#include "agent/nvml_prober.h"

#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/nvml_api.h"
#include "base/dynamic_library.h"

namespace cohort::agent {
namespace {

using nvml::kSuccess;
using nvmlReturn_t = nvml::Return;
using nvmlDevice_t = nvml::Device;

struct NvmlApi {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*get_count)(unsigned*);
  nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_pci)(nvmlDevice_t, nvml::PciInfo*);
  bool pci_is_v3;  // busId[32] is filled; else format the bus id from numbers
  nvmlReturn_t (*get_name)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvml::Memory*);
};

std::string describe(const NvmlApi& api, nvmlReturn_t rc) { return nvml::describe(api.error_string, rc); }

cohort::Result<GpuInfo> query_device(const NvmlApi& api, unsigned index) {
  nvmlDevice_t device = nullptr;
  nvmlReturn_t rc = api.get_handle(index, &device);
  if (rc != kSuccess) {
    return io_error(fmt::format("nvmlDeviceGetHandleByIndex({}): {}", index, describe(api, rc)));
  }
  GpuInfo gpu;
  gpu.index = static_cast<int>(index);
  char uuid[nvml::kUuidBufferSize] = {};
  if ((rc = api.get_uuid(device, uuid, sizeof uuid)) != kSuccess) {
    return io_error(fmt::format("nvmlDeviceGetUUID(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.uuid = uuid;
  nvml::PciInfo pci = {};
  if ((rc = api.get_pci(device, &pci)) != kSuccess) {
    return io_error(fmt::format("nvmlDeviceGetPciInfo(GPU {}): {}", index, describe(api, rc)));
  }
  // nvidia-smi prints the 8-digit domain form; match it so both paths agree.
  gpu.pci_bus_id = api.pci_is_v3 && pci.busId[0]
                       ? std::string(pci.busId, strnlen(pci.busId, sizeof pci.busId))
                       : fmt::format("{:08X}:{:02X}:{:02X}.0", pci.domain, pci.bus, pci.device);
  char name[nvml::kNameBufferSize] = {};
  if ((rc = api.get_name(device, name, sizeof name)) != kSuccess) {
    return io_error(fmt::format("nvmlDeviceGetName(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.name = name;
  nvml::Memory memory = {};
  if ((rc = api.get_memory(device, &memory)) != kSuccess) {
    return io_error(fmt::format("nvmlDeviceGetMemoryInfo(GPU {}): {}", index, describe(api, rc)));
  }
  gpu.memory_bytes = memory.total;
  return gpu;
}

}  // namespace

std::optional<cohort::Result<std::vector<GpuInfo>>> probe_with_nvml() {
  // Closed on every path out of here.
  auto opened = cohort::DynamicLibrary::open(nvml::kLibrary);
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
  if (rc != kSuccess) {
    spdlog::info("nvmlInit failed: {}; trying nvidia-smi", describe(api, rc));
    return std::nullopt;
  }
  std::vector<GpuInfo> gpus;
  unsigned count = 0;
  rc = api.get_count(&count);
  cohort::Status status = rc == kSuccess ? cohort::Status::ok()
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

}  // namespace cohort::agent
