// Private: per-client-key limits, Slurm's association limits for cohort: how
// many GPUs the running jobs of one client key may hold at once (MaxTRES
// with gres/gpu) and how many of its jobs may wait in the queue (like
// MaxSubmitJobs, counting only the waiting ones). The operator sets a
// default for every key (CoordinatorOptions::max_gpus_per_key,
// max_queued_per_key) and a key's own limits on its line in
// authorized_clients (protocol::ClientKeySettings). Without CURVE every
// submitter is one owner, the local user (key ""), under the defaults.
//
// Pure functions: the coordinator counts the usage and applies the verdicts
// (client_requests.cc at submit, job_placement.cc when it places).
#pragma once

#include <string>

#include "base/status.h"
#include "protocol/security.h"

namespace cohort::coordinator {

// The limits that hold for one key, and where each was set (for messages).
struct KeyLimits {
  static constexpr int kNone = -1;
  int max_gpus = kNone;
  int max_queued = kNone;
  std::string gpus_source;    // "max_gpus= in authorized_clients" or "--max-gpus-per-key"
  std::string queued_source;  // the same for max_queued
};

KeyLimits limits_of_key(const std::string& key, const protocol::Security& security,
                        int default_max_gpus, int default_max_queued);

// How users see a key as the owner of jobs: its name= in authorized_clients,
// else its first 12 characters; "" for the local user (no CURVE).
std::string owner_of_key(const std::string& key, const protocol::Security& security);
// The owner as messages name it: "client key alice", "the local user".
std::string describe_owner(const std::string& owner);

// What one key's jobs use now: GPUs held by their active attempts (running
// or stopping), and jobs waiting in the queue.
struct KeyUsage {
  int running_gpus = 0;
  int queued_jobs = 0;
};

// A submission is refused when the key has max_queued jobs waiting already,
// or when the job's smallest size (`min_gpus`, job.nodes' MIN × gpus_per_node)
// is beyond max_gpus (it could never start). The error names the owner, the
// limit, where it is set and what to do.
Status admit_for_key(const std::string& owner, const KeyLimits& limits, const KeyUsage& usage,
                     int min_gpus);

// How many nodes of `gpus_per_node` GPUs the key may take now; a large
// number without a GPU limit.
int nodes_within_gpu_limit(const KeyLimits& limits, const KeyUsage& usage, int gpus_per_node);

// Why a job that needs `needs` GPUs waits for its key's GPU limit: the
// job's message. Starts with kKeyLimitWait.
std::string key_limit_wait(const std::string& owner, const KeyLimits& limits, const KeyUsage& usage,
                           int needs);
inline constexpr const char* kKeyLimitWait = "waiting for its owner's GPU limit: ";

}  // namespace cohort::coordinator
