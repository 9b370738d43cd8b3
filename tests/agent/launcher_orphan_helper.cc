// Test helper: plays an agent that is about to be killed with SIGKILL.
// Launches a worker through the POSIX launcher, prints "worker <pid>", and
// waits. The test then kills this process; the worker must die with it.
// With the argument "setsid" the worker starts a grandchild in its own
// session first and the helper prints "grandchild <pid>": it must die too.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "agent/launch_env.h"
#include "agent/process_launcher.h"

int main(int argc, char** argv) {
  bool setsid_child = argc > 1 && std::strcmp(argv[1], "setsid") == 0;
  auto launcher = cohort::agent::make_posix_launcher();
  cohort::agent::SpawnOptions options;
  options.argv = {"sleep", "60"};
  if (setsid_child) options.argv = {"/bin/sh", "-c", "setsid sleep 60 & echo $!; wait"};
  options.env = cohort::agent::current_environment();
  options.on_line = [](cohort::agent::OutputStream, std::string_view line) {
    std::printf("grandchild %s\n", std::string(line).c_str());
    std::fflush(stdout);
  };
  auto worker = launcher->spawn(std::move(options));
  if (!worker.is_ok()) {
    std::fprintf(stderr, "%s\n", worker.status().to_string().c_str());
    return 1;
  }
  std::printf("worker %d\n", (*worker)->pid());
  std::fflush(stdout);
  for (;;) pause();
}
