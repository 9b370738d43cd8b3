// The process-based test cluster.
#include "cluster_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

extern char** environ;

namespace cohort::testing {

namespace fs = std::filesystem;

std::string cohort_binary() {
  const char* dir = std::getenv("COHORT_BIN_DIR");
  return std::string(dir ? dir : COHORT_BINARY_DIR "/bin") + "/cohort";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

std::unique_ptr<Process> Process::start(const std::vector<std::string>& argv,
                                        const std::string& output_path,
                                        const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> full;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) full[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) full[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : full) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  auto p = std::unique_ptr<Process>(new Process());
  p->output_path_ = output_path;
  int rc = posix_spawn(&p->pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return nullptr;
  return p;
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

void Process::signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int Process::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

bool Process::running() { return wait(std::chrono::milliseconds(0)) == -1; }

std::string Process::output() const { return read_file(output_path_); }

CommandResult run_cohort(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {cohort_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, timeout);
}

CommandResult run_command(const std::vector<std::string>& command, std::chrono::milliseconds timeout) {
  static int counter = 0;
  std::string base = fs::temp_directory_path() / ("cohort-cli-" + std::to_string(::getpid()) + "-" +
                                                 std::to_string(counter++));
  std::vector<std::string> argv = {"/bin/sh", "-c", ""};
  std::string cmd = "exec";
  for (const auto& a : command) {
    std::string quoted;
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + quoted + "'";
  }
  cmd += " >'" + base + ".out' 2>'" + base + ".err'";
  argv[2] = cmd;
  CommandResult result;
  auto p = Process::start(argv, "/dev/null");
  if (!p) return result;
  result.exit_code = p->wait(timeout);
  if (result.exit_code == -1) p->signal(SIGKILL);
  result.out = read_file(base + ".out");
  result.err = read_file(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return result;
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

bool process_alive(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'Z';
}

Cluster::Cluster() {
  char templ[] = "/tmp/cohort-test-XXXXXX";
  dir_ = ::mkdtemp(templ);
  endpoint_ = "ipc://" + dir_ + "/coordinator.sock";
}

Cluster::~Cluster() {
  // Agents first (their workers die with them), then the coordinator.
  agents_.clear();
  coordinator_.reset();
  std::error_code ec;
  if (!std::getenv("COHORT_KEEP_TEST_DIRS")) fs::remove_all(dir_, ec);
}

void Cluster::start_coordinator(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {cohort_binary(), "coordinator", "--listen", endpoint_,
                                   "--heartbeat-timeout", "1.0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  coordinator_ = Process::start(
      argv, dir_ + "/coordinator-" + std::to_string(coordinator_starts_++) + ".log");
}

void Cluster::kill_coordinator() {
  coordinator_->signal(SIGKILL);
  coordinator_->wait(std::chrono::seconds(5));
}

Process& Cluster::add_agent(const std::string& name, int gpus, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {cohort_binary(), "agent", "--coordinator", endpoint_,
                                   "--name", name, "--fake-gpus", std::to_string(gpus)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  agents_[name] = Process::start(argv, dir_ + "/agent-" + name + ".log");
  return *agents_[name];
}

void Cluster::remove_agent(const std::string& name) { agents_.erase(name); }

std::string Cluster::write_job(const std::string& name, const std::string& toml) {
  std::string path = dir_ + "/" + name + ".toml";
  write_file(path, toml);
  return path;
}

CommandResult Cluster::cli(const std::string& command, std::vector<std::string> args,
                           std::chrono::milliseconds timeout) {
  args.insert(args.begin(), command);
  args.push_back("--coordinator");
  args.push_back(endpoint_);
  return run_cohort(args, timeout);
}

std::string Cluster::job_state(const std::string& job_id) {
  auto r = cli("status", {job_id, "--json"}, std::chrono::seconds(10));
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  return j.value("state", "");
}

bool Cluster::wait_for_alive_nodes(int count, std::chrono::milliseconds timeout) {
  return wait_until(
      [&] {
        auto r = cli("nodes", {"--json"}, std::chrono::seconds(10));
        auto j = nlohmann::json::parse(r.out, nullptr, false);
        if (!j.is_array()) return false;
        int alive = 0;
        for (const auto& n : j) alive += n.value("state", "") == "alive";
        return alive == count;
      },
      timeout);
}

}  // namespace cohort::testing
