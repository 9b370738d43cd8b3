// Field-by-field checks of submitted jobs and node registrations.
#include "coordinator/admission.h"

#include <cmath>

#include "protocol/limits.h"

namespace cohort::coordinator {

using namespace protocol;

namespace {

Status too_long(const std::string& field, size_t size, size_t cap) {
  return invalid_argument(field + " is " + std::to_string(size) + " bytes; at most " +
                          std::to_string(cap));
}

bool is_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// A number of seconds: finite, not negative, at most `max`.
Status check_seconds(const char* field, double value, double max) {
  if (!std::isfinite(value) || value < 0 || value > max) {
    return invalid_argument(std::string(field) + " must be a number of seconds from 0 to " +
                            std::to_string(int64_t(max)));
  }
  return Status::ok();
}

}  // namespace

bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status check_job_control(const JobControl& c) {
  if (c.name.size() > kMaxNameBytes) return too_long("job.name", c.name.size(), kMaxNameBytes);
  if (!is_plain_name(c.name)) return invalid_argument("job.name must be letters, digits, '.', '_' and '-'");
  if (c.nodes_min < 1 || c.nodes_max < c.nodes_min || c.nodes_max > kMaxNodesPerJob)
    return invalid_argument("job.nodes must be N or MIN:MAX with 1 <= MIN <= MAX <= " +
                            std::to_string(kMaxNodesPerJob));
  if (c.gpus_per_node < 1 || c.gpus_per_node > kMaxGpusPerNode)
    return invalid_argument("job.gpus_per_node must be from 1 to " + std::to_string(kMaxGpusPerNode));
  if (int64_t(c.nodes_max) * c.gpus_per_node > kMaxRanksPerJob)
    return invalid_argument("job.nodes × job.gpus_per_node is more than " + std::to_string(kMaxRanksPerJob) + " ranks");
  if (c.max_restarts < 0 || c.max_restarts > 1000000) return invalid_argument("job.max_restarts must be from 0 to 1000000");
  if (c.priority < -1000000 || c.priority > 1000000) return invalid_argument("job.priority must be from -1000000 to 1000000");
  // kind and devices are enums: a file naming anything else did not load.
  if (c.kind == jobs::JobKind::kCommand && (c.argv.empty() || c.argv[0].empty()))
    return invalid_argument("a command job needs command.argv");
  if (c.output_dir.empty()) return invalid_argument("job.output_dir is empty");
  COHORT_RETURN_IF_ERROR(check_seconds("job.stop_grace", c.stop_grace_s, 86400));
  COHORT_RETURN_IF_ERROR(check_seconds("job.hang_timeout", c.hang_timeout_s, 1e7));
  COHORT_RETURN_IF_ERROR(check_seconds("job.placement_timeout", c.placement_timeout_s, 1e9));
  if (!c.port_range.empty()) {
    jobs::PortRange range;
    std::string why;
    if (!jobs::parse_port_range(c.port_range, &range, &why)) return invalid_argument("job.port_range: " + why);
  }
  for (const auto* path : {&c.output_dir, &c.working_dir}) {
    if (path->size() > kMaxPathBytes) return too_long("a path of the job", path->size(), kMaxPathBytes);
  }
  if (c.argv.size() > kMaxArgs) return invalid_argument("command.argv has more than " + std::to_string(kMaxArgs) + " entries");
  if (c.env.size() > kMaxEnvVars) return invalid_argument("job.env has more than " + std::to_string(kMaxEnvVars) + " entries");
  size_t bytes = 0;
  for (const auto& a : c.argv) bytes += a.size() + 1;
  for (const auto& [k, v] : c.env) {
    if (!is_env_name(k)) return invalid_argument("job.env: '" + k.substr(0, 64) + "' is not an environment variable name");
    bytes += k.size() + v.size() + 2;
  }
  if (bytes > kMaxArgvEnvBytes) return too_long("command.argv and job.env together", bytes, kMaxArgvEnvBytes);
  return Status::ok();
}

Status check_running(const std::vector<RunningWorker>& running) {
  if (running.size() > kMaxRunningWorkers)
    return invalid_argument("more than " + std::to_string(kMaxRunningWorkers) + " running workers reported");
  for (const auto& w : running) {
    if (w.job_id.size() > kMaxNameBytes) return too_long("a running worker's job id", w.job_id.size(), kMaxNameBytes);
  }
  return Status::ok();
}

Status check_registration(const RegisterNode& m) {
  if (!is_plain_name(m.node))
    return invalid_argument("register: node name must be 1 to " + std::to_string(kMaxNameBytes) +
                            " letters, digits, '.', '_' or '-'");
  if (m.address.size() > kMaxAddressBytes) return too_long("register: address", m.address.size(), kMaxAddressBytes);
  if (m.gpus.size() > size_t(kMaxGpusPerNode))
    return invalid_argument("register: " + std::to_string(m.gpus.size()) + " GPUs; at most " +
                            std::to_string(kMaxGpusPerNode) + " per node");
  for (const auto& g : m.gpus) {
    for (const auto* f : {&g.uuid, &g.pci_bus_id, &g.name}) {
      if (f->size() > kMaxGpuFieldBytes) return too_long("register: a GPU field", f->size(), kMaxGpuFieldBytes);
    }
  }
  if (m.fence_reason.size() > 1024) return too_long("register: fence_reason", m.fence_reason.size(), 1024);
  COHORT_RETURN_IF_ERROR(check_running(m.fenced));
  return check_running(m.running);
}

}  // namespace cohort::coordinator
