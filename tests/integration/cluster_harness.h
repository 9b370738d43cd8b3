// A test cluster made of real processes: `cohort coordinator` and `cohort
// agent --fake-gpus N` started from the build's bin directory, talking over
// an ipc:// endpoint private to the test (no port races). Shared by the
// integration and elastic suites.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cohort::testing {

// The `cohort` binary under test ($COHORT_BIN_DIR/cohort).
std::string cohort_binary();

// A child process, output to a file; killed (SIGKILL) when dropped.
class Process {
 public:
  static std::unique_ptr<Process> start(const std::vector<std::string>& argv,
                                        const std::string& output_path,
                                        const std::map<std::string, std::string>& env = {});
  ~Process();
  pid_t pid() const { return pid_; }
  void signal(int sig);
  // Exit code (128+signal when killed), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  bool running();
  std::string output() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string output_path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs `cohort args...` to completion (killed after `timeout`).
CommandResult run_cohort(const std::vector<std::string>& args,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));
// Runs any program (argv[0] looked up in PATH) the same way.
CommandResult run_command(const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// True while `pid` is a live process (a zombie counts as gone).
bool process_alive(pid_t pid);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);

class Cluster {
 public:
  Cluster();  // a fresh temporary directory; no processes yet
  ~Cluster();

  const std::string& dir() const { return dir_; }
  const std::string& endpoint() const { return endpoint_; }

  void start_coordinator(const std::vector<std::string>& extra = {});
  void kill_coordinator();  // SIGKILL, then reaped
  Process& coordinator() { return *coordinator_; }
  Process& add_agent(const std::string& name, int gpus, const std::vector<std::string>& extra = {});
  Process& agent(const std::string& name) { return *agents_.at(name); }
  void remove_agent(const std::string& name);  // drops (SIGKILL) it

  // Writes a job file under dir() and returns its path.
  std::string write_job(const std::string& name, const std::string& toml);
  // `cohort <command> args... --coordinator <endpoint>`.
  CommandResult cli(const std::string& command, std::vector<std::string> args,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // The job's state as `cohort status --json` reports it ("" on error).
  std::string job_state(const std::string& job_id);
  // Waits until `cohort nodes` lists `count` alive nodes.
  bool wait_for_alive_nodes(int count, std::chrono::milliseconds timeout);

 private:
  std::string dir_;
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  int coordinator_starts_ = 0;
};

}  // namespace cohort::testing
