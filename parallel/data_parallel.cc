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
    for (auto& part : g->parts)
      if (part.pending_gather) (void)part.pending_gather->wait();
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

size_t DataParallel::owned_numel(int group) const { return groups_[group]->owned_numel; }

const std::vector<ShardSegment>& DataParallel::owned_segments(int group) const {
  return groups_[group]->owned_segments;
}

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

// A group's parts: one over the data-parallel axis, or under expert
// parallelism a sparse layer's dense parameters over it and its experts
// (which close the group) over their replicas.
std::vector<DataParallel::Part> DataParallel::make_parts(const models::ParamGroup& spec) {
  const int n = int(spec.params.size());
  int first_expert = n;
  if (mesh_->dims().ep > 1) {
    for (int i = 0; i < n && first_expert == n; ++i)
      if (spec.params[i].expert_parallel) first_expert = i;
  }
  std::vector<Part> parts;
  auto add = [&](int first, int last, collective::Communicator& comm, bool experts) {
    Part part;
    part.begin = first < n ? spec.params[first].offset : 0;
    const size_t end = last < n ? spec.params[last].offset : spec.numel;
    part.first_param = first;
    part.experts = experts;
    part.spec.name = experts ? spec.name + " (experts)" : spec.name;
    part.spec.numel = end - part.begin;
    for (int i = first; i < last; ++i) {
      part.spec.params.push_back(spec.params[i]);
      part.spec.params.back().offset -= part.begin;
    }
    const int size = options_.strategy == Strategy::kDdp ? 1 : comm.size();
    part.layout = options_.strategy == Strategy::kDdp    ? ShardLayout::replicated(part.spec)
                  : options_.strategy == Strategy::kFsdp2 ? ShardLayout::per_param_dim0(part.spec, size)
                                                          : ShardLayout::flat(part.spec, size);
    part.comm = &comm;
    part.rank = options_.strategy == Strategy::kDdp ? 0 : comm.rank();
    parts.push_back(std::move(part));
  };
  add(0, first_expert, mesh_->dp(), false);
  if (first_expert < n) add(first_expert, n, mesh_->expert_replicas(), true);
  return parts;
}

float* DataParallel::part_params(GroupState& s, const Part& part) const {
  if (s.shard_params) return s.shard_params + part.shard_base;
  return s.full_params ? s.full_params + part.begin + size_t(part.rank) * part.shard_numel() : nullptr;
}

float* DataParallel::part_grads(GroupState& s, const Part& part) const {
  if (shard_grads_) return s.shard_grads + part.shard_base;
  return s.full_grads + part.begin + size_t(part.rank) * part.shard_numel();
}

Status DataParallel::setup() {
  const auto& layout = trained_->layout();
  for (int g = 0; g < trained_->num_groups(); ++g) {
    const models::ParamGroup& spec = layout.groups[g];
    auto state = std::make_unique<GroupState>();
    state->index = g;
    state->spec = &spec;
    GroupState& s = *state;
    s.parts = make_parts(spec);
    for (Part& part : s.parts) {
      part.shard_base = s.owned_numel;
      s.owned_numel += part.shard_numel();
      s.full_extent = std::max(s.full_extent, part.begin + part.extent());
      for (const ShardSegment& seg : part.layout.segments(part.rank))
        s.owned_segments.push_back({part.shard_base + seg.shard_offset, part.begin + seg.full_offset, seg.length,
                                    part.first_param + seg.param});
    }
    if (spec.numel == 0) {  // nothing trained here (LoRA's embedding and head groups)
      s.gathered = true;
      trained_->set_group_buffers(g, nullptr, nullptr);
      groups_.push_back(std::move(state));
      continue;
    }
    const float* initial = trained_->params(g);
    if (!shard_params_) {
      s.full_params = s.keep(*backend_, s.full_extent);
      backend_->copy(s.full_params, initial, spec.numel * sizeof(float));
      s.gathered = true;
      if (working_dtype() != models::DType::kF32) {
        s.working = s.keep(*backend_, half_floats(s.full_extent));
        backend_->set_working_weights(s.full_params, s.working, spec.numel, working_dtype());
      }
    } else {
      s.shard_params = s.keep(*backend_, s.owned_numel);
      backend_->zero(s.shard_params, s.owned_numel * sizeof(float));
      for (const auto& seg : s.owned_segments)
        backend_->copy(s.shard_params + seg.shard_offset, initial + seg.full_offset, seg.length * sizeof(float));
      if (half_params()) s.shard_half = s.keep(*backend_, half_floats(s.owned_numel));
    }
    if (!shard_grads_) {
      s.full_grads = s.keep(*backend_, s.full_extent);
      backend_->zero(s.full_grads, s.full_extent * sizeof(float));
    } else {
      s.shard_grads = s.keep(*backend_, s.owned_numel);
    }
    s.m = s.keep(*backend_, s.owned_numel);
    s.v = s.keep(*backend_, s.owned_numel);
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
      backend_->cast_to_half(state->shard_half, options_.param_dtype, state->shard_params, state->owned_numel);
}

void DataParallel::start_gather(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || s.gathered || s.parts[0].pending_gather || s.empty()) return;
  collective::AllGatherOptions options;
  options.stream = options_.stream;
  options.overlap = true;  // ensure_gathered orders the use
  for (Part& part : s.parts) {
    const size_t S = part.shard_numel(), padded = part.layout.padded_numel();
    if (half_params()) {
      part.gather_half = pool_take(half_floats(padded));
      const void* shard = static_cast<const char*>(s.shard_half) + part.shard_base * dtype_size(options_.param_dtype);
      part.pending_gather = part.comm->all_gather_async(shard, part.gather_half, S, options_.param_dtype, options);
    } else {
      part.gather_target = pool_take(padded);
      part.pending_gather =
          part.comm->all_gather_async(s.shard_params + part.shard_base, part.gather_target, S, DType::kF32, options);
    }
  }
}

void DataParallel::ensure_gathered(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || s.gathered || s.empty()) return;
  start_gather(group);
  for (Part& part : s.parts) {
    // On GPU the compute stream waits for the gather on the device; blocking
    // the host too would only stop it queueing the next kernels. Errors show
    // at the next wait_reductions.
    if (options_.stream) {
      note(part.pending_gather->wait_on_stream(options_.stream));
      unsettled_gathers_.push_back(std::move(part.pending_gather));
    } else {
      note(part.pending_gather->wait());
    }
    part.pending_gather.reset();
  }
  Part& only = s.parts[0];
  if (s.single() && only.layout.is_flat() && !only.gather_half) {
    // Gathered in place: the group layout with padding after.
    s.full_params = only.gather_target;
    only.gather_target = nullptr;
  } else {
    // Widened from the half copy, reordered from per-parameter shards, or
    // each part into its range: one pass per part.
    s.full_params = pool_take(s.full_extent);
    for (Part& part : s.parts) {
      float* into = s.full_params + part.begin;
      const size_t padded = part.layout.padded_numel();
      if (!part.layout.is_flat()) {
        if (part.gather_half) part.layout.unpack(*backend_, part.gather_half, options_.param_dtype, into);
        else part.layout.unpack(*backend_, part.gather_target, models::DType::kF32, into);
      } else if (part.gather_half) {
        backend_->cast_from_half(into, part.gather_half, options_.param_dtype, part.numel());
      } else {
        backend_->copy(into, part.gather_target, part.numel() * sizeof(float));
      }
      if (part.gather_target) pool_return(part.gather_target, padded);
      if (part.gather_half) pool_return(static_cast<float*>(part.gather_half), half_floats(padded));
      part.gather_target = nullptr;
      part.gather_half = nullptr;
    }
  }
  s.gathered = true;
  s.current_params = s.full_params;
  trained_->set_group_buffers(group, s.full_params, s.full_grads);
}

void DataParallel::release_gathered(int group) {
  GroupState& s = *groups_[group];
  if (!shard_params_ || !s.gathered || s.empty()) return;
  pool_return(s.full_params, s.full_extent);
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
  s.full_grads = pool_take(s.full_extent);
  backend_->zero(s.full_grads, s.full_extent * sizeof(float));
  trained_->set_group_buffers(group, s.current_params, s.full_grads);
}

}  // namespace cohort::parallel
