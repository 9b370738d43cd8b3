// /metrics: the cluster and its jobs in Prometheus' text format (0.0.4).
//
// Names follow Prometheus' conventions: a `cohort_` prefix, base units in
// the name (`_seconds`, `_bytes`, `_ratio`), `_total` on counters. Per-job
// series carry the label `job` (the job id; scrape with honor_labels: true
// so Prometheus keeps it rather than renaming it `exported_job`), per-GPU
// series `node` and `gpu`. Jobs leave the series when the coordinator
// forgets them; finished jobs stay while it keeps them in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/job_view.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

// `now_ms`: unix ms, for the time still-queued jobs have waited.
std::string prometheus_text(const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes,
                            int64_t now_ms);

}  // namespace cohort::coordinator
