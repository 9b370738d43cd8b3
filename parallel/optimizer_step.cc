// DataParallel: gradient reduction, the global gradient norm, clipping, the
// AdamW step on the owned shard, and checkpoint access to the shards.
#include <cmath>

#include <fmt/format.h>

#include "parallel/data_parallel.h"
#include "parallel/group_state.h"

namespace cohort::parallel {

using collective::DType;

void DataParallel::sum_tp_partial_grads(int group, float* grads) {
  if (mesh_->dims().tp == 1) return;
  for (const auto& p : groups_[group]->spec->params) {
    if (!p.tp_partial_grad) continue;
    // Ranks holding the same slice add their parts: each places its slice at
    // its global position in a zeroed buffer of the global size, and the sum
    // over the tp group gives every holder the whole gradient of its slice.
    size_t global = 1;
    for (auto d : p.global_shape) global *= size_t(d);
    size_t row = p.global_shape.size() > 1 ? global / size_t(p.global_shape[0]) : 1;
    size_t at = p.shard_dim == models::ShardDim::kRows ? size_t(p.shard_begin) * row : 0;
    float* buffer = pool_take(global);
    backend_->zero(buffer, global * sizeof(float));
    backend_->copy(buffer + at, grads + p.offset, p.numel * sizeof(float));
    collective::AllReduceOptions options;
    options.stream = options_.stream;
    note(mesh_->tp().all_reduce(buffer, global, DType::kF32, options));
    backend_->copy(grads + p.offset, buffer + at, p.numel * sizeof(float));
    pool_return(buffer, global);
  }
}

void DataParallel::reduce_gradients(int group) {
  GroupState& s = *groups_[group];
  if (s.empty()) return;
  sum_tp_partial_grads(group, s.full_grads);
  auto& dp = mesh_->dp();
  if (!shard_grads_) {
    // DDP / ZeRO-1: all-reduce in buckets as soon as the group is done.
    // Under expert parallelism this rank's experts sum over their replicas
    // only: the rest of its expert group holds other experts there.
    size_t bucket = std::max<size_t>(1, size_t(options_.bucket_mb * (1 << 20) / sizeof(float)));
    collective::AllReduceOptions options;
    options.stream = options_.stream;
    options.overlap = true;  // the rest of the backward runs alongside; finish_step waits
    auto reduce = [&](collective::Communicator& group, size_t begin, size_t end) {
      if (group.size() == 1) return;
      for (size_t off = begin; off < end; off += bucket) {
        size_t n = std::min(bucket, end - off);
        s.pending_reduce.push_back(
            group.all_reduce_async(s.full_grads + off, s.full_grads + off, n, DType::kF32, options));
      }
    };
    if (s.expert_end == 0) {
      reduce(dp, 0, s.spec->numel);
    } else {
      reduce(dp, 0, s.expert_begin);
      reduce(mesh_->expert_replicas(), s.expert_begin, s.expert_end);
      reduce(dp, s.expert_end, s.spec->numel);
    }
    return;
  }
  size_t S = s.layout.shard_numel();
  const float* source = s.full_grads;
  if (!s.layout.is_flat()) {
    s.reduce_source = pool_take(s.layout.padded_numel());
    backend_->zero(s.reduce_source, s.layout.padded_numel() * sizeof(float));
    s.layout.pack(*backend_, s.full_grads, s.reduce_source);
    source = s.reduce_source;
  }
  s.reduce_target = pool_take(S);
  collective::ReduceScatterOptions options;
  options.stream = options_.stream;
  options.overlap = true;
  s.pending_reduce.push_back(dp.reduce_scatter_async(source, s.reduce_target, S, DType::kF32, options));
}

Status DataParallel::wait_reductions() {
  Status first;
  for (auto& w : unsettled_gathers_) {
    Status st = w->wait();
    if (!st.is_ok() && first.is_ok()) first = st;
  }
  unsettled_gathers_.clear();
  // A prefetched gather nobody used: let it land before its buffers move.
  for (auto& state : groups_) {
    if (!state->pending_gather) continue;
    Status st = state->pending_gather->wait();
    if (!st.is_ok() && first.is_ok()) first = st;
  }
  for (auto& state : groups_) {
    GroupState& s = *state;
    for (auto& w : s.pending_reduce) {
      Status st = w->wait();
      if (!st.is_ok() && first.is_ok()) first = st;
    }
    s.pending_reduce.clear();
    if (!shard_grads_ || !s.reduce_target) continue;
    // Sharded gradients accumulate over micro-steps.
    backend_->accumulate(s.shard_grads, s.reduce_target, s.layout.shard_numel());
    pool_return(s.reduce_target, s.layout.shard_numel());
    s.reduce_target = nullptr;
    if (s.reduce_source) pool_return(s.reduce_source, s.layout.padded_numel());
    s.reduce_source = nullptr;
    size_t n = s.layout.is_flat() ? s.layout.padded_numel() : s.layout.full_numel();
    pool_return(s.full_grads, n);
    s.full_grads = nullptr;
    trained_->set_group_buffers(s.index, s.current_params, nullptr);
  }
  return first;
}

// This rank's share of the squared global norm: its owned gradient shard,
// counting a parameter replicated over the tp group on one tp rank only.
double DataParallel::expert_sum_of_squares() {
  std::vector<models::FloatRange> ranges;
  for (auto& state : groups_) {
    if (state->expert_end > state->expert_begin)
      ranges.push_back({state->shard_grads + state->expert_begin, state->expert_end - state->expert_begin});
  }
  return ranges.empty() ? 0.0 : backend_->sum_of_squares_ranges(ranges);
}

double DataParallel::owned_sum_of_squares() {
  int tp_rank = mesh_->tp_rank();
  const auto& dims = model_->dims();
  int kv_replicas = dims.kv_replicated ? mesh_->dims().tp / model_->config().kv_heads : 1;
  int layout_rank = options_.strategy == Strategy::kDdp ? 0 : mesh_->dp_rank();
  std::vector<models::FloatRange> ranges;
  for (auto& state : groups_) {
    GroupState& s = *state;
    for (const auto& seg : s.layout.segments(layout_rank)) {
      const auto& p = s.spec->params[seg.param];
      if (p.expert_parallel) continue;  // expert_sum_of_squares
      bool replicated = p.shard_dim == models::ShardDim::kReplicated;
      bool kv_copy = kv_replicas > 1 && p.tp_partial_grad && !replicated;
      if (replicated && tp_rank != 0) continue;
      if (kv_copy && tp_rank % kv_replicas != 0) continue;
      ranges.push_back({s.shard_grads + seg.shard_offset, seg.length});
    }
  }
  return backend_->sum_of_squares_ranges(ranges);
}

Status DataParallel::all_reduce_scalar(collective::Communicator& comm, double* value) {
  // The communicator works on backend memory (device memory under NCCL), and
  // has no f64: a one-float round trip is precise enough for a norm.
  if (!scalar_) scalar_ = pool_take(1);
  float host = float(*value);
  backend_->copy_from_host(scalar_, &host, sizeof(float));
  collective::AllReduceOptions options;
  options.stream = options_.stream;
  COHORT_RETURN_IF_ERROR(comm.all_reduce(scalar_, 1, DType::kF32, options));
  backend_->copy_to_host(&host, scalar_, sizeof(float));
  *value = host;
  return Status::ok();
}

Result<StepOutcome> DataParallel::finish_step(const models::AdamWConfig& adamw, float grad_clip, int64_t step,
                                              double loss_scale) {
  note(wait_reductions());
  if (!status_.is_ok()) {
    Status failed = status_;
    status_ = Status::ok();
    return failed;
  }
  // DDP ranks hold identical full gradients, so only the tp group adds up;
  // the sharded strategies add over the whole world. The loss scale comes
  // out before the float all-reduce, so that it cannot overflow a finite norm.
  double sum = owned_sum_of_squares() / (loss_scale * loss_scale);
  if (mesh_->dims().ep > 1) {
    // Each rank of an expert group holds other experts: their squares add
    // over the group (DDP only; parallelize refuses the other strategies).
    double experts = expert_sum_of_squares() / (loss_scale * loss_scale);
    COHORT_RETURN_IF_ERROR(all_reduce_scalar(mesh_->ep(), &experts));
    sum += experts;
  }
  auto& norm_group = options_.strategy == Strategy::kDdp ? mesh_->tp() : mesh_->world();
  if (norm_group.size() > 1) COHORT_RETURN_IF_ERROR(all_reduce_scalar(norm_group, &sum));
  // Every rank sees the same reduced sum, so all of them skip together.
  StepOutcome outcome;
  outcome.grad_norm = std::sqrt(sum);
  outcome.applied = std::isfinite(outcome.grad_norm);
  if (!outcome.applied) {
    clear_gradients();
    return outcome;
  }
  float coefficient = float(models::clip_coefficient(outcome.grad_norm, grad_clip) / loss_scale);

  int layout_rank = options_.strategy == Strategy::kDdp ? 0 : mesh_->dp_rank();
  for (auto& state : groups_) {
    GroupState& s = *state;
    for (const auto& seg : s.layout.segments(layout_rank)) {
      const auto& p = s.spec->params[seg.param];
      float* g = s.shard_grads + seg.shard_offset;
      if (coefficient != 1.0f) backend_->scale(g, seg.length, coefficient);
      backend_->adamw_update(s.shard_params + seg.shard_offset, g, s.m + seg.shard_offset,
                             s.v + seg.shard_offset, seg.length, adamw, step, p.weight_decay);
    }
  }
  refresh_half_shards();
  // ZeRO-1/2 keep full parameters: every rank gathers the updated shards in
  // place. ZeRO-3/FSDP2 gather at the next forward; DDP updated everything.
  if (shard_optimizer_ && !shard_params_) {
    collective::AllGatherOptions options;
    options.stream = options_.stream;
    for (auto& state : groups_) {
      GroupState& s = *state;
      if (s.empty()) continue;
      size_t S = s.layout.shard_numel();
      COHORT_RETURN_IF_ERROR(mesh_->dp().all_gather(s.full_params + size_t(mesh_->dp_rank()) * S,
                                                    s.full_params, S, DType::kF32, options));
      refresh_working(s.index);  // the other ranks' shards arrived in fp32
    }
  }
  clear_gradients();
  return outcome;
}

void DataParallel::clear_gradients() {
  for (auto& state : groups_) {
    GroupState& s = *state;
    if (s.empty()) continue;
    if (shard_grads_) backend_->zero(s.shard_grads, s.layout.shard_numel() * sizeof(float));
    else backend_->zero(s.full_grads, s.layout.padded_numel() * sizeof(float));
  }
}

MemoryReport DataParallel::memory() const {
  MemoryReport r;
  for (const auto& state : groups_) {
    const GroupState& s = *state;
    size_t S = s.layout.shard_numel(), padded = s.layout.padded_numel();
    r.param_bytes += (shard_params_ ? S : padded) * sizeof(float);
    if (half_params()) r.param_bytes += S * dtype_size(options_.param_dtype);
    if (s.working) r.param_bytes += padded * dtype_size(working_dtype());
    r.grad_bytes += (shard_grads_ ? S : padded) * sizeof(float);
    r.optimizer_bytes += 2 * (shard_optimizer_ ? S : padded) * sizeof(float);
  }
  r.transient_bytes = pool_bytes();
  return r;
}

Status DataParallel::read_shard(int group, std::vector<float>* params, std::vector<float>* m,
                                std::vector<float>* v) {
  COHORT_RETURN_IF_ERROR(wait_reductions());
  GroupState& s = *groups_[group];
  size_t n = shard_optimizer_ ? s.layout.shard_numel() : s.layout.padded_numel();
  params->resize(n);
  m->resize(n);
  v->resize(n);
  if (s.empty()) return Status::ok();
  backend_->copy_to_host(params->data(), s.shard_params, n * sizeof(float));
  backend_->copy_to_host(m->data(), s.m, n * sizeof(float));
  backend_->copy_to_host(v->data(), s.v, n * sizeof(float));
  return Status::ok();
}

Status DataParallel::write_shard(int group, const std::vector<float>& params, const std::vector<float>& m,
                                 const std::vector<float>& v) {
  GroupState& s = *groups_[group];
  size_t n = shard_optimizer_ ? s.layout.shard_numel() : s.layout.padded_numel();
  if (params.size() != n || m.size() != n || v.size() != n)
    return invalid_argument(fmt::format("group {}: shard of {} floats expected, got {}/{}/{}", s.spec->name,
                                        n, params.size(), m.size(), v.size()));
  if (s.empty()) return Status::ok();
  backend_->copy_from_host(s.shard_params, params.data(), n * sizeof(float));
  backend_->copy_from_host(s.m, m.data(), n * sizeof(float));
  backend_->copy_from_host(s.v, v.data(), n * sizeof(float));
  if (half_params())
    backend_->cast_to_half(s.shard_half, options_.param_dtype, s.shard_params, s.layout.shard_numel());
  if (shard_optimizer_ && !shard_params_) {
    size_t S = s.layout.shard_numel();
    COHORT_RETURN_IF_ERROR(mesh_->dp().all_gather(s.full_params + size_t(mesh_->dp_rank()) * S,
                                                  s.full_params, S, DType::kF32, {}));
  }
  refresh_working(group);
  return Status::ok();
}

Status DataParallel::gather_group(int group, std::vector<float>* params) {
  GroupState& s = *groups_[group];
  params->resize(s.spec->numel);
  if (s.empty()) return Status::ok();
  if (!shard_params_) {
    backend_->copy_to_host(params->data(), s.full_params, s.spec->numel * sizeof(float));
    return Status::ok();
  }
  // The fp32 masters, whatever dtype the training gathers use.
  size_t S = s.layout.shard_numel(), padded = s.layout.padded_numel();
  float* gathered = pool_take(padded);
  collective::AllGatherOptions options;
  options.stream = options_.stream;
  Status st = mesh_->dp().all_gather(s.shard_params, gathered, S, DType::kF32, options);
  if (st.is_ok()) {
    float* full = gathered;
    if (!s.layout.is_flat()) {
      full = pool_take(s.layout.full_numel());
      s.layout.unpack(*backend_, gathered, models::DType::kF32, full);
    }
    backend_->copy_to_host(params->data(), full, s.spec->numel * sizeof(float));
    if (full != gathered) pool_return(full, s.layout.full_numel());
  }
  pool_return(gathered, padded);
  return st;
}

Status DataParallel::gather_all() {
  for (int g = 0; g < int(groups_.size()); ++g) ensure_gathered(g);
  return status_;
}

}  // namespace cohort::parallel
