// Shared client plumbing for the `cohort` subcommands.
#include "cli/client_common.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "base/env_knobs.h"
#include "cli/model_probe.h"
#include "cli/commands.h"
#include "cli/coordinator_address.h"
#include "cli/progress_line.h"
#include "jobs/load.h"

namespace cohort::cli {

void ClientFlags::add_to(CLI::App* app) {
  app->add_option("--coordinator", coordinator,
                  "coordinator address, tcp://HOST:PORT or HOST:PORT (default: $COHORT_COORDINATOR or "
                  "tcp://127.0.0.1:7070)");
  app->add_option("--keys", keys, "CURVE key directory from `cohort keygen` (default: $COHORT_KEYS)");
}

std::string ClientFlags::coordinator_flag() const {
  return coordinator.empty() ? global_flags().coordinator : coordinator;
}

std::string ClientFlags::keys_dir() const {
  if (!keys.empty()) return keys;
  if (!global_flags().keys.empty()) return global_flags().keys;
  const char* env = read_env_knob(EnvKnob::kKeys);
  return env ? env : "";
}

std::unique_ptr<protocol::Client> connect_client(const ClientFlags& flags, int* exit_code) {
  auto endpoint = coordinator_endpoint(flags.coordinator_flag());
  if (!endpoint) {
    std::fprintf(stderr, "cohort: %s\n", endpoint.status().message().c_str());
    *exit_code = kExitUsage;
    return nullptr;
  }
  protocol::Security security;
  const std::string keys = flags.keys_dir();
  if (!keys.empty()) {
    auto loaded = protocol::load_client_security(keys, protocol::Role::kClient);
    if (!loaded) {
      std::fprintf(stderr, "cohort: %s\n", loaded.status().message().c_str());
      *exit_code = kExitUsage;
      return nullptr;
    }
    security = *loaded;
  }
  auto client = protocol::Client::connect(*endpoint, security);
  if (!client) {
    std::fprintf(stderr, "cohort: %s\n", client.status().message().c_str());
    *exit_code = kExitUnreachable;
    return nullptr;
  }
  return std::move(*client);
}

int report_request_error(const char* command, const Status& status) {
  std::fprintf(stderr, "cohort %s: %s\n", command, status.message().c_str());
  return exit_code_for(status);
}

int request_each(const char* command, const char* key, const std::vector<std::string>& items, bool json,
                 const std::function<Result<protocol::Ack>(const std::string&)>& send) {
  int code = kExitOk;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& item : items) {
    auto ack = send(item);
    if (ack) {
      if (!json) std::printf("%s\n", ack->text.c_str());
      results.push_back({{key, item}, {"ok", true}, {"message", ack->text}});
      continue;
    }
    const int failed = report_request_error(command, ack.status());
    results.push_back({{key, item}, {"ok", false}, {"message", ack.status().message()}});
    code = std::max(code, failed);
    if (failed == kExitUnreachable) break;
  }
  if (json) print_json(results);
  return code;
}

namespace {

// --set overrides, then the job from `load`, then its paths and model as the
// worker will open them (cli/model_probe.h): errors where the job runs here,
// warnings where it is submitted.
template <typename Load>
bool load_checked(const std::vector<std::string>& sets, const Load& load, jobs::JobSpec* out, int* exit_code,
                  bool local) {
  jobs::LoadOptions options;
  for (const auto& s : sets) {
    auto o = jobs::parse_override(s);
    if (!o) {
      std::fprintf(stderr, "cohort: %s\n", o.status().message().c_str());
      *exit_code = kExitUsage;
      return false;
    }
    options.overrides.push_back(*o);
  }
  auto result = load(options);
  if (!result.ok()) {
    std::fprintf(stderr, "%s", result.error_text().c_str());
    *exit_code = kExitUsage;
    return false;
  }
  auto problems = jobs::check_job_paths(result);
  if (problems.empty())
    for (const ModelProblem& p : probe_model(result)) problems.push_back(result.position(p.key) + ": " + p.message);
  for (const auto& p : problems) std::fprintf(stderr, "%s%s\n", local ? "" : "warning: ", p.c_str());
  if (local && !problems.empty()) {
    *exit_code = kExitUsage;
    return false;
  }
  *out = std::move(result.spec);
  return true;
}

}  // namespace

bool load_job_spec(const std::string& path, const std::vector<std::string>& sets,
                   jobs::JobSpec* out, int* exit_code, bool local) {
  return load_checked(sets, [&](const jobs::LoadOptions& o) { return jobs::load_job_file(path, o); }, out,
                      exit_code, local);
}

bool load_job_spec_text(const std::string& text, const std::string& source, const std::vector<std::string>& sets,
                        jobs::JobSpec* out, int* exit_code, bool local) {
  return load_checked(sets, [&](const jobs::LoadOptions& o) { return jobs::load_job_text(text, source, o); },
                      out, exit_code, local);
}

std::string local_time(int64_t unix_ms, const char* format) {
  if (unix_ms <= 0) return "-";
  std::time_t t = unix_ms / 1000;
  std::tm tm;
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

namespace {

std::string clock_time(int64_t unix_ms) { return local_time(unix_ms, "%H:%M:%S"); }

std::string nodes_text(const protocol::JobInfo& j) {
  return j.nodes_min == j.nodes_max ? std::to_string(j.nodes_min)
                                    : std::to_string(j.nodes_min) + ":" + std::to_string(j.nodes_max);
}

std::string elapsed_text(const protocol::JobInfo& j) {
  return j.elapsed_ms > 0 ? format_duration(double(j.elapsed_ms) / 1000) : "-";
}

// "step 120/500 (24%), loss 3.2100, 45000 tok/s, ETA 4m10s (2s ago)"
std::string progress_text(const protocol::TrainingProgress& p) {
  std::string text = "step " + std::to_string(p.step);
  if (p.total_steps > 0) {
    text += "/" + std::to_string(p.total_steps) + " (" + std::to_string(p.step * 100 / p.total_steps) + "%)";
  }
  text += fmt::format(", loss {:.4f}", p.loss);
  if (p.tokens_per_s > 0) text += fmt::format(", {:.0f} tok/s", p.tokens_per_s);
  if (p.eta_s >= 0) text += ", ETA " + format_duration(p.eta_s);
  return text + " (" + format_duration(double(p.age_ms) / 1000) + " ago)";
}

}  // namespace

void print_job_table(const std::vector<protocol::JobInfo>& jobs) {
  // The OWNER column only where client keys own jobs (a coordinator with
  // --keys); without CURVE every job is the local user's.
  bool owners = std::any_of(jobs.begin(), jobs.end(), [](const auto& j) { return !j.owner.empty(); });
  std::printf("%-10s %-20s ", "JOB", "NAME");
  if (owners) std::printf("%-12s ", "OWNER");
  std::printf("%-8s %-10s %-6s %-5s %-8s %-9s %-8s %s\n", "KIND", "STATE", "NODES", "GPUS", "ATTEMPT",
              "SUBMITTED", "ELAPSED", "MESSAGE");
  for (const auto& j : jobs) {
    std::printf("%-10s %-20s ", j.id.c_str(), j.name.c_str());
    if (owners) std::printf("%-12s ", j.owner.empty() ? "-" : j.owner.c_str());
    std::printf("%-8s %-10s %-6s %-5d %-8zu %-9s %-8s %s\n", j.kind.c_str(), j.state.c_str(),
                nodes_text(j).c_str(), j.gpus_per_node, j.attempts.size(), clock_time(j.submitted_ms).c_str(),
                elapsed_text(j).c_str(), j.message.c_str());
  }
}

void print_root_cause(const protocol::RootCause& c, const char* indent, FILE* out) {
  std::fprintf(out, "%sroot cause: rank %d on node %s: %s\n", indent, c.rank, c.node.c_str(),
               c.reason.c_str());
  if (!c.last_lines.empty()) {
    std::fprintf(out, "%slast lines of rank %d:\n", indent, c.rank);
    for (const auto& l : c.last_lines) std::fprintf(out, "%s  | %s\n", indent, l.c_str());
  }
}

void print_job_detail(const protocol::JobInfo& j) {
  std::printf("job %s (%s): %s\n", j.id.c_str(), j.name.c_str(), j.state.c_str());
  std::printf("  kind %s, nodes %s x %d GPU(s), priority %d, restarts %d of %d\n", j.kind.c_str(),
              nodes_text(j).c_str(), j.gpus_per_node, j.priority, j.restarts_used, j.max_restarts);
  std::printf("  output %s\n", j.output_dir.c_str());
  if (!j.owner.empty()) std::printf("  owner %s\n", j.owner.c_str());
  if (j.elapsed_ms > 0) {
    std::printf("  elapsed %s, %.2f GPU-hours\n", elapsed_text(j).c_str(), j.gpu_hours);
  }
  if (j.has_progress) std::printf("  progress: %s\n", progress_text(j.progress).c_str());
  if (!j.message.empty()) std::printf("  %s\n", j.message.c_str());
  if (j.has_root_cause) print_root_cause(j.root_cause, "  ");
  for (const auto& a : j.attempts) {
    std::string nodes;
    for (const auto& n : a.nodes) nodes += (nodes.empty() ? "" : ",") + n;
    std::printf("  attempt %d: %s, world size %d on %s, %s-%s%s%s\n", a.number, a.state.c_str(),
                a.world_size, nodes.c_str(), clock_time(a.started_ms).c_str(),
                clock_time(a.ended_ms).c_str(), a.reason.empty() ? "" : ": ", a.reason.c_str());
    if (a.has_root_cause) print_root_cause(a.root_cause, "    ");
  }
  if (!j.events.empty()) {
    std::printf("  events:\n");
    for (const auto& e : j.events) std::printf("    %s %s\n", clock_time(e.time_ms).c_str(), e.text.c_str());
  }
}

int job_exit_code(const protocol::JobInfo& job) {
  return job.state == "succeeded" ? kExitOk : kExitJobFailed;
}

}  // namespace cohort::cli

namespace cohort::cli {
namespace {
std::atomic<bool> g_interrupted{false};
void on_interrupt(int sig) {
  if (g_interrupted.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

const std::atomic<bool>* install_interrupt_flag() {
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  return &g_interrupted;
}
}  // namespace cohort::cli
