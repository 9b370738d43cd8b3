// JobControl: what the control plane reads from a job file, and the one
// function that reads it.
//
// A job crosses the wire once, as its resolved job file: the client loads
// JOB.toml (overrides, defaults, absolute paths) and sends jobs::to_toml's
// text in SubmitJob; the coordinator stores that text and hands it on in
// every LaunchOrder; the agent writes it for cohort-worker. The coordinator
// (to schedule) and the agent (to launch) each derive this struct from the
// text with job_control_from_toml, so no field travels twice and no second
// definition of a job key exists.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::protocol {

// The [job] and [command] values of a loaded job file, as the coordinator
// and agent use them (DESIGN §6 names each key).
struct JobControl {
  std::string name;
  jobs::JobKind kind = jobs::JobKind::kCommand;
  int nodes_min = 1;
  int nodes_max = 1;
  int gpus_per_node = 1;
  int max_restarts = 0;
  int priority = 0;
  bool preemptible = false;
  std::string output_dir;   // absolute
  std::string working_dir;  // absolute
  jobs::DeviceVisibility devices = jobs::DeviceVisibility::kNode;
  double stop_grace_s = 10.0;
  double hang_timeout_s = 0.0;
  double placement_timeout_s = 0.0;
  double time_limit_s = 0.0;
  std::vector<jobs::Dependency> depends_on;
  std::string port_range;  // "LO-HI" for MASTER_PORT, or "" (the agent's range)
  std::map<std::string, std::string> env;
  std::vector<std::string> argv;  // command jobs
};

// Loads a resolved job file as a daemon receives it: at most
// kMaxJobTomlBytes (protocol/limits.h), every key checked by the job file's
// own loader (jobs/load.h). Nothing on the daemon's host is consulted: the
// text names absolute paths only, and anything relative would resolve
// against "/", never the daemon's working directory. Errors are
// kInvalidArgument naming the problem (the first few load errors, with line
// and column in the text); never throws.
Result<JobControl> job_control_from_toml(const std::string& job_toml);

}  // namespace cohort::protocol
