// Private: what the coordinator accepts from peers before it stores anything
// (DESIGN §4 "Bounded"): every field of a submitted job and of a node's
// registration is checked against protocol/limits.h (the job file's own size
// by job_control_from_toml, before it is parsed), so no peer can make a
// reply exceed the transport's cap or the coordinator's memory grow without
// bound. Errors name the field, its size and the cap.
#pragma once

#include "base/status.h"
#include "protocol/job_control.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

Status check_job_control(const protocol::JobControl& job);
Status check_registration(const protocol::RegisterNode& message);
Status check_running(const std::vector<protocol::RunningWorker>& running);
// Node and job names: letters, digits, '.', '_' and '-', at most kMaxNameBytes.
bool is_plain_name(const std::string& name);

}  // namespace cohort::coordinator
