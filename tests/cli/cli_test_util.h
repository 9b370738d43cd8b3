// What the process tests of the command line share: a job file that sleeps
// or prints, a program run to completion, and JSON from a command's stdout.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster_harness.h"

namespace cohort::testing {

// A command job of `gpus` ranks on one node running `sh -c script`.
std::string command_job(const Cluster& c, const std::string& name, int gpus,
                        const std::string& script);

// Any program (not only `cohort`) run to its end: exit code, stdout, stderr.
CommandResult run_program(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

// stdout as JSON; a discarded value when it is not exactly one document.
nlohmann::json json_of(const CommandResult& r);

// The id `cohort submit` printed (its first line).
std::string submitted_id(const CommandResult& r);

}  // namespace cohort::testing
