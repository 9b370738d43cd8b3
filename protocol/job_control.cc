// JobSpec → JobControl.
#include "protocol/job_control.h"

#include <filesystem>

#include "jobs/load.h"

namespace cohort::protocol {

JobControl job_control_from_spec(const jobs::JobSpec& spec) {
  namespace fs = std::filesystem;
  JobControl c;
  c.name = spec.job.name;
  c.kind = spec.job.kind;
  c.nodes_min = spec.job.nodes.min;
  c.nodes_max = spec.job.nodes.max;
  c.gpus_per_node = spec.job.gpus_per_node;
  c.max_restarts = spec.job.max_restarts;
  c.priority = spec.job.priority;
  c.output_dir = fs::absolute(spec.job.output_dir).lexically_normal().string();
  c.working_dir = spec.job.working_dir.empty()
                      ? fs::current_path().string()
                      : fs::absolute(spec.job.working_dir).lexically_normal().string();
  c.devices = spec.job.devices;
  c.stop_grace_s = spec.job.stop_grace_s;
  c.hang_timeout_s = spec.job.hang_timeout_s;
  c.placement_timeout_s = spec.job.placement_timeout_s;
  c.port_range = spec.job.port_range;
  c.env = spec.job.env;
  c.argv = spec.command.argv;
  c.job_toml = jobs::to_toml(spec);
  c.source_path = spec.source_path;
  return c;
}

}  // namespace cohort::protocol
