// kind = "infer": the built-in worker's offline inference job. Prompts from
// JSONL in, completions to output_dir/outputs.jsonl, the model split tensor
// parallel over the job's ranks. Errors come back as Status naming the file,
// rank or setting at fault; the caller turns them into the exit code.
#pragma once

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::infer {

Status run_infer(const jobs::JobSpec& spec);

}  // namespace cohort::infer
