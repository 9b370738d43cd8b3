// DataParallel: set-up, buffer pool, and the hooks that gather parameters and
// start gradient reductions while the model runs. The optimizer step lives in
// optimizer_step.cc.
#include "parallel/data_parallel.h"

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/check.h"
#include "parallel/group_state.h"

namespace cohort::parallel {

using collective::DType;

namespace {
// Floats of pool memory that hold n half-precision values.
size_t half_floats(size_t n) { return (n + 1) / 2; }
}  // namespace

struct DataParallel::Pool {
  std::map<size_t, std::vector<float*>> free;
  std::vector<float*> all;
  size_t bytes = 0;
};

std::string MemoryReport::to_string() const {
  auto mib = [](size_t b) { return double(b) / (1 << 20); };
  return fmt::format("params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB (persistent {:.1f} MiB), "
                     "transient {:.1f} MiB",
                     mib(param_bytes), mib(grad_bytes), mib(optimizer_bytes), mib(persistent_bytes()),
                     mib(transient_bytes));
}

DataParallel::DataParallel(models::Model* model, models::TrainableParams* trained, DeviceMesh* mesh,
                           const DataParallelOptions& options)
    : model_(model), trained_(trained), mesh_(mesh), options_(options), backend_(&model->backend()), pool_(new Pool) {
  Strategy s = options.strategy;
  shard_optimizer_ = s != Strategy::kDdp;
  shard_grads_ = s == Strategy::kZero2 || s == Strategy::kZero3 || s == Strategy::kFsdp2;
  shard_params_ = s == Strategy::kZero3 || s == Strategy::kFsdp2;
  tied_ = trained->layout().tied;
}

DataParallel::~DataParallel() {
  // Reductions still in flight write into our buffers: let them land first.
  for (auto& g : groups_) {
    for (auto& w : g->pending_reduce) (void)w->wait();
    if (g->pending_gather) (void)g->pending_gather->wait();
  }
  for (auto& w : unsettled_gathers_) (void)w->wait();
  for (auto& g : groups_) {
    if (g->working) backend_->clear_working_weights(g->full_params);
    for (float* p : g->persistent) backend_->free(p);
  }
  for (float* p : pool_->all) backend_->free(p);
}

Result<std::unique_ptr<DataParallel>> DataParallel::create(models::Model* model, DeviceMesh* mesh,
                                                           const DataParallelOptions& options,
                                                           models::TrainableParams* trained) {
  if (model->shard().tp_size != mesh->dims().tp || model->shard().tp_rank != mesh->tp_rank())
    return invalid_argument(fmt::format(
        "the model is tensor-parallel shard {} of {} but the mesh puts this rank at {} of {}",
        model->shard().tp_rank, model->shard().tp_size, mesh->tp_rank(), mesh->dims().tp));
  if (options.bucket_mb <= 0) return invalid_argument("bucket_mb must be positive");
  if (options.param_dtype != DType::kF32 && options.param_dtype != DType::kBF16 &&
      options.param_dtype != DType::kF16)
    return invalid_argument("param_dtype must be f32, bf16 or f16");
  std::unique_ptr<DataParallel> dp(new DataParallel(model, trained ? trained : model, mesh, options));
  COHORT_RETURN_IF_ERROR(dp->setup());
  dp->install_hooks();
  return dp;
}

const ShardLayout& DataParallel::layout(int group) const { return groups_[group]->layout; }

float* DataParallel::pool_take(size_t numel) {
  auto& list = pool_->free[numel];
  if (!list.empty()) {
    float* p = list.back();
    list.pop_back();
    return p;
  }
  float* p = backend_->alloc_floats(numel);
  pool_->all.push_back(p);
  pool_->bytes += numel * sizeof(float);
  return p;
}

size_t DataParallel::pool_bytes() const { return pool_->bytes; }

void DataParallel::pool_return(float* buffer, size_t numel) {
  if (buffer) pool_->free[numel].push_back(buffer);
}

float* DataParallel::GroupState::keep(models::Backend& backend, size_t numel) {
  float* p = backend.alloc_floats(numel);
  persistent.push_back(p);
  return p;
}

Status DataParallel::setup() {
  const auto& layout = trained_->layout();
  int dp = mesh_->dims().dp;
  int dp_rank = options_.strategy == Strategy::kDdp ? 0 : mesh_->dp_rank();
  for (int g = 0; g < trained_->num_groups(); ++g) {
    const models::ParamGroup& spec = layout.groups[g];
    auto state = std::make_unique<GroupState>();
    state->index = g;
    state->spec = &spec;
    state->layout = options_.strategy == Strategy::kDdp    ? ShardLayout::replicated(spec)
                    : options_.strategy == Strategy::kFsdp2 ? ShardLayout::per_param_dim0(spec, dp)
                                                            : ShardLayout::flat(spec, dp);
    GroupState& s = *state;
    for (const models::ParamSpec& p : spec.params) {
      if (!p.expert_parallel) continue;
      if (s.expert_end == 0) s.expert_begin = p.offset;
      s.expert_end = p.offset + p.numel;
    }
    if (spec.numel == 0) {  // nothing trained here (LoRA's embedding and head groups)
      s.gathered = true;
      trained_->set_group_buffers(g, nullptr, nullptr);
      groups_.push_back(std::move(state));
      continue;
    }
    size_t S = s.layout.shard_numel(), padded = s.layout.padded_numel();
    size_t own_offset = size_t(dp_rank) * S;
    const float* initial = trained_->params(g);
    if (!shard_params_) {
      s.full_params = s.keep(*backend_, padded);
      backend_->copy(s.full_params, initial, spec.numel * sizeof(float));
      s.shard_params = s.layout.is_flat() ? s.full_params + own_offset : nullptr;
      s.gathered = true;
      if (working_dtype() != models::DType::kF32) {
        s.working = s.keep(*backend_, half_floats(padded));
        backend_->set_working_weights(s.full_params, s.working, spec.numel, working_dtype());
      }
    } else {
      s.shard_params = s.keep(*backend_, S);
      for (const auto& seg : s.layout.segments(dp_rank))
        backend_->copy(s.shard_params + seg.shard_offset, initial + seg.full_offset,
                       seg.length * sizeof(float));
      if (half_params()) s.shard_half = s.keep(*backend_, half_floats(S));
    }
    if (!shard_grads_) {
      s.full_grads = s.keep(*backend_, padded);
      s.shard_grads = s.full_grads + own_offset;
    } else {
      s.shard_grads = s.keep(*backend_, S);
    }
    size_t opt = shard_optimizer_ ? S : padded;
    s.m = s.keep(*backend_, opt);
    s.v = s.keep(*backend_, opt);
    s.current_params = s.full_params;
    trained_->set_group_buffers(g, s.full_params, s.full_grads);
    groups_.push_back(std::move(state));
  }
  trained_->release_own_buffers();
  refresh_half_shards();
  spdlog::debug("data parallel {} on {}: {}", strategy_name(options_.strategy), mesh_->dims().to_string(),
                memory().to_string());
  return Status::ok();
}

void DataParallel::install_hooks() {
  models::ModelHooks hooks;
  hooks.before_forward = [this](int g) { before_forward(g); };
  hooks.after_forward = [this](int g) { after_forward(g); };
  hooks.before_backward = [this](int g) { before_backward(g); };
  hooks.after_backward = [this](int g) { after_backward(g); };
  model_->set_hooks(std::move(hooks));
}

void DataParallel::note(const Status& status) {
  if (!status.is_ok() && status_.is_ok()) {
    spdlog::error("data parallel: {}", status.message());
    status_ = status;
  }
}

void DataParallel::begin_step(int micro_steps) {
  COHORT_CHECK(micro_steps >= 1);
  micro_steps_ = micro_steps;
  micro_index_ = 0;
}

void DataParallel::begin_micro_step(int index) {
  micro_index_ = index;
  // Sharded gradients reuse scratch between micro-steps: the last one's
  // reductions must have landed.
  if (shard_grads_ && index > 0) note(wait_reductions());
}

// ---- parameter gathering (zero3, fsdp2) ----

models::DType DataParallel::working_dtype() const {
  if (shard_params_ || !options_.keep_working_weights) return models::DType::kF32;
  return models::matmul_operand_dtype(backend_->matmul_precision());
}

void DataParallel::refresh_working(int group) {
  GroupState& s = *groups_[group];
  if (s.working) backend_->refresh_working_weights(s.full_params, s.spec->numel);
}

void DataParallel::refresh_half_shards() {
  if (!half_params()) return;
  for (auto& state : groups_)
    if (!state->empty())
      backend_->cast_to_half(state->shard_half, options_.param_dtype, state->shard_params, state->layout.shard_numel());
}

void DataParallel::start_gather(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || s.gathered || s.pending_gather || s.empty()) return;
  size_t S = s.layout.shard_numel();
  collective::AllGatherOptions options;
  options.stream = options_.stream;
  options.overlap = true;  // ensure_gathered orders the use
  if (half_params()) {
    s.gather_half = pool_take(half_floats(s.layout.padded_numel()));
    s.pending_gather = mesh_->dp().all_gather_async(s.shard_half, s.gather_half, S,
                                                    options_.param_dtype, options);
  } else {
    s.gather_target = pool_take(s.layout.padded_numel());
    s.pending_gather = mesh_->dp().all_gather_async(s.shard_params, s.gather_target, S, DType::kF32, options);
  }
}

void DataParallel::ensure_gathered(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || s.gathered || s.empty()) return;
  start_gather(group);
  // On GPU the compute stream waits for the gather on the device; blocking
  // the host too would only stop it queueing the next kernels. Errors show
  // at the next wait_reductions.
  if (options_.stream) {
    note(s.pending_gather->wait_on_stream(options_.stream));
    unsettled_gathers_.push_back(std::move(s.pending_gather));
  } else {
    note(s.pending_gather->wait());
  }
  s.pending_gather.reset();
  size_t padded = s.layout.padded_numel();
  if (s.layout.is_flat()) {
    // Gathered in place: the group layout with padding after (widened from
    // the half copy first when the gather moved halves).
    if (s.gather_half) {
      s.gather_target = pool_take(padded);
      backend_->cast_from_half(s.gather_target, s.gather_half, options_.param_dtype, padded);
    }
    s.full_params = s.gather_target;
  } else {
    // Per-parameter shards: reordered (and widened) into the group layout in one pass.
    s.full_params = pool_take(s.layout.full_numel());
    if (s.gather_half) s.layout.unpack(*backend_, s.gather_half, options_.param_dtype, s.full_params);
    else s.layout.unpack(*backend_, s.gather_target, models::DType::kF32, s.full_params);
    if (s.gather_target) pool_return(s.gather_target, padded);
  }
  if (s.gather_half) pool_return(static_cast<float*>(s.gather_half), half_floats(padded));
  s.gather_half = nullptr;
  s.gather_target = nullptr;
  s.gathered = true;
  s.current_params = s.full_params;
  trained_->set_group_buffers(group, s.full_params, s.full_grads);
}

void DataParallel::release_gathered(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || !s.gathered || s.empty()) return;
  pool_return(s.full_params, s.layout.is_flat() ? s.layout.padded_numel() : s.layout.full_numel());
  s.full_params = nullptr;
  s.current_params = nullptr;
  s.gathered = false;
  trained_->set_group_buffers(group, nullptr, s.full_grads);
}

// ---- hooks ----

void DataParallel::before_forward(int group) {
  if (!shard_params_) return;
  ensure_gathered(group);
  if (options_.prefetch && group + 1 < trained_->num_groups()) start_gather(group + 1);
}

void DataParallel::after_forward(int group) {
  if (!shard_params_ || !options_.reshard_after_forward) return;
  int head = trained_->layout().head_group();
  // The head's backward follows at once, and a tied embedding is read again by the head.
  if (group == head || (tied_ && group == models::ParamLayout::kEmbedGroup)) return;
  release_gathered(group);
}

void DataParallel::before_backward(int group) {
  if (shard_params_) {
    ensure_gathered(group);
    if (options_.prefetch && group > 0) start_gather(group - 1);
  }
  if (shard_grads_) {
    acquire_grad_scratch(group);
    if (tied_ && group == trained_->layout().head_group()) acquire_grad_scratch(models::ParamLayout::kEmbedGroup);
  }
}

void DataParallel::after_backward(int group) {
  // With tied embeddings the head also writes the embedding's gradient; that
  // group is reduced after its own backward, which comes last.
  bool last_micro = micro_index_ == micro_steps_ - 1;
  if (shard_grads_ || last_micro) reduce_gradients(group);
  release_gathered(group);
}

void DataParallel::acquire_grad_scratch(int group) {
  GroupState& s = *groups_[group];
  if (s.full_grads || s.empty()) return;
  size_t n = s.layout.is_flat() ? s.layout.padded_numel() : s.layout.full_numel();
  s.full_grads = pool_take(n);
  backend_->zero(s.full_grads, n * sizeof(float));
  trained_->set_group_buffers(group, s.current_params, s.full_grads);
}

}  // namespace cohort::parallel
