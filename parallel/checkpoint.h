// Sharded checkpoints: each rank writes its own shards; an index records the
// global shapes, dtypes, shard layout, step, data position and RNG state.
// Loading reshards: a checkpoint saved at one world size, dp × tp mesh or
// strategy loads into any other.
//
// Layout of a checkpoint folder `<output_dir>/checkpoints/step-<N>/`:
//   index.json            model config, step, data position, strategy, mesh,
//                         and per parameter its global shape and where each
//                         rank's shard of it lives
//   rank-<R>.bin          that rank's parameter shard (fp32) and AdamW moments
// A LoRA run's checkpoint holds the adapters only (their AdamW moments too);
// index.json adds "lora": the adapters' config and where the frozen base
// comes from, and `adapter/` is the same adapters as a PEFT adapter folder
// (hf/peft_adapter.h) that transformers + PEFT load as it is.
// `<output_dir>/checkpoints/latest` names the newest complete one. Writes go to
// a temporary folder renamed into place, so a crash mid-write never damages
// the latest good checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/config.h"
#include "models/loss_scaler.h"
#include "models/model.h"

namespace cohort::parallel {

// The newest complete checkpoint under output_dir/checkpoints, or "" if none.
std::string latest_checkpoint(const std::string& output_dir);

// Where a training run keeps its checkpoints (train.checkpoint_storage).
// Shared (the default): one folder, output_dir/checkpoints, that every rank
// sees; rank 0 writes the index. Node-local: each node's own
// output_dir/checkpoints/<node>, holding the shards of its ranks (under DDP
// the node's first replica writes), an index written by its first rank that
// records every rank's node, and its own `latest`.
struct CheckpointStorage {
  bool node_local = false;
  std::string node;                     // this rank's node
  int local_rank = 0;                   // this rank on its node
  std::vector<std::string> rank_nodes;  // every rank's node, in rank order
};
// output_dir/checkpoints, or output_dir/checkpoints/<node> when node-local.
std::string checkpoint_root(const std::string& output_dir, const CheckpointStorage& storage);
// The newest complete checkpoint in a root folder ("" if none).
std::string latest_checkpoint_in(const std::string& root);
// What [model] checkpoint and `cohort export` accept, resolved in one place:
// a checkpoint folder (it has index.json); a `latest` file, or a folder of
// checkpoints with one, for the checkpoint it names; a run's output_dir for
// its checkpoints/latest. Anything else is returned as given (the reader
// then says it is no checkpoint).
std::string resolve_checkpoint_path(const std::string& path);

// The model config a checkpoint was saved with.
Result<models::ModelConfig> checkpoint_model_config(const std::string& checkpoint_dir);

// Fills a freshly created model (any tensor-parallel shard of the same
// config) with the checkpoint's parameters, reading only the slices this
// rank holds. For inference and for exports; training resumes through the
// trainer, which also restores optimizer state and the data position. A LoRA
// checkpoint gives its base with the adapters merged in (W + scale · B A).
Status load_checkpoint_params(const std::string& checkpoint_dir, models::Model& model);

}  // namespace cohort::parallel

namespace cohort::parallel {
struct ParallelModel;
}
namespace cohort::collective {
class Communicator;
}

namespace cohort::parallel {

// Where a LoRA run's frozen base comes from, so that a checkpoint of its
// adapters rebuilds the whole model without the job file (`cohort export
// --merge`, `[model] checkpoint` for inference): a Hugging Face folder, a
// checkpoint (merged in turn if it is a LoRA one), or else the seed that
// initialised it.
struct BaseModelSource {
  std::string hf_dir;
  std::string checkpoint;
  uint64_t seed = 0;
};

// What a training checkpoint records besides tensors.
struct TrainPosition {
  int64_t step = 0;            // optimizer steps completed
  uint64_t data_seed = 0;      // the sampler's seed (its RNG state is (seed, step))
  int64_t data_step = 0;       // the sampler's next step
  // Updates applied (AdamW's bias-correction count): `step` less the steps
  // skipped for non-finite gradients. Older checkpoints lack it: = step.
  int64_t optimizer_steps = 0;
  // fp16 loss scaling: the scale and its finite-step count (absent in
  // checkpoints of bf16/fp32 runs; a resumed fp16 run then starts afresh).
  std::optional<models::LossScalerState> loss_scaler;
  // The Hugging Face folder whose tokenizer the run trained with ("" : none),
  // so that exports carry the tokenizer files along.
  std::string tokenizer_dir;
  // LoRA runs (ParallelModel::lora): the frozen base's source.
  BaseModelSource lora_base;
};

// Every rank calls this (collective over `world`): each writes its shards, rank
// 0 the index, then rank 0 renames the folder into place and moves `latest`
// (node-local: each node's first rank does so in the node's own folder).
// Returns this rank's checkpoint folder.
Result<std::string> save_checkpoint(const std::string& output_dir, const models::ModelConfig& config,
                                    parallel::ParallelModel& model, const TrainPosition& position,
                                    const std::string& strategy, collective::Communicator& world,
                                    const CheckpointStorage& storage = {});

// Restores parameters and AdamW moments into this rank's shards, whatever
// mesh and strategy saved them (under LoRA: the adapters'; a LoRA job and a
// full-model checkpoint, or the reverse, or adapters of another rank or
// target set, are refused saying so); returns the training position. `own_shards`
// (node-local checkpoints, same mesh): the folder may hold only this node's
// pieces; only the elements this rank takes must be there.
Result<TrainPosition> restore_checkpoint(const std::string& checkpoint_dir, parallel::ParallelModel& model,
                                         bool own_shards = false);

// The tokenizer folder a checkpoint was trained with ("" when none or unknown).
std::string checkpoint_tokenizer_dir(const std::string& checkpoint_dir);

// A consolidated Hugging Face folder from a checkpoint, what `cohort export`
// writes: config.json, safetensors in `dtype` (kF32 or kBF16), the
// tokenizer files of the folder it trained with (tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, tokenizer.model, vocab.json,
// merges.txt, chat_template.jinja), and generation_config.json (that
// folder's, else one with its EOS). A LoRA checkpoint gives its PEFT adapter
// folder (fp32, whatever `dtype`), or with `merge` the whole model with the
// adapters merged into its base; `merge` on a full-model checkpoint is an
// error.
Status export_checkpoint(const std::string& checkpoint_dir, const std::string& hf_dir,
                         models::DType dtype = models::DType::kF32, bool merge = false);

// Whether a checkpoint holds LoRA adapters on a frozen base.
bool is_lora_checkpoint(const std::string& checkpoint_dir);

}  // namespace cohort::parallel
