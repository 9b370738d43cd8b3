// The embedded cluster behind `cohort run`: a coordinator and one agent in
// this process, on one io_context thread, talking over loopback exactly as a
// real cluster does (same code paths, no keys: loopback only). The caller's
// thread submits the job and follows it like `cohort submit --wait`.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "agent/process_launcher.h"
#include "base/status.h"
#include "jobs/spec.h"
#include "protocol/messages.h"

namespace cohort::cluster {

struct EmbeddedRunOptions {
  jobs::JobSpec spec;  // loaded and resolved (jobs/load.h); submitted as jobs::to_toml's file
  int fake_gpus = 0;  // >0: pretend this many GPUs (tests)
  int cpu_slots = 0;  // >0: this many CPU slots; 0: the GPUs, else gpus_per_node slots
  std::string state_dir;  // empty: <output_dir>/.cohort
  std::string worker_binary;  // empty: next to this program
  const std::atomic<bool>* interrupt = nullptr;  // set: stop the job cleanly
  std::function<void(const protocol::LogLine&)> on_line;  // default: rank-prefixed on stdout
  std::function<void()> on_poll;                           // e.g. a progress line
  std::string http_listen;  // "HOST:PORT": serve the web page and /metrics there; empty: none
  std::string http_token;   // empty: the web page is read-only
  agent::Containment containment = agent::Containment::kAuto;  // of the workers (process_launcher.h)
};

// Runs the job to its end, streaming rank-prefixed log lines to stdout.
Result<protocol::JobInfo> run_embedded(const EmbeddedRunOptions& options);

}  // namespace cohort::cluster
