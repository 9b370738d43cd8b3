// What the client subcommands share: the --coordinator/--keys flags, the
// connection, loading a job file for submission, and printing jobs.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/global_flags.h"
#include "jobs/spec.h"
#include "protocol/client.h"
#include "protocol/messages.h"

namespace cohort::cli {

// The subcommand's own --coordinator/--keys; when not given, the global
// flags' (cli/global_flags.h), then the environment.
struct ClientFlags {
  std::string coordinator;  // empty: global --coordinator, $COHORT_COORDINATOR or tcp://127.0.0.1:7070
  std::string keys;         // empty: global --keys, $COHORT_KEYS or none
  void add_to(CLI::App* app);
  std::string coordinator_flag() const;  // this command's or the global flag; "" when neither
  std::string keys_dir() const;          // "" for none
};

// Connects; on failure prints the reason and sets *exit_code (3 or 2).
std::unique_ptr<protocol::Client> connect_client(const ClientFlags& flags, int* exit_code);
// Prints "cohort COMMAND: message" and returns exit_code_for(status).
int report_request_error(const char* command, const Status& status);

// One request per item (cancel JOB..., jobs rm, nodes rm): the reply's text
// on stdout per item, errors on stderr; with `json`, one array of
// {"<key>": item, "ok": bool, "message": text} instead. Returns the worst exit
// code (0 all done, 1, 2 an unknown item, 3 unreachable: the rest not tried).
int request_each(const char* command, const char* key, const std::vector<std::string>& items, bool json,
                 const std::function<Result<protocol::Ack>(const std::string&)>& send);

// Loads, checks and resolves JOB.toml with --set overrides; prints errors and
// sets *exit_code = 2 on failure. Path problems (jobs::check_job_paths) are
// errors when `local` (the job runs on this machine), warnings otherwise.
// What a job submission sends is jobs::to_toml(*out).
bool load_job_spec(const std::string& path, const std::vector<std::string>& sets,
                   jobs::JobSpec* out, int* exit_code, bool local = false);
// The same for a job file's text that a command line stands for (`source`
// names it in errors: "cohort serve").
bool load_job_spec_text(const std::string& text, const std::string& source, const std::vector<std::string>& sets,
                        jobs::JobSpec* out, int* exit_code, bool local = false);

// A time the coordinator sent (ms since the epoch) in local time, as
// strftime's `format` writes it; "-" for none.
std::string local_time(int64_t unix_ms, const char* format);
void print_job_table(const std::vector<protocol::JobInfo>& jobs);
void print_job_detail(const protocol::JobInfo& job);
void print_root_cause(const protocol::RootCause& cause, const char* indent, FILE* out = stdout);
// 0 for a succeeded job, 1 otherwise (DESIGN §5).
int job_exit_code(const protocol::JobInfo& job);

}  // namespace cohort::cli

namespace cohort::cli {
// SIGINT and SIGTERM set the returned flag (the job is then stopped
// cleanly); a second signal ends the process at once.
const std::atomic<bool>* install_interrupt_flag();
}  // namespace cohort::cli
