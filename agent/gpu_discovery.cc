// GPU probers: NVML with an nvidia-smi fallback, fakes and CPU slots.
#include "agent/gpu_discovery.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/gpu_health.h"
#include "agent/nvml_monitor.h"
#include "agent/nvml_prober.h"

namespace cohort::agent {
namespace {

constexpr uint64_t kMiB = 1024ull * 1024ull;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

template <typename T>
bool parse_number(std::string_view text, T* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

cohort::Result<GpuInfo> parse_csv_line(std::string_view line, int line_number) {
  std::vector<std::string_view> fields;
  for (size_t start = 0;;) {
    size_t comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  auto bad = [&](const std::string& why) {
    return invalid_argument(
        fmt::format("nvidia-smi output line {}: {}: \"{}\"", line_number, why, std::string(line)));
  };
  if (fields.size() < 5) return bad("expected 5 fields (index, uuid, pci.bus_id, name, memory)");
  GpuInfo gpu;
  if (!parse_number(fields[0], &gpu.index) || gpu.index < 0) return bad("index is not a number");
  gpu.uuid = fields[1];
  gpu.pci_bus_id = fields[2];
  // A name with a comma in it spans several fields: glue the middle back.
  size_t name_begin = fields[3].data() - line.data();
  size_t name_end =
      fields[fields.size() - 2].data() + fields[fields.size() - 2].size() - line.data();
  gpu.name = line.substr(name_begin, name_end - name_begin);
  std::string_view memory = fields.back();
  uint64_t mib = 0;
  if (memory == "[N/A]" || memory == "N/A") {
    mib = 0;
  } else if (!parse_number(memory, &mib)) {
    return bad("memory.total is not a number of MiB");
  }
  gpu.memory_bytes = mib * kMiB;
  if (gpu.uuid.empty() || gpu.pci_bus_id.empty()) return bad("empty uuid or pci.bus_id");
  return gpu;
}

// nvidia-smi's full path from PATH, or "" when it is not installed.
std::string find_nvidia_smi() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string_view::npos) colon = dirs.size();
    std::string candidate = std::string(dirs.substr(start, colon - start)) + "/nvidia-smi";
    if (colon > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return "";
}

cohort::Result<std::vector<GpuInfo>> probe_with_nvidia_smi() {
  std::string smi = find_nvidia_smi();
  if (smi.empty()) {
    spdlog::info("no NVML and no nvidia-smi: this node has no GPUs");
    return std::vector<GpuInfo>{};
  }
  std::string command = fmt::format("'{}' {} 2>&1", smi, kNvidiaSmiQuery);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return errno_error("running " + smi);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // Typical of containers with the tools but no driver: report no GPUs, loudly.
    spdlog::warn("{} failed (status {}), treating this node as having no GPUs: {}", smi, status,
                 std::string(trim(output)));
    return std::vector<GpuInfo>{};
  }
  return parse_nvidia_smi_csv(output);
}

class SystemProber final : public GpuProber {
 public:
  cohort::Result<std::vector<GpuInfo>> probe() override {
    if (auto nvml = probe_with_nvml()) {
      if (!nvml->is_ok()) return nvml->status().with_context("probing GPUs with NVML");
      return std::move(*nvml);
    }
    auto gpus = probe_with_nvidia_smi();
    if (!gpus.is_ok()) return gpus.status().with_context("probing GPUs with nvidia-smi");
    return gpus;
  }
  std::vector<GpuUsage> sample() override { return monitor_.sample(); }
  std::vector<GpuFault> health() override { return tracker_.update(monitor_.read_health()); }

 private:
  NvmlMonitor monitor_;
  GpuHealthTracker tracker_;
};

class ListProber final : public GpuProber {
 public:
  ListProber(std::vector<GpuInfo> gpus, bool fixed_samples) : gpus_(std::move(gpus)), fixed_samples_(fixed_samples) {}
  cohort::Result<std::vector<GpuInfo>> probe() override { return gpus_; }
  std::vector<GpuUsage> sample() override {
    std::vector<GpuUsage> out;
    if (!fixed_samples_) return out;
    for (const auto& g : gpus_) out.push_back({g.index, double((10 * g.index + 5) % 100) / 100, uint64_t(g.index + 1) << 30});
    return out;
  }

 private:
  std::vector<GpuInfo> gpus_;
  bool fixed_samples_ = false;
};

}  // namespace

bool is_cpu_slot(const GpuInfo& gpu) {
  return gpu.pci_bus_id.empty();
}

cohort::Result<std::vector<GpuInfo>> parse_nvidia_smi_csv(std::string_view csv) {
  std::vector<GpuInfo> gpus;
  std::set<int> indices;
  int line_number = 0;
  for (size_t start = 0; start < csv.size();) {
    size_t end = csv.find('\n', start);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = trim(csv.substr(start, end - start));
    start = end + 1;
    ++line_number;
    if (line.empty()) continue;
    COHORT_ASSIGN_OR_RETURN(GpuInfo gpu, parse_csv_line(line, line_number));
    if (!indices.insert(gpu.index).second) {
      return invalid_argument(fmt::format("nvidia-smi output line {}: GPU index {} appears twice",
                                          line_number, gpu.index));
    }
    gpus.push_back(std::move(gpu));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  return gpus;
}

std::unique_ptr<GpuProber> make_system_prober() {
  return std::make_unique<SystemProber>();
}

std::unique_ptr<GpuProber> make_fake_prober(int n) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < n; ++i) {
    // Shaped like the real thing so code that parses UUIDs or bus ids is exercised.
    gpus.push_back({i, fmt::format("GPU-fa4e0000-0000-4000-8000-{:012x}", i),
                    fmt::format("00000000:{:02X}:00.0", 0x18 + i), "Fake GPU",
                    80ull * 1024 * kMiB});
  }
  return std::make_unique<ListProber>(std::move(gpus), true);
}

std::unique_ptr<GpuProber> make_cpu_slots_prober(int n) {
  std::vector<GpuInfo> slots;
  for (int i = 0; i < n; ++i) slots.push_back({i, fmt::format("cpu-slot-{}", i), "", "cpu", 0});
  return std::make_unique<ListProber>(std::move(slots), false);
}

namespace {

class SelectedProber final : public GpuProber {
 public:
  SelectedProber(std::shared_ptr<GpuProber> inner, std::vector<int> indices)
      : inner_(std::move(inner)), indices_(std::move(indices)) {}
  cohort::Result<std::vector<GpuInfo>> probe() override {
    COHORT_ASSIGN_OR_RETURN(std::vector<GpuInfo> all, inner_->probe());
    std::vector<GpuInfo> chosen;
    for (int index : indices_) {
      auto it = std::find_if(all.begin(), all.end(), [&](const GpuInfo& g) { return g.index == index; });
      if (it == all.end())
        return cohort::invalid_argument(fmt::format("--gpus names GPU {}, which this node does not have ({} found)",
                                                    index, all.size()));
      chosen.push_back(*it);
    }
    // Index order is PCI bus order, which the launch contract keeps.
    std::sort(chosen.begin(), chosen.end(), [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
    return chosen;
  }
  std::vector<GpuUsage> sample() override {
    std::vector<GpuUsage> out;
    for (const auto& s : inner_->sample()) {
      if (std::find(indices_.begin(), indices_.end(), s.index) != indices_.end()) out.push_back(s);
    }
    return out;
  }
  std::vector<GpuFault> health() override {
    std::vector<GpuFault> out;
    for (const auto& f : inner_->health()) {
      if (std::find(indices_.begin(), indices_.end(), f.index) != indices_.end()) out.push_back(f);
    }
    return out;
  }

 private:
  std::shared_ptr<GpuProber> inner_;
  std::vector<int> indices_;
};

}  // namespace

std::unique_ptr<GpuProber> make_selected_prober(std::shared_ptr<GpuProber> inner, std::vector<int> indices) {
  return std::make_unique<SelectedProber>(std::move(inner), std::move(indices));
}

}  // namespace cohort::agent
