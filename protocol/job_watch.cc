// watch_job: poll logs by sequence number until the job ends.
#include "protocol/job_watch.h"

#include <cstdio>
#include <thread>

namespace cohort::protocol {

std::string escape_control_characters(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
              static_cast<unsigned char>(text[i + 1]) <= 0x9f;  // U+0080..U+009F (CSI is U+009B)
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else if (c1) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\xc2\\x%02x", static_cast<unsigned char>(text[i + 1]));
      out += buf;
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string format_log_line(const LogLine& line, bool raw) {
  return "[rank " + std::to_string(line.rank) + "] " + (raw ? line.text : escape_control_characters(line.text));
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
        std::string text = format_log_line(line, options.raw);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
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
