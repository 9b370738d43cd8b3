// libFuzzer: the job-file loader (TOML text → checked JobSpec), then the
// resolved spec written back and loaded again, as the coordinator and
// cohort-worker do (jobs/load.h).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "jobs/load.h"
#include "jobs/rank_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::jobs;
  std::string text(reinterpret_cast<const char*>(data), size);
  LoadOptions options;
  options.base_dir = "/fuzz";
  auto r = load_job_text(text, "fuzz.toml", options);
  for (const auto& e : r.errors) (void)e.to_string();
  if (!r.ok()) return 0;
  auto again = load_job_text(to_toml(r.spec), "resolved.toml", options);
  if (!again.ok()) {
    // A spec the loader accepted must survive its own round trip.
    std::abort();
  }
  if (r.spec.world_size(r.spec.job.nodes.max) <= 4096) {
    (void)plan_ranks(r.spec.job.nodes.max, r.spec.job.gpus_per_node, 1);
  }
  return 0;
}
