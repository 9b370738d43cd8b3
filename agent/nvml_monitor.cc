// NvmlMonitor: one NVML session for the agent's life, opened at the first
// look. Health readings use what the library has: an older driver without
// the event calls still reports ECC counts and GPUs that stop answering.
#include "agent/nvml_monitor.h"

#include <algorithm>
#include <memory>

#include <spdlog/spdlog.h>

#include "agent/nvml_api.h"
#include "base/dynamic_library.h"

namespace cohort::agent {

using nvml::kSuccess;

struct NvmlMonitor::Session {
  cohort::DynamicLibrary lib;
  nvml::Return (*shutdown)() = nullptr;
  const char* (*error_string)(nvml::Return) = nullptr;
  nvml::Return (*get_count)(unsigned*) = nullptr;
  nvml::Return (*get_handle)(unsigned, nvml::Device*) = nullptr;
  nvml::Return (*get_utilization)(nvml::Device, nvml::Utilization*) = nullptr;
  nvml::Return (*get_memory)(nvml::Device, nvml::Memory*) = nullptr;
  // Health; each may be missing from an old library.
  nvml::Return (*get_total_ecc)(nvml::Device, int, int, unsigned long long*) = nullptr;
  nvml::Return (*event_set_create)(nvml::EventSet*) = nullptr;
  nvml::Return (*register_events)(nvml::Device, unsigned long long, nvml::EventSet) = nullptr;
  nvml::Return (*event_set_wait)(nvml::EventSet, nvml::EventData*, unsigned) = nullptr;
  nvml::Return (*event_set_free)(nvml::EventSet) = nullptr;
  nvml::EventSet events = nullptr;    // Xid events of every GPU that could register
  std::vector<nvml::Device> devices;  // by index; null until its handle could be had
  bool wait_warned = false;

  std::string describe(nvml::Return rc) const { return nvml::describe(error_string, rc); }
  // The handle of GPU `index`, registered for Xid events the first time.
  nvml::Return device(unsigned index, nvml::Device* out);
};

nvml::Return NvmlMonitor::Session::device(unsigned index, nvml::Device* out) {
  if (index < devices.size() && devices[index]) {
    *out = devices[index];
    return kSuccess;
  }
  nvml::Return rc = get_handle(index, out);
  if (rc != kSuccess || index >= devices.size()) return rc;
  devices[index] = *out;
  if (events) {
    nvml::Return registered = register_events(*out, nvml::kEventTypeXidCriticalError, events);
    if (registered != kSuccess) {
      spdlog::info(
          "NVML: GPU {} gives no Xid events ({}); its ECC counts and whether it answers are still "
          "watched",
          index, describe(registered));
    }
  }
  return kSuccess;
}

NvmlMonitor::~NvmlMonitor() {
  if (!session_) return;
  if (session_->events && session_->event_set_free) session_->event_set_free(session_->events);
  session_->shutdown();
  delete session_;
}

bool NvmlMonitor::open() {
  if (tried_) return session_ != nullptr;
  tried_ = true;
  auto opened = cohort::DynamicLibrary::open(nvml::kLibrary);
  if (!opened.is_ok()) return false;
  auto s = std::make_unique<Session>();
  s->lib = std::move(opened).value();
  nvml::Return (*init)() = nullptr;
  const cohort::DynamicLibrary& lib = s->lib;
  bool complete = lib.find("nvmlInit_v2", &init) && lib.find("nvmlShutdown", &s->shutdown) &&
                  lib.find("nvmlDeviceGetCount_v2", &s->get_count) &&
                  lib.find("nvmlDeviceGetHandleByIndex_v2", &s->get_handle) &&
                  lib.find("nvmlDeviceGetUtilizationRates", &s->get_utilization) &&
                  lib.find("nvmlDeviceGetMemoryInfo", &s->get_memory);
  if (!complete || init() != kSuccess) return false;
  lib.find("nvmlErrorString", &s->error_string);
  lib.find("nvmlDeviceGetTotalEccErrors", &s->get_total_ecc);
  lib.find("nvmlEventSetFree", &s->event_set_free);
  // _v2 fills the MIG instance fields too; the layout's start is the same.
  bool events = lib.find("nvmlEventSetCreate", &s->event_set_create) &&
                lib.find("nvmlDeviceRegisterEvents", &s->register_events) &&
                (lib.find("nvmlEventSetWait_v2", &s->event_set_wait) ||
                 lib.find("nvmlEventSetWait", &s->event_set_wait));
  if (events) {
    nvml::Return rc = s->event_set_create(&s->events);
    if (rc != kSuccess) {
      s->events = nullptr;
      spdlog::warn("NVML: cannot create an event set ({}); Xid errors go unnoticed",
                   s->describe(rc));
    }
  } else {
    spdlog::warn("{} has no event calls; Xid errors go unnoticed (ECC counts are still watched)",
                 nvml::kLibrary);
  }
  unsigned count = 0;
  if (s->get_count(&count) != kSuccess) count = 0;
  s->devices.assign(std::min(count, 1024u), nullptr);
  for (unsigned i = 0; i < s->devices.size(); ++i) {
    nvml::Device ignored = nullptr;
    (void)s->device(i,
                    &ignored);  // registers its Xid events now; a lost one is reported at each look
  }
  session_ = s.release();
  return true;
}

std::vector<GpuUsage> NvmlMonitor::sample() {
  std::vector<GpuUsage> out;
  if (!open()) return out;
  for (unsigned i = 0; i < session_->devices.size(); ++i) {
    nvml::Device device = nullptr;
    nvml::Utilization util = {};
    nvml::Memory memory = {};
    if (session_->device(i, &device) != kSuccess ||
        session_->get_utilization(device, &util) != kSuccess ||
        session_->get_memory(device, &memory) != kSuccess) {
      if (!warned_) spdlog::warn("NVML: cannot sample GPU {}; its utilisation is not reported", i);
      warned_ = true;
      continue;
    }
    out.push_back({int(i), std::min(util.gpu, 100u) / 100.0, memory.used});
  }
  return out;
}

std::vector<GpuHealthReading> NvmlMonitor::read_health() {
  if (!open()) return {};
  Session& s = *session_;
  std::vector<GpuHealthReading> out(s.devices.size());
  for (size_t i = 0; i < out.size(); ++i) out[i].index = int(i);
  // Events waiting now, never waiting for more; bounded, so that a storm of
  // them cannot hold the agent's loop (the rest come at the next look).
  for (int n = 0; s.events && n < 256; ++n) {
    nvml::EventData data = {};
    nvml::Return rc = s.event_set_wait(s.events, &data, 0);
    if (rc == nvml::kErrorTimeout) break;
    if (rc != kSuccess) {
      if (!s.wait_warned) spdlog::warn("NVML: reading Xid events failed: {}", s.describe(rc));
      s.wait_warned = true;
      break;
    }
    auto gpu = std::find(s.devices.begin(), s.devices.end(), data.device);
    if (!(data.eventType & nvml::kEventTypeXidCriticalError) || !data.device ||
        gpu == s.devices.end())
      continue;
    out[size_t(gpu - s.devices.begin())].xids.push_back(data.eventData);
  }
  for (auto& r : out) {
    nvml::Device device = nullptr;
    nvml::Return rc = s.device(unsigned(r.index), &device);
    if (rc == kSuccess) {
      unsigned long long count = 0;
      rc = s.get_total_ecc ? s.get_total_ecc(device, nvml::kMemoryErrorTypeUncorrected,
                                             nvml::kVolatileEcc, &count)
                           : nvml::kErrorNotSupported;
      if (rc == kSuccess) {
        r.uncorrected_ecc = count;
        continue;
      }
      // ECC off (or not reported): ask what every GPU answers.
      nvml::Memory memory = {};
      rc = s.get_memory(device, &memory);
    }
    if (nvml::gpu_does_not_answer(rc)) r.no_answer = s.describe(rc);
  }
  return out;
}

}  // namespace cohort::agent
