// libFuzzer: `--set key=value` overrides on a valid job file. The input is
// split at newlines into up to eight overrides (jobs/load.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "jobs/load.h"

namespace {

constexpr const char* kJob = R"([job]
name = "fuzz"
kind = "train"
gpus_per_node = 2
[model]
preset = "tiny"
[train]
data = "corpus.txt"
steps = 10
[command]
argv = ["true"]
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::jobs;
  std::string text(reinterpret_cast<const char*>(data), size);
  LoadOptions options;
  options.base_dir = "/fuzz";
  size_t start = 0;
  for (int i = 0; i < 8 && start <= text.size(); ++i) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    auto o = parse_override(text.substr(start, nl - start));
    if (o) options.overrides.push_back(*o);
    start = nl + 1;
  }
  auto r = load_job_text(kJob, "base.toml", options);
  for (const auto& e : r.errors) (void)e.to_string();
  if (r.ok()) (void)to_toml(r.spec);
  return 0;
}
