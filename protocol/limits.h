// Caps, in bytes and counts, on everything a daemon stores or relays for a
// peer (DESIGN §4 "Bounded"). The coordinator refuses a message that breaks
// one with an error naming the field and the cap; agents check the same
// figures before they send, so a worker cannot make its agent's report fail.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::protocol {

inline constexpr size_t kMaxNameBytes = 128;        // job and node names
inline constexpr size_t kMaxPathBytes = 4096;       // output_dir, working_dir, source path
inline constexpr size_t kMaxAddressBytes = 256;     // a node's address
inline constexpr size_t kMaxArgs = 4096;            // argv entries
inline constexpr size_t kMaxEnvVars = 4096;         // [job.env] entries
inline constexpr size_t kMaxArgvEnvBytes = 256 << 10;  // argv + env, all strings together
inline constexpr size_t kMaxJobTomlBytes = 1 << 20;    // the resolved job file
inline constexpr int kMaxGpusPerNode = 1024;        // registered GPUs, job gpus_per_node
inline constexpr size_t kMaxGpuFieldBytes = 256;    // uuid, PCI bus id, GPU name
inline constexpr size_t kMaxRunningWorkers = 4096;  // reported per node
inline constexpr int kMaxNodesPerJob = 100000;
inline constexpr int64_t kMaxRanksPerJob = 1 << 20;
inline constexpr size_t kMaxLogLineBytes = 64 << 10;     // longer lines are cut
inline constexpr size_t kMaxLogBytesPerJob = 16 << 20;   // the coordinator's buffer per job
inline constexpr size_t kMaxLogBytesTotal = 256 << 20;   // and for all jobs together
inline constexpr size_t kMaxLastLines = 20;              // root-cause lines per exit
inline constexpr size_t kMaxReplyBytes = 4 << 20;        // a list reply, before paging
inline constexpr size_t kMaxStoreValueBytes = 4 << 20;   // one rendezvous store value
inline constexpr size_t kMaxStoreKeyBytes = 4096;
inline constexpr size_t kMaxStoreKeysPerRequest = 1024;
inline constexpr size_t kMaxStoreBytesPerAttempt = 64 << 20;
inline constexpr size_t kMaxActiveJobs = 10000;          // queued, running or stopping
inline constexpr size_t kMaxNodes = 10000;               // registered nodes

}  // namespace cohort::protocol
