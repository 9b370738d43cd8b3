// The training worker: joins the job's collective, builds and shards the
// model, resumes from the latest checkpoint, and runs the optimizer steps
// with gradient accumulation, the learning-rate schedule, clipping,
// evaluation, checkpoints and metrics.
//
// The global batch of step s is the same sequences whatever the world size
// (data/batch_sampler.h); a data-parallel rank takes its slice and splits it into
// micro-batches. Gradients are scaled by 1/(targets that count in the global
// batch: all of them, less the masked prompt and chat turns), so
// the sum over micro-steps and ranks is the global mean and a resumed or
// rescaled run follows the same curve.
//
// LoRA ([lora]): the model is a frozen base and the adapters on it are what
// the strategy shards, reduces and steps; each micro-step is a training pass
// of its own for the adapters' dropout, and checkpoints hold the adapters
// (with a PEFT adapter folder) and where the base comes from.
//
// Precision: train.precision picks the GEMM numerics (worker/worker_context.h); fp16
// adds dynamic loss scaling (models/loss_scaler.h): the loss is multiplied
// by the scale before backward, finish_step divides it out, and a step whose
// gradients are not finite is skipped and lowers the scale.
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "hf/load_quantization.h"
#include "hf/model_folder.h"
#include "base/env_knobs.h"
#include "collective/bootstrap.h"
#include "parallel/checkpoint.h"
#include "train/checkpoint_storage.h"
#include "train/train_report.h"
#include "train/lr_schedule.h"
#include "train/train_job.h"

#include "base/parallel_dims.h"
#include "worker/worker_context.h"
#include "data/batch_prefetcher.h"
#include "train/training_data.h"
#include "infer/generate.h"
#include "models/loss_scaler.h"
#include "text/tokenizer.h"

namespace cohort::train {
namespace {

std::atomic<bool> g_stop_requested{false};
void on_sigterm(int) { g_stop_requested = true; }

// The folder whose tokenizer the data is tokenized with: hf_dir, or the one a
// starting checkpoint recorded.
std::string tokenizer_dir(const jobs::ModelSection& m) {
  if (!m.hf_dir.empty()) return m.hf_dir;
  if (!m.checkpoint.empty()) return parallel::checkpoint_tokenizer_dir(m.checkpoint);
  return "";
}

class Trainer {
 public:
  explicit Trainer(const jobs::JobSpec& spec) : spec_(spec), t_(spec.train) {}
  Status run();

 private:
  Status setup();
  Status train_step(int step);
  Status dump_batch(const data::RankBatch& batch);
  Result<double> evaluate();
  Status checkpoint(int steps_done);
  Status print_sample();
  int tp() const { return spec_.parallel.tensor_parallel; }

  const jobs::JobSpec& spec_;
  const jobs::TrainSection& t_;
  worker::WorkerContext ctx_;
  models::ModelConfig config_;
  parallel::ParallelModel pm_;
  std::string tokenizer_dir_;
  parallel::CheckpointStorage storage_;  // where checkpoints go (train.checkpoint_storage)
  std::unique_ptr<data::BatchSampler> sampler_, eval_sampler_;
  std::unique_ptr<data::BatchPrefetcher> prefetcher_;
  std::unique_ptr<TrainReporter> reporter_;
  std::optional<models::LossScaler> scaler_;  // fp16 only
  int dp_ = 1, dp_rank_ = 0, accumulation_ = 1, start_step_ = 0, last_saved_ = -1;
  // Updates applied so far: a skipped step (non-finite gradients) does not
  // count, so AdamW's bias correction starts at 1 with the first real update.
  int64_t optimizer_steps_ = 0;
  std::vector<int32_t> inputs_, targets_;
  double last_loss_ = 0;
};

Status Trainer::setup() {
  COHORT_ASSIGN_OR_RETURN(ctx_, worker::make_worker_context(spec_));
  if (t_.precision == jobs::Precision::kFp16) {
    models::LossScalerOptions lso;
    lso.initial_scale = t_.initial_loss_scale;
    lso.growth_interval = t_.loss_scale_window;
    auto scaler = models::LossScaler::create(lso);
    if (!scaler) return scaler.status().with_context("train.initial_loss_scale / train.loss_scale_window");
    scaler_ = std::move(*scaler);
  }
  COHORT_ASSIGN_OR_RETURN(config_, worker::resolve_model_config(spec_.model));
  if (t_.seq_len > config_.max_seq)
    return invalid_argument(fmt::format("train.seq_len {} is longer than the model's max_seq {} (set model.max_seq)",
                                        t_.seq_len, config_.max_seq));
  int world = ctx_.world.size;
  const auto dims = ParallelDims::create(world, tp(), spec_.parallel.expert_parallel);
  if (!dims) return dims.status().with_context("parallel.tensor_parallel / parallel.expert_parallel");
  dp_ = dims->dp;
  int per_step = t_.micro_batch * dp_;
  int global = t_.global_batch > 0 ? t_.global_batch : per_step;
  if (global % per_step != 0)
    return invalid_argument(fmt::format(
        "train.global_batch {} cannot be split at world size {}: micro_batch {} × data-parallel {} = {} does not divide it",
        global, world, t_.micro_batch, dp_, per_step));
  accumulation_ = global / per_step;

  // Before anything is written: checkpoints (and the data cache) on storage
  // that is not what the job says it is would fail much later, at a resume
  // on other nodes.
  COHORT_ASSIGN_OR_RETURN(storage_, describe_storage(spec_, ctx_.world));
  if (!storage_.node_local) {
    COHORT_RETURN_IF_ERROR(check_shared_output_dir(spec_.job.output_dir, storage_, *ctx_.world.cpu));
  }
  tokenizer_dir_ = tokenizer_dir(spec_.model);
  TrainingDataOptions data_options{global, int64_t(t_.micro_batch) * dp_, config_.vocab_size, tokenizer_dir_,
                                   ctx_.world.rank,
                                   storage_.node_local ? storage_.local_rank == 0 : ctx_.world.rank == 0,
                                   storage_.node_local ? storage_.node : std::string()};
  COHORT_ASSIGN_OR_RETURN(TrainingData data, open_training_data(spec_, data_options, *ctx_.world.cpu));
  sampler_ = std::move(data.train);
  eval_sampler_ = std::move(data.eval);
  if (ctx_.world.rank == 0) spdlog::info("data: {}", data.summary);

  std::string resume_from;
  if (t_.resume) {
    COHORT_ASSIGN_OR_RETURN(resume_from, resume_checkpoint(spec_.job.output_dir, storage_, *ctx_.world.cpu));
  }
  COHORT_ASSIGN_OR_RETURN(pm_, worker::build_parallel_model(spec_, config_, ctx_, /*for_training=*/true));
  models::ActivationCheckpointing checkpointing = models::ActivationCheckpointing::kNone;
  if (!models::parse_activation_checkpointing(t_.activation_checkpointing, &checkpointing)) {
    return invalid_argument("train.activation_checkpointing = '" + t_.activation_checkpointing +
                            "': expected none, selective or full");
  }
  pm_.model->set_activation_checkpointing(checkpointing);
  pm_.model->set_lm_head_chunk_tokens(t_.lm_head_chunk_tokens);
  if (!resume_from.empty()) {
    COHORT_ASSIGN_OR_RETURN(parallel::TrainPosition position,
                            parallel::restore_checkpoint(resume_from, pm_, /*own_shards=*/storage_.node_local));
    start_step_ = int(position.step);
    optimizer_steps_ = position.optimizer_steps;
    last_saved_ = start_step_;
    COHORT_RETURN_IF_ERROR(sampler_->restore({position.data_seed, position.data_step}));
    if (scaler_ && position.loss_scaler) {
      Status restored = scaler_->restore(*position.loss_scaler);
      if (!restored.is_ok()) return restored.with_context(resume_from + "/index.json");
    }
  }
  dp_rank_ = pm_.mesh->dp_rank();
  prefetcher_ = std::make_unique<data::BatchPrefetcher>(sampler_.get(), int64_t(dp_rank_) * (global / dp_),
                                                        global / dp_);
  reporter_ = std::make_unique<TrainReporter>(spec_.job.output_dir, ctx_.world.rank == 0, start_step_, t_.log_every,
                                              t_.tensorboard);
  inputs_.resize(size_t(t_.micro_batch) * t_.seq_len);
  targets_.resize(inputs_.size());
  if (ctx_.world.rank == 0) {
    const auto formats = hf::summarize_weight_formats(config_, spec_.model.hf_dir, spec_.model.quantize);
    spdlog::info("weights: {}{}", formats.is_ok() ? formats->describe() : formats.status().message(),
                 spec_.model.quantize == "none" ? "" : " (model.quantize = " + spec_.model.quantize + ")");
  }
  if (ctx_.world.rank == 0)
    spdlog::info("training {} ({:.1f}M parameters) on {} ({} × {}): global batch {} = micro {} × dp {} × accumulation {}; "
                 "{} GEMMs; memory per rank: {}", spec_.job.name, config_.num_parameters() / 1e6, ctx_.device_name,
                 pm_.mesh->dims().to_string(), strategy_name(spec_.parallel.strategy), global, t_.micro_batch, dp_,
                 accumulation_, models::matmul_precision_name(ctx_.backend->matmul_precision()),
                 pm_.data_parallel->memory().to_string());
  return Status::ok();
}

// COHORT_TRAIN_DUMP_BATCHES: rank 0's slice of the step (the whole global
// batch in a one-rank run), inputs then targets, appended in native int32.
Status Trainer::dump_batch(const data::RankBatch& batch) {
  const std::string path = (std::filesystem::path(spec_.job.output_dir) / "batches.i32").string();
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) return internal_error(fmt::format("COHORT_TRAIN_DUMP_BATCHES: cannot open {}", path));
  const bool written = std::fwrite(batch.inputs.data(), 4, batch.inputs.size(), f) == batch.inputs.size() &&
                       std::fwrite(batch.targets.data(), 4, batch.targets.size(), f) == batch.targets.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) return internal_error(fmt::format("COHORT_TRAIN_DUMP_BATCHES: writing {} failed", path));
  return Status::ok();
}

Status Trainer::train_step(int step) {
  auto started = std::chrono::steady_clock::now();
  int64_t global = sampler_->options().global_batch;
  int64_t data_step = sampler_->next_step();
  double lr = learning_rate(step, t_.steps, t_.warmup_steps, t_.lr, t_.min_lr);
  auto& dp = *pm_.data_parallel;
  dp.begin_step(accumulation_);
  double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  const data::RankBatch& batch = prefetcher_->take(data_step);
  if (!batch.status.is_ok()) return batch.status.with_context("train.data");
  if (ctx_.world.rank == 0 && env_knob_on(EnvKnob::kTrainDumpBatches)) {
    COHORT_RETURN_IF_ERROR(dump_batch(batch));
  }
  // The loss is the mean over the targets that count (masked chat and
  // prompt tokens do not), over the whole global batch, as HF averages.
  const double counted = double(std::max<int64_t>(1, batch.counted_targets));
  float scale = float(loss_scale / counted);
  double loss_sum = 0;
  const size_t micro = size_t(t_.micro_batch) * size_t(t_.seq_len);
  for (int k = 0; k < accumulation_; ++k) {
    dp.begin_micro_step(k);
    // LoRA dropout: masks of their own for each micro-step of each rank.
    const uint64_t pass = (uint64_t(step) * accumulation_ + k) * dp_ + dp_rank_;
    if (pm_.lora) pm_.lora->begin_training_pass(uint64_t(t_.seed), pass);
    loss_sum += pm_.model->forward(batch.inputs.data() + k * micro, batch.targets.data() + k * micro,
                                   t_.micro_batch, t_.seq_len).sum;
    pm_.model->backward(scale);
  }
  if (pm_.lora) pm_.lora->end_training_pass();  // evaluation and samples run without dropout
  models::AdamWConfig adamw{float(lr), float(t_.beta1), float(t_.beta2), 1e-8f, float(t_.weight_decay)};
  COHORT_ASSIGN_OR_RETURN(parallel::StepOutcome outcome,
                          dp.finish_step(adamw, float(t_.grad_clip), optimizer_steps_ + 1, loss_scale));
  if (outcome.applied) ++optimizer_steps_;
  if (scaler_) scaler_->update(outcome.applied);
  else if (!outcome.applied && ctx_.world.rank == 0)
    spdlog::warn("step {}: gradients are not finite; the update was skipped", step + 1);
  // Every tp rank of a replica saw the same loss: sum over the world / tp.
  // The second slot carries "stop requested" so that all ranks agree on it.
  float shared[2] = {float(loss_sum / tp()), g_stop_requested ? 1.0f : 0.0f};
  COHORT_RETURN_IF_ERROR(ctx_.world.cpu->all_reduce(shared, 2, collective::DType::kF32));
  last_loss_ = double(shared[0]) / counted;
  if (shared[1] > 0) g_stop_requested = true;

  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  StepReport r;
  r.step = step + 1;
  r.total_steps = t_.steps;
  r.loss = last_loss_;
  r.lr = lr;
  r.grad_norm = outcome.grad_norm;
  r.skipped = !outcome.applied;
  if (scaler_) r.loss_scale = loss_scale;
  r.step_seconds = seconds;
  r.tokens_per_s = double(global * t_.seq_len) / seconds;
  r.mfu = worker::model_flops_utilization(config_, r.tokens_per_s, ctx_);
  r.memory_mb = worker::memory_in_use_mb(ctx_, pm_);
  r.activation_mb = double(pm_.model->activation_bytes()) / (1 << 20);
  reporter_->step(r);
  return Status::ok();
}

Result<double> Trainer::evaluate() {
  double sum = 0, counted = 0;
  int64_t batch = eval_sampler_->options().global_batch;
  int batches = int(std::min<int64_t>(t_.eval_batches, std::max<int64_t>(1, eval_sampler_->windows() / batch)));
  for (int b = 0; b < batches; ++b) {
    COHORT_RETURN_IF_ERROR(eval_sampler_->fill(b, int64_t(dp_rank_) * t_.micro_batch, t_.micro_batch,
                                               inputs_.data(), targets_.data()));
    sum += pm_.model->forward(inputs_.data(), targets_.data(), t_.micro_batch, t_.seq_len).sum;
    counted += double(eval_sampler_->counted_targets(b));
  }
  float total = float(sum / tp());
  COHORT_RETURN_IF_ERROR(ctx_.world.cpu->all_reduce(&total, 1, collective::DType::kF32));
  return double(total) / std::max(1.0, counted);
}

Status Trainer::checkpoint(int steps_done) {
  parallel::TrainPosition position{steps_done, uint64_t(t_.seed), sampler_->step(), optimizer_steps_, std::nullopt,
                                   tokenizer_dir_, {}};
  if (scaler_) position.loss_scaler = scaler_->state();
  if (pm_.lora) {  // where the frozen base comes from, for merging without the job file
    const auto& m = spec_.model;
    position.lora_base = {m.hf_dir, m.checkpoint.empty() ? "" : parallel::resolve_checkpoint_path(m.checkpoint),
                          uint64_t(t_.seed)};
  }
  COHORT_ASSIGN_OR_RETURN(std::string dir, parallel::save_checkpoint(spec_.job.output_dir, config_, pm_, position,
                                                           strategy_name(spec_.parallel.strategy), *ctx_.world.cpu,
                                                           storage_));
  last_saved_ = steps_done;
  if (ctx_.world.rank == 0) {
    spdlog::info("checkpoint: {}", dir);
    reporter_->event({{"step", steps_done}, {"checkpoint", dir}});
  }
  return Status::ok();
}

Status Trainer::print_sample() {
  COHORT_RETURN_IF_ERROR(parallel::prepare_for_inference(pm_));
  std::unique_ptr<text::Tokenizer> tokenizer = std::make_unique<text::ByteTokenizer>();
  if (!tokenizer_dir_.empty()) {
    COHORT_ASSIGN_OR_RETURN(hf::ModelFolder folder, hf::ModelFolder::open(tokenizer_dir_));
    if (folder.has_tokenizer()) { COHORT_ASSIGN_OR_RETURN(tokenizer, folder.open_tokenizer()); }
  }
  std::vector<int32_t> prompt = tokenizer->encode_with_special_tokens(t_.sample_prompt.empty() ? "\n" : t_.sample_prompt);
  int capacity = std::min<int>(config_.max_seq, int(prompt.size()) + t_.sample_tokens);
  COHORT_ASSIGN_OR_RETURN(auto engine, models::decode::ModelEngine::borrow(*pm_.model, 1, capacity));
  infer::GenerateOptions options;
  options.max_new_tokens = capacity - int(prompt.size());
  options.sampling.temperature = 0.8f;
  options.sampling.top_k = 40;
  options.sampling.seed = uint64_t(t_.seed);
  COHORT_ASSIGN_OR_RETURN(auto none, infer::StopCondition::create({}, nullptr));
  COHORT_ASSIGN_OR_RETURN(auto results, infer::generate_all(*engine, {infer::Prompt{0, prompt, ""}}, none, options,
                                                            nullptr));
  if (ctx_.world.rank == 0 && tokenizer->vocab_size() <= config_.vocab_size) {
    std::string text = tokenizer->decode(prompt) + tokenizer->decode(results[0].tokens);
    std::printf("---- sample after %d steps ----\n%s\n---- end of sample ----\n", t_.steps, text.c_str());
    std::fflush(stdout);
    reporter_->event({{"step", t_.steps}, {"sample", text}});
  }
  return Status::ok();
}

Status Trainer::run() {
  COHORT_RETURN_IF_ERROR(setup());
  for (int step = start_step_; step < t_.steps; ++step) {
    COHORT_RETURN_IF_ERROR(train_step(step));
    int done = step + 1;
    if (eval_sampler_ && t_.eval_every > 0 && (done % t_.eval_every == 0 || done == t_.steps)) {
      COHORT_ASSIGN_OR_RETURN(double eval_loss, evaluate());
      reporter_->eval(done, eval_loss);
    }
    bool periodic = t_.checkpoint_every > 0 && done % t_.checkpoint_every == 0;
    if (periodic || done == t_.steps || g_stop_requested) COHORT_RETURN_IF_ERROR(checkpoint(done));
    if (g_stop_requested)
      return aborted(fmt::format("stopped by SIGTERM after step {} (checkpoint saved)", done));
  }
  if (t_.sample_tokens > 0) COHORT_RETURN_IF_ERROR(print_sample());
  return Status::ok();
}

}  // namespace

bool stop_requested_by_signal() { return g_stop_requested; }

Status run_train(const jobs::JobSpec& spec) {
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigaction(SIGTERM, &action, nullptr);
  Trainer trainer(spec);
  return trainer.run();
}

}  // namespace cohort::train
