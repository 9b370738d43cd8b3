// plan_elastic_batch: the kept global batch and the node count that keeps it.
#include "coordinator/elastic_batch.h"

#include <algorithm>

#include "jobs/load.h"

namespace cohort::coordinator {

Result<BatchPlan> plan_elastic_batch(const std::string& job_toml, int fitting_nodes) {
  const jobs::LoadOptions options{.overrides = {}, .base_dir = "/", .file_dir = "/"};
  jobs::LoadResult loaded = jobs::load_job_text(job_toml, "job.resolved.toml", options);
  BatchPlan plan;
  plan.nodes = fitting_nodes;
  plan.launch_toml = job_toml;
  if (!loaded.ok()) return plan;  // admitted already; the worker reports its own errors
  jobs::JobSpec& spec = loaded.spec;
  if (spec.job.kind != jobs::JobKind::kTrain || !spec.job.nodes.elastic() || spec.parallel.tensor_parallel < 1) {
    return plan;
  }
  const int most = std::min(fitting_nodes, spec.job.nodes.max);
  const int micro = spec.train.micro_batch;
  if (spec.train.elastic_batch == "scale") {
    plan.nodes = most;
    plan.note = "global batch " + std::to_string(spec.effective_global_batch(most)) + " at " + std::to_string(most) +
                " node(s): it follows the world size (train.elastic_batch = \"scale\")";
    return plan;
  }
  const int kept = spec.train.global_batch > 0 ? spec.train.global_batch
                                               : micro * spec.data_parallel(spec.job.nodes.max);
  std::string tried;
  for (int nodes = most; nodes >= spec.job.nodes.min; --nodes) {
    const int per_step = micro * spec.data_parallel(nodes);
    if (per_step > 0 && kept % per_step == 0) {
      spec.train.global_batch = kept;
      plan.nodes = nodes;
      plan.global_batch = kept;
      plan.accumulation = kept / per_step;
      plan.launch_toml = jobs::to_toml(spec);
      plan.note = "global batch " + std::to_string(kept) + " kept at " + std::to_string(nodes) +
                  " node(s): gradient accumulation " + std::to_string(plan.accumulation) + " (micro_batch " +
                  std::to_string(micro) + " × data-parallel " + std::to_string(spec.data_parallel(nodes)) + ")" +
                  (nodes < most ? "; " + std::to_string(most) + " node(s) fit, but cannot keep it" : "");
      return plan;
    }
    tried += (tried.empty() ? "" : ", ") + std::to_string(nodes) + " (micro_batch " + std::to_string(micro) +
             " × data-parallel " + std::to_string(spec.data_parallel(nodes)) + " = " + std::to_string(per_step) + ")";
  }
  return failed_precondition("train.global_batch " + std::to_string(kept) +
                             (spec.train.global_batch > 0 ? "" : " (micro_batch × data-parallel degree at " +
                                                                     std::to_string(spec.job.nodes.max) + " nodes)") +
                             " cannot be kept on the nodes that fit: it is not divisible at " + tried +
                             " node(s). Set train.global_batch to a multiple of each, or train.elastic_batch = "
                             "\"scale\" to let it follow the world size");
}

}  // namespace cohort::coordinator
