// From a loaded job file to what the control plane carries (JobControl).
// Clients resolve the file (overrides, defaults, absolute paths) before
// submitting, so daemons never read TOML and never see a relative path.
#pragma once

#include "jobs/spec.h"
#include "protocol/messages.h"

namespace cohort::protocol {

JobControl job_control_from_spec(const jobs::JobSpec& spec);

}  // namespace cohort::protocol
