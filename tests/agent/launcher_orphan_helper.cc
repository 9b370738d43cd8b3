// Test helper: plays an agent that is about to be killed with SIGKILL.
// Launches `sleep 60` through the POSIX launcher, prints "worker <pid>", and
// waits. The test then kills this process; the worker must die with it.
#include <unistd.h>

#include <cstdio>

#include "agent/launch_env.h"
#include "agent/process_launcher.h"

int main() {
  auto launcher = cohort::agent::make_posix_launcher();
  cohort::agent::SpawnOptions options;
  options.argv = {"sleep", "60"};
  options.env = cohort::agent::current_environment();
  auto worker = launcher->spawn(std::move(options));
  if (!worker.is_ok()) {
    std::fprintf(stderr, "%s\n", worker.status().to_string().c_str());
    return 1;
  }
  std::printf("worker %d\n", (*worker)->pid());
  std::fflush(stdout);
  for (;;) pause();
}
