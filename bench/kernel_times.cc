// Per-kernel GPU time of any CUDA program, CUDA graph replays included,
// loaded with LD_PRELOAD:
//
//   KERNEL_TIMES=/tmp/kt LD_PRELOAD=build/bench/libcohort_kernel_times.so prog ...
//
// writes /tmp/kt.<pid>.txt at exit for every process that ran kernels.
// Nsight Compute runs kernels one at a time, which overstates the small
// kernels of a decode step and hides how graph-launched kernels overlap;
// CUPTI's activity records time each kernel as it ran. For each graph
// replayed at least kMinLaunches times the report gives the launch's span
// (first kernel start to last kernel end), the time some kernel was
// running, and each kernel name's share per launch; kernels launched
// outside graphs get one table of their own.
#include <cupti.h>
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr int kMinLaunches = 5;

struct KernelRecord {
  uint64_t start, end;
  uint64_t node;
  uint32_t graph;
  int name;  // index into names
};

std::mutex mutex;
std::vector<KernelRecord> records;
std::vector<std::string> names;
std::map<std::string, int> name_index;
bool enabled = false;

// "void ns::kernel<...>(args)" -> "ns::kernel<...>", cut to 90 characters.
std::string short_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Cut the argument list: the last '(' at template depth 0.
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  if (s.size() > 90) s = s.substr(0, 87) + "...";
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    const std::string name = short_name(k->name ? k->name : "?");
    auto [it, added] = name_index.emplace(name, static_cast<int>(names.size()));
    if (added) names.push_back(name);
    records.push_back({k->start, k->end, k->graphNodeId, k->graphId, it->second});
  }
  std::free(buffer);
}

struct NameTotal {
  double ns = 0;
  int64_t calls = 0;
};

void write_table(FILE* out, const std::map<int, NameTotal>& by_name, double per) {
  std::vector<std::pair<int, NameTotal>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::fprintf(out, "%12s %8s %10s  %s\n", "us/launch", "calls", "us/call", "kernel");
  for (const auto& [name, t] : rows) {
    std::fprintf(out, "%12.1f %8.1f %10.2f  %s\n", t.ns / 1e3 / per, t.calls / per,
                 t.ns / 1e3 / t.calls, names[name].c_str());
  }
}

// One graph's launches: kernels sorted by start, cut into launches of one
// record per node (a stream runs its graph launches one after another).
void report_graph(FILE* out, uint32_t graph, std::vector<KernelRecord>& kernels) {
  std::sort(kernels.begin(), kernels.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  std::vector<uint64_t> nodes;
  for (const KernelRecord& k : kernels) nodes.push_back(k.node);
  std::sort(nodes.begin(), nodes.end());
  const size_t per_launch = std::unique(nodes.begin(), nodes.end()) - nodes.begin();
  const size_t launches = kernels.size() / per_launch;
  if (launches < kMinLaunches) return;
  double span = 0, busy = 0;
  std::map<int, NameTotal> by_name;
  for (size_t l = 0; l < launches; ++l) {
    const KernelRecord* first = &kernels[l * per_launch];
    uint64_t covered_to = first->start, end = 0;
    for (size_t i = 0; i < per_launch; ++i) {
      const KernelRecord& k = first[i];
      end = std::max(end, k.end);
      if (k.end > covered_to) busy += k.end - std::max(k.start, covered_to);
      covered_to = std::max(covered_to, k.end);
      NameTotal& t = by_name[k.name];
      t.ns += k.end - k.start;
      ++t.calls;
    }
    span += end - first->start;
  }
  double summed = 0;
  for (const auto& [name, t] : by_name) summed += t.ns;
  std::fprintf(out,
               "\ngraph %u: %zu launches of %zu kernels; per launch: span %.1f us, some kernel "
               "running %.1f us, kernel times summed %.1f us\n",
               graph, launches, per_launch, span / 1e3 / launches, busy / 1e3 / launches,
               summed / 1e3 / launches);
  write_table(out, by_name, static_cast<double>(launches));
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(mutex);
  if (records.empty()) return;
  const char* prefix = std::getenv("KERNEL_TIMES");
  const std::string path = std::string(prefix) + "." + std::to_string(getpid()) + ".txt";
  FILE* out = std::fopen(path.c_str(), "w");
  if (!out) {
    std::fprintf(stderr, "kernel_times: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  std::map<uint32_t, std::vector<KernelRecord>> graphs;
  std::map<int, NameTotal> eager;
  size_t in_graphs = 0;
  for (const KernelRecord& k : records) {
    if (k.graph != 0) {
      graphs[k.graph].push_back(k);
      ++in_graphs;
    } else {
      NameTotal& t = eager[k.name];
      t.ns += k.end - k.start;
      ++t.calls;
    }
  }
  std::fprintf(out, "%zu kernels recorded, %zu in graphs\n", records.size(), in_graphs);
  for (auto& [graph, kernels] : graphs) report_graph(out, graph, kernels);
  std::fprintf(out, "\nkernels launched outside graphs (totals):\n");
  write_table(out, eager, 1.0);
  std::fclose(out);
}

__attribute__((constructor)) void start() {
  if (!std::getenv("KERNEL_TIMES")) return;
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_times: CUPTI did not start; no report\n");
    return;
  }
  enabled = true;
}

__attribute__((destructor)) void stop() {
  if (enabled) report();
}

}  // namespace
