// Job and attempt records: names, views for clients, durable form.
#include "coordinator/job_record.h"

#include <chrono>

#include "protocol/codec.h"

namespace cohort::coordinator {

const char* to_string(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kStopping: return "stopping";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
    case JobState::kTimedOut: return "timed_out";
  }
  return "unknown";
}

const char* to_string(AttemptState state) {
  switch (state) {
    case AttemptState::kRunning: return "running";
    case AttemptState::kStopping: return "stopping";
    case AttemptState::kSucceeded: return "succeeded";
    case AttemptState::kFailed: return "failed";
    case AttemptState::kStopped: return "stopped";
  }
  return "unknown";
}

bool is_terminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled || state == JobState::kTimedOut;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Attempt::all_exited() const {
  for (const auto& r : ranks) {
    if (r.state != RankState::kExited) return false;
  }
  return true;
}

void Job::add_event(const std::string& text) {
  constexpr size_t kMaxEvents = 1000;
  events.push_back({unix_ms_now(), text});
  if (events.size() > kMaxEvents) events.erase(events.begin());
}

protocol::JobInfo Job::info() const {
  protocol::JobInfo out;
  out.id = id;
  out.name = control.name;
  out.kind = jobs::to_string(control.kind);
  out.state = to_string(state);
  out.priority = control.priority;
  out.nodes_min = control.nodes_min;
  out.nodes_max = control.nodes_max;
  out.gpus_per_node = control.gpus_per_node;
  out.max_restarts = control.max_restarts;
  out.restarts_used = restarts_used;
  out.output_dir = control.output_dir;
  out.owner = owner;
  out.submitted_ms = submitted_ms;
  out.ended_ms = ended_ms;
  out.message = message;
  out.has_root_cause = has_root_cause;
  out.root_cause = root_cause;
  out.events = events;
  for (const auto& a : attempts) {
    protocol::AttemptInfo ai;
    ai.number = a.number;
    ai.state = to_string(a.state);
    ai.nodes = a.nodes;
    ai.world_size = a.world_size();
    ai.started_ms = a.started_ms;
    ai.ended_ms = a.ended_ms;
    ai.reason = a.reason;
    ai.has_root_cause = a.has_root_cause;
    ai.root_cause = a.root_cause;
    ai.counts_as_restart = a.counts_as_restart;
    out.attempts.push_back(std::move(ai));
  }
  return out;
}

namespace {

// What to do about a record this build cannot read.
std::string unreadable(const std::string& id, const std::string& why) {
  return "job record " + id + " cannot be read: " + why +
         "; start the coordinator with another --state-dir, or remove the record "
         "(sqlite3 coordinator.db \"DELETE FROM jobs WHERE id='" + id + "'\")";
}

// The record's job file: "job_toml", or in a record of the format before it,
// the file its "control" object carried beside the fields read from it.
Result<std::string> stored_job_file(const nlohmann::json& j, const std::string& id) {
  if (auto file = j.find("job_toml"); file != j.end()) return file->get<std::string>();
  auto old = j.find("control");
  if (old != j.end() && old->is_object() && old->contains("job_toml")) {
    return old->at("job_toml").get<std::string>();
  }
  return invalid_argument(unreadable(id, "it holds no job file (\"job_toml\")"));
}

}  // namespace

nlohmann::json job_to_json(const Job& job) {
  nlohmann::json attempts = nlohmann::json::array();
  for (const auto& a : job.attempts) {
    attempts.push_back({{"number", a.number},
                        {"state", int(a.state)},
                        {"stop_intent", int(a.stop_intent)},
                        {"nodes", a.nodes},
                        {"gpus", a.gpus},
                        {"gpus_per_node", a.gpus_per_node},
                        {"master_port", a.master_port},
                        {"store_token", a.store_token},
                        {"counts_as_restart", a.counts_as_restart},
                        {"started_ms", a.started_ms},
                        {"ended_ms", a.ended_ms},
                        {"reason", a.reason},
                        {"has_root_cause", a.has_root_cause},
                        {"root_cause", a.root_cause},
                        {"root_cause_is_node_loss", a.root_cause_is_node_loss}});
  }
  return {{"id", job.id},
          {"seq", job.seq},
          {"job_toml", job.job_toml},
          {"owner_key", job.owner_key},
          {"state", int(job.state)},
          {"restarts_used", job.restarts_used},
          {"next_attempt_counts", job.next_attempt_counts},
          {"cancel_requested", job.cancel_requested},
          {"submitted_ms", job.submitted_ms},
          {"ended_ms", job.ended_ms},
          {"message", job.message},
          {"has_root_cause", job.has_root_cause},
          {"root_cause", job.root_cause},
          {"attempts", attempts},
          {"events", job.events}};
}

Result<Job> job_from_json(const nlohmann::json& j) {
  try {
    Job job;
    job.id = j.at("id").get<std::string>();
    job.seq = j.at("seq").get<uint64_t>();
    COHORT_ASSIGN_OR_RETURN(job.job_toml, stored_job_file(j, job.id));
    auto control = protocol::job_control_from_toml(job.job_toml);
    if (!control) return invalid_argument(unreadable(job.id, control.status().message()));
    job.control = std::move(*control);
    job.owner_key = j.value("owner_key", std::string());  // absent in records from before limits
    job.state = JobState(j.at("state").get<int>());
    job.restarts_used = j.at("restarts_used").get<int>();
    job.next_attempt_counts = j.at("next_attempt_counts").get<bool>();
    job.cancel_requested = j.at("cancel_requested").get<bool>();
    job.submitted_ms = j.at("submitted_ms").get<int64_t>();
    job.ended_ms = j.at("ended_ms").get<int64_t>();
    job.message = j.at("message").get<std::string>();
    job.has_root_cause = j.at("has_root_cause").get<bool>();
    job.root_cause = j.at("root_cause").get<protocol::RootCause>();
    job.events = j.at("events").get<std::vector<protocol::EventInfo>>();
    for (const auto& ja : j.at("attempts")) {
      Attempt a;
      a.number = ja.at("number").get<int>();
      a.state = AttemptState(ja.at("state").get<int>());
      a.stop_intent = StopIntent(ja.at("stop_intent").get<int>());
      a.nodes = ja.at("nodes").get<std::vector<std::string>>();
      a.gpus = ja.at("gpus").get<std::map<std::string, std::vector<int>>>();
      a.gpus_per_node = ja.at("gpus_per_node").get<int>();
      a.master_port = ja.at("master_port").get<int>();
      a.store_token = ja.value("store_token", std::string());
      a.counts_as_restart = ja.at("counts_as_restart").get<bool>();
      a.started_ms = ja.at("started_ms").get<int64_t>();
      a.ended_ms = ja.at("ended_ms").get<int64_t>();
      a.reason = ja.at("reason").get<std::string>();
      a.has_root_cause = ja.at("has_root_cause").get<bool>();
      a.root_cause = ja.at("root_cause").get<protocol::RootCause>();
      a.root_cause_is_node_loss = ja.value("root_cause_is_node_loss", false);
      if (a.nodes.empty() || a.gpus_per_node < 1) {
        return invalid_argument("bad job record " + job.id + ": an attempt without nodes");
      }
      for (const auto& node : a.nodes) {
        for (int g = 0; g < a.gpus_per_node; ++g) {
          RankRecord r;
          r.node = node;
          r.state = a.active() ? RankState::kUnconfirmed : RankState::kExited;
          a.ranks.push_back(r);
        }
      }
      job.attempts.push_back(std::move(a));
    }
    bool needs_attempt = job.state == JobState::kRunning || job.state == JobState::kStopping;
    if (needs_attempt && (job.attempts.empty() || !job.attempts.back().active())) {
      // Written mid-transition by an older build: run it again from the queue.
      job.state = JobState::kQueued;
    }
    return job;
  } catch (const std::exception& e) {
    return invalid_argument(std::string("bad job record: ") + e.what());
  }
}

}  // namespace cohort::coordinator
