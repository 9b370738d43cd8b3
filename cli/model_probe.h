// The model of a job, opened as the worker will open it (hf::ModelFolder,
// the config's limits, the tokenizer), so that what would fail at start is
// said before: by `cohort validate` and `cohort run` as errors, by `cohort
// submit` as warnings (the folder may be one only the nodes see).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jobs/load.h"
#include "models/config.h"

namespace cohort::cli {

struct ModelProblem {
  std::string key;      // the job-file key at fault ("model.hf_dir", "train.seq_len")
  std::string message;  // starts with the key
};

// A folder that is no model folder, a config past its limits, a
// train.seq_len beyond the model's max_seq, a tokenizer with more tokens
// than the model's vocabulary. Empty for command jobs and sound models.
// `config`, when given, receives the model's config where it could be read.
std::vector<ModelProblem> probe_model(const jobs::LoadResult& result,
                                      std::optional<models::ModelConfig>* config = nullptr);

}  // namespace cohort::cli
