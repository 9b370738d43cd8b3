// The training job's data: each train.data source opened as mapped tokens
// (text and JSONL are first tokenized with the model's tokenizer into
// output_dir/data-cache/<key>/, by rank 0 while the others wait, and reused
// while the inputs and the tokenizer are unchanged), split into a training
// part and a held-out tail per source, and sampled by weight.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "collective/communicator.h"
#include "data/batch_sampler.h"
#include "jobs/spec.h"

namespace cohort::train {

struct TrainingData {
  std::unique_ptr<data::BatchSampler> train;
  std::unique_ptr<data::BatchSampler> eval;  // null: nothing held out, or too little
  std::string summary;                       // one line per source, for the log
};

struct TrainingDataOptions {
  int64_t global_batch = 8;
  int64_t eval_batch = 8;
  int vocab_size = 0;
  std::string tokenizer_dir;  // the model's Hugging Face folder ("" : none)
  int rank = 0;
  // Text is tokenized once into output_dir/data-cache by one rank: rank 0 on
  // shared storage; with node-local storage each node's first rank, into
  // data-cache/<cache_node>, since no other node sees that folder.
  bool tokenizes = false;
  std::string cache_node;
};

// Collective over `world` (a barrier while rank 0 tokenizes). Errors name
// the train.data entry and the file at fault.
Result<TrainingData> open_training_data(const jobs::JobSpec& spec, const TrainingDataOptions& options,
                                        collective::Communicator& world);

}  // namespace cohort::train
