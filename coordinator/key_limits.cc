// Per-client-key limits: which hold for a key, and the verdicts on them.
#include "coordinator/key_limits.h"

#include <climits>

namespace cohort::coordinator {

KeyLimits limits_of_key(const std::string& key, const protocol::Security& security,
                        int default_max_gpus, int default_max_queued) {
  KeyLimits limits;
  limits.max_gpus = default_max_gpus < 0 ? KeyLimits::kNone : default_max_gpus;
  limits.max_queued = default_max_queued < 0 ? KeyLimits::kNone : default_max_queued;
  limits.gpus_source = "--max-gpus-per-key";
  limits.queued_source = "--max-queued-per-key";
  auto own = security.client_keys.find(key);
  if (key.empty() || own == security.client_keys.end()) return limits;
  if (own->second.max_gpus) {
    limits.max_gpus = *own->second.max_gpus < 0 ? KeyLimits::kNone : *own->second.max_gpus;
    limits.gpus_source = "max_gpus= on its line in authorized_clients";
  }
  if (own->second.max_queued) {
    limits.max_queued = *own->second.max_queued < 0 ? KeyLimits::kNone : *own->second.max_queued;
    limits.queued_source = "max_queued= on its line in authorized_clients";
  }
  return limits;
}

std::string owner_of_key(const std::string& key, const protocol::Security& security) {
  if (key.empty()) return "";
  auto own = security.client_keys.find(key);
  if (own != security.client_keys.end() && !own->second.name.empty()) return own->second.name;
  // Enough to find the key's line in authorized_clients.
  return key.substr(0, 12);
}

std::string describe_owner(const std::string& owner) {
  return owner.empty() ? "the local user" : "client key " + owner;
}

Status admit_for_key(const std::string& owner, const KeyLimits& limits, const KeyUsage& usage,
                     int min_gpus) {
  if (limits.max_queued != KeyLimits::kNone && usage.queued_jobs >= limits.max_queued) {
    return failed_precondition(describe_owner(owner) + " has " + std::to_string(usage.queued_jobs) +
                               " job(s) waiting in the queue; its limit is " +
                               std::to_string(limits.max_queued) + " (" + limits.queued_source +
                               "). Submit again once some have started, or " +
                               "`cohort cancel` some");
  }
  if (limits.max_gpus != KeyLimits::kNone && min_gpus > limits.max_gpus) {
    return failed_precondition(
        "the job needs at least " + std::to_string(min_gpus) +
        " GPU(s) (job.nodes' minimum × job.gpus_per_node) but " + describe_owner(owner) +
        " may hold at most " + std::to_string(limits.max_gpus) + " (" + limits.gpus_source +
        "), so it could never start: make it smaller, or ask the operator to raise the limit");
  }
  return Status::ok();
}

int nodes_within_gpu_limit(const KeyLimits& limits, const KeyUsage& usage, int gpus_per_node) {
  if (limits.max_gpus == KeyLimits::kNone) return INT_MAX;
  int headroom = limits.max_gpus - usage.running_gpus;
  return headroom <= 0 || gpus_per_node <= 0 ? 0 : headroom / gpus_per_node;
}

std::string key_limit_wait(const std::string& owner, const KeyLimits& limits, const KeyUsage& usage,
                           int needs) {
  return kKeyLimitWait + describe_owner(owner) + "'s running jobs hold " +
         std::to_string(usage.running_gpus) + " of at most " + std::to_string(limits.max_gpus) +
         " GPU(s) (" + limits.gpus_source + "); this job needs " + std::to_string(needs);
}

}  // namespace cohort::coordinator
