// job_control_from_toml: the resolved job file → what the daemons use.
#include "protocol/job_control.h"

#include "jobs/load.h"
#include "protocol/limits.h"

namespace cohort::protocol {
namespace {

// Load errors quoted in a reply or a log line; the rest are counted.
constexpr size_t kQuotedErrors = 3;

JobControl control_of(const jobs::JobSpec& spec) {
  JobControl c;
  c.name = spec.job.name;
  c.kind = spec.job.kind;
  c.nodes_min = spec.job.nodes.min;
  c.nodes_max = spec.job.nodes.max;
  c.gpus_per_node = spec.job.gpus_per_node;
  c.max_restarts = spec.job.max_restarts;
  c.priority = spec.job.priority;
  c.preemptible = spec.job.preemptible;
  c.output_dir = spec.job.output_dir;
  c.working_dir = spec.job.working_dir;
  c.devices = spec.job.devices;
  c.stop_grace_s = spec.job.stop_grace_s;
  c.hang_timeout_s = spec.job.hang_timeout_s;
  c.placement_timeout_s = spec.job.placement_timeout_s;
  c.time_limit_s = spec.job.time_limit_s;
  for (const auto& text : spec.job.depends_on) {
    jobs::Dependency d;
    std::string why;
    if (jobs::parse_dependency(text, &d, &why)) c.depends_on.push_back(d);  // the loader refused the rest
  }
  c.port_range = spec.job.port_range;
  c.env = spec.job.env;
  c.argv = spec.command.argv;
  return c;
}

}  // namespace

Result<JobControl> job_control_from_toml(const std::string& job_toml) {
  if (job_toml.empty()) return invalid_argument("the job carries no job file (job_toml is empty)");
  if (job_toml.size() > kMaxJobTomlBytes) {
    return invalid_argument("the resolved job file is " + std::to_string(job_toml.size()) +
                            " bytes; at most " + std::to_string(kMaxJobTomlBytes));
  }
  const jobs::LoadOptions options{.overrides = {}, .base_dir = "/", .file_dir = "/"};
  const jobs::LoadResult loaded = jobs::load_job_text(job_toml, "job.resolved.toml", options);
  if (!loaded.ok()) {
    std::string text = "the resolved job file does not load: ";
    for (size_t i = 0; i < loaded.errors.size() && i < kQuotedErrors; ++i) {
      text += (i ? "; " : "") + loaded.errors[i].to_string().substr(0, 512);
    }
    if (loaded.errors.size() > kQuotedErrors)
      text += " (and " + std::to_string(loaded.errors.size() - kQuotedErrors) + " more)";
    return invalid_argument(text);
  }
  return control_of(loaded.spec);
}

}  // namespace cohort::protocol
