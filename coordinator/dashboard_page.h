// The dashboard's HTML pages, rendered on the server from snapshots: the
// cluster page (nodes, GPUs and who holds them, the queue, every job) and a
// page per job (state, attempts, ranks, plots, log tail, events).
//
// Every table and plot is in the HTML itself, so the pages read without
// JavaScript (they then reload every few seconds); with it, a small inline
// script refreshes the live parts in place and appends log lines from
// /api/jobs/<id>/logs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/job_view.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

struct PageContext {
  int64_t now_ms = 0;       // unix ms
  bool can_cancel = false;  // the request carried the HTTP token
  std::string csrf;         // with can_cancel: the cancel form's CSRF token
};

std::string cluster_page(const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes,
                         const PageContext& context);

struct JobPageOptions {
  int log_rank = -1;    // -1: every rank
  bool x_time = false;  // plots against wall-clock time instead of step
  std::string log_hidden;  // why the log tail is not shown (no HTTP token); empty: shown
};

// `log_tail`: the newest lines (for log_rank) with the seq to resume from.
std::string job_page(const JobView& job, const protocol::LogReply& log_tail, const JobPageOptions& options,
                     const PageContext& context);

}  // namespace cohort::coordinator
