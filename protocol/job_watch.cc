// watch_job: poll logs by sequence number until the job ends.
#include "protocol/job_watch.h"

#include <cstdio>
#include <thread>

namespace cohort::protocol {

std::string format_log_line(const LogLine& line) {
  return "[rank " + std::to_string(line.rank) + "] " + line.text;
}

Result<JobInfo> watch_job(Client& client, const std::string& job_id, const WatchOptions& options) {
  uint64_t after = 0;
  bool cancel_sent = false;
  bool first = true;
  int failures = 0;
  while (true) {
    if (options.interrupt && options.interrupt->load() && options.detach_on_interrupt) break;
    if (options.interrupt && options.interrupt->load() && !cancel_sent) {
      std::fprintf(stderr, "cohort: stopping job %s (workers get SIGTERM, then SIGKILL after stop_grace)\n",
                   job_id.c_str());
      auto r = client.request<Ack>(CancelJob{job_id}, options.request_timeout);
      if (!r) return r.status();
      cancel_sent = true;
    }
    LogQuery query;
    query.job_id = job_id;
    query.rank = options.rank;
    query.attempt = options.attempt;
    query.after_seq = after;
    if (first) query.tail = options.tail;
    auto reply = client.request<LogReply>(query, options.request_timeout);
    if (!reply) {
      // A coordinator restarting under us: retry for a while before giving up.
      if (reply.status().code() == StatusCode::kUnavailable && ++failures < 6) continue;
      return reply.status();
    }
    failures = 0;
    if (first && !reply->note.empty() && options.on_note) options.on_note(reply->note);
    first = false;
    // A restarted coordinator without its state numbers its lines afresh.
    if (reply->last_seq < after) after = 0;
    for (const auto& line : reply->lines) {
      if (!options.print_logs) continue;
      if (options.on_line) {
        options.on_line(line);
      } else {
        std::printf("%s\n", format_log_line(line).c_str());
      }
    }
    std::fflush(stdout);
    if (options.on_poll) options.on_poll();
    bool more = reply->last_seq > after;
    after = reply->last_seq;
    if (reply->job_finished && !more) break;
    if (!options.follow && !more) break;
    if (!more) std::this_thread::sleep_for(options.poll);
  }
  auto jobs = client.request<JobList>(JobQuery{job_id, 0, {}}, options.request_timeout);
  if (!jobs) return jobs.status();
  if (jobs->jobs.empty()) return not_found("no job '" + job_id + "'");
  return jobs->jobs.front();
}

}  // namespace cohort::protocol
