// The coordinator's side of the HTTP API: snapshots of jobs, nodes and logs
// for the web page and /metrics, and cancelling.
#include <algorithm>

#include "coordinator/coordinator_impl.h"

namespace cohort::coordinator {

namespace {

// Without a token the page is for anyone who can reach it: workers' output
// (which may hold secrets they printed) is left out, as root-cause lines
// and as the log tail; `cohort logs` and `cohort status` still have it.
void redact(JobView& view) {
  view.info.root_cause.last_lines.clear();
  for (auto& a : view.info.attempts) a.root_cause.last_lines.clear();
}

}  // namespace

HttpSources CoordinatorImpl::http_sources() {
  const bool hide_output = options_.http_token.empty();
  HttpSources s;
  s.jobs = [this, hide_output] {
    std::vector<const Job*> ordered;
    for (const auto& [id, job] : jobs_) ordered.push_back(&job);
    std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
    std::vector<JobView> out;
    for (const Job* job : ordered) {
      out.push_back(make_job_view(*job));
      if (hide_output) redact(out.back());
    }
    return out;
  };
  s.job = [this, hide_output](const std::string& id) -> std::optional<JobView> {
    Job* job = find_job(id);
    if (!job) return std::nullopt;
    JobView view = make_job_view(*job);
    if (hide_output) redact(view);
    return view;
  };
  s.nodes = [this] { return node_infos(); };
  s.logs = [this, hide_output](const protocol::LogQuery& query, size_t tail) -> Result<protocol::LogReply> {
    Job* job = find_job(query.job_id);
    if (!job) return not_found("no job '" + query.job_id + "'");
    if (hide_output) {
      return permission_denied("workers' log lines are shown only when the coordinator has an HTTP token "
                               "(--http-token); `cohort logs " + job->id + "` has them");
    }
    protocol::LogQuery q = query;
    q.job_id = job->id;
    protocol::LogReply out;
    if (tail > 0) {
      out.lines = logs_.newest(q, tail, &out.last_seq);
    } else {
      out.lines = logs_.read(q, &out.last_seq);
    }
    out.job_finished = is_terminal(job->state);
    out.job_state = to_string(job->state);
    return out;
  };
  s.cancel = [this](const std::string& id) {
    std::string text;
    return cancel_job(id, &text);
  };
  return s;
}

}  // namespace cohort::coordinator
