// GPU discovery: what an agent reports to the coordinator when it registers.
//
// Indices are always the ones `nvidia-smi` shows (NVML's order, which is PCI
// bus order); workers get CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA numbers
// devices the same way and CUDA_VISIBLE_DEVICES means what the agent means.
// The prober is an interface so the agent can be handed fakes (`--fake-gpus`)
// or CPU slots (`--cpu-slots`) on hosts without GPUs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort::agent {

struct GpuInfo {
  int index = 0;           // nvidia-smi's index (PCI bus order)
  std::string uuid;        // "GPU-…"; "cpu-slot-N" for CPU slots
  std::string pci_bus_id;  // "00000000:19:00.0"; empty for CPU slots
  std::string name;        // "NVIDIA H200"; "cpu" for CPU slots
  uint64_t memory_bytes = 0;
};

// What a GPU is doing: the agent reports it to the coordinator every few
// seconds (the web page's GPU table, /metrics).
struct GpuUsage {
  int index = 0;
  double utilization = 0;  // share of the last sample period a kernel ran, 0..1
  uint64_t memory_used_bytes = 0;
};

// A GPU the prober finds unhealthy: an Xid error, uncorrected ECC errors,
// or no answer at all. The agent reports it with the GPU's figures; the
// coordinator drains the node with the reason (issue 35).
struct GpuFault {
  int index = 0;
  std::string reason;  // "Xid 79 (GPU has fallen off the bus)", "3 uncorrected ECC errors", ...
};

// True for the entries of make_cpu_slots_prober(): workers on them get no GPU.
bool is_cpu_slot(const GpuInfo& gpu);

// Thread-compatible: one probe at a time per prober.
class GpuProber {
 public:
  virtual ~GpuProber() = default;
  // The node's GPUs sorted by index. A host without GPUs (no NVML library, no
  // nvidia-smi, or a driver that does not answer) gives an empty list, not an
  // error; an error means the tools answered something that makes no sense.
  virtual cohort::Result<std::vector<GpuInfo>> probe() = 0;
  // The GPUs' utilisation and memory now, by index. Empty where that cannot
  // be known (no NVML, CPU slots); a failing query is logged, not returned,
  // because nothing the agent does depends on it.
  virtual std::vector<GpuUsage> sample() { return {}; }
  // The GPUs found unhealthy now, by index; empty when all are well or it
  // cannot be known (no NVML, fakes, CPU slots). The system prober reads
  // NVML's Xid events, uncorrected ECC counts and whether each GPU answers
  // (gpu_health.h has the rules); tests hand the agent a prober that
  // reports faults.
  virtual std::vector<GpuFault> health() { return {}; }
};

// NVML (libnvidia-ml.so.1, loaded with dlopen at probe time so the control
// plane links no NVIDIA library), else `nvidia-smi`'s CSV output.
std::unique_ptr<GpuProber> make_system_prober();
// `n` GPUs with distinct UUIDs and PCI bus ids, for tests and `--fake-gpus N`.
// Their samples are fixed test values: GPU i is (10·i + 5) % 100 percent busy
// with (i + 1) GiB in use.
std::unique_ptr<GpuProber> make_fake_prober(int n);
// `n` CPU slots (is_cpu_slot() true), for `--cpu-slots N`.
std::unique_ptr<GpuProber> make_cpu_slots_prober(int n);

// Only the GPUs whose nvidia-smi index is in `indices` (`cohort agent --gpus
// 0,1`): a node that shares its GPUs offers cohort some of them. An index the
// inner prober does not report is an error at probe time, naming it.
std::unique_ptr<GpuProber> make_selected_prober(std::shared_ptr<GpuProber> inner, std::vector<int> indices);

// The query the system prober runs when NVML is not usable.
inline constexpr std::string_view kNvidiaSmiQuery =
    "--query-gpu=index,uuid,pci.bus_id,name,memory.total --format=csv,noheader,nounits";

// Parses the output of `nvidia-smi <kNvidiaSmiQuery>`: one GPU per line,
// "0, GPU-…, 00000000:19:00.0, NVIDIA H200, 143771" (memory in MiB; "[N/A]"
// reads as 0). Blank lines are skipped. Errors name the line at fault.
cohort::Result<std::vector<GpuInfo>> parse_nvidia_smi_csv(std::string_view csv);

}  // namespace cohort::agent
