// What cohort-worker does for kind = "infer" and "serve", and nothing else:
// load the job file, run run_infer or run_serve. The tests launch it as real ranks so that they do not
// depend on the rest of the worker binary.
#include <cstdio>
#include <cstdlib>

#include "base/log.h"
#include "jobs/load.h"
#include "infer/infer_job.h"
#include "infer/serve_job.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: infer_test_worker JOB.toml\n");
    return 2;
  }
  (void)cohort::init_logging(std::getenv("COHORT_LOG") ? std::getenv("COHORT_LOG") : "warn", "");
  auto loaded = cohort::jobs::load_job_file(argv[1]);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  cohort::Status status = loaded.spec.job.kind == cohort::jobs::JobKind::kServe
                              ? cohort::infer::run_serve(loaded.spec)
                              : cohort::infer::run_infer(loaded.spec);
  if (!status.is_ok()) {
    std::fprintf(stderr, "infer_test_worker: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
