#include "cli_test_util.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>

namespace cohort::testing {

std::string command_job(const Cluster& c, const std::string& name, int gpus,
                        const std::string& script) {
  std::string escaped;
  for (char ch : script)
    escaped += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
  return "[job]\nname = \"" + name +
         "\"\nkind = \"command\"\nnodes = 1\ngpus_per_node = " + std::to_string(gpus) +
         "\nstop_grace = 2.0\noutput_dir = \"" + c.dir() + "/out-" + name +
         "\"\n[command]\nargv = [\"sh\", \"-c\", \"" + escaped + "\"]\n";
}

CommandResult run_program(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds timeout) {
  static int counter = 0;
  const std::string base =
      (std::filesystem::temp_directory_path() /
       ("cohort-cli-prog-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
          .string();
  std::string cmd = "exec";
  for (const auto& a : argv) {
    std::string quoted;
    for (char ch : a) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += " '" + quoted + "'";
  }
  cmd += " >'" + base + ".out' 2>'" + base + ".err'";
  CommandResult result;
  auto p = Process::start({"/bin/sh", "-c", cmd}, "/dev/null", env);
  if (!p) return result;
  result.exit_code = p->wait(timeout);
  if (result.exit_code == -1) p->signal(SIGKILL);
  result.out = read_file(base + ".out");
  result.err = read_file(base + ".err");
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
  return result;
}

nlohmann::json json_of(const CommandResult& r) {
  return nlohmann::json::parse(r.out, nullptr, false);
}

std::string submitted_id(const CommandResult& r) {
  return r.out.substr(0, r.out.find('\n'));
}

}  // namespace cohort::testing
