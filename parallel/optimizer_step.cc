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
  for (Part& part : s.parts) {
    // Under expert parallelism a part of experts reduces over their
    // replicas only: the rest of its expert group holds other experts there.
    collective::Communicator& comm = *part.comm;
    float* grads = s.full_grads + part.begin;
    if (!shard_grads_) {
      // DDP / ZeRO-1: all-reduce in buckets as soon as the group is done.
      if (comm.size() == 1) continue;
      size_t bucket = std::max<size_t>(1, size_t(options_.bucket_mb * (1 << 20) / sizeof(float)));
      collective::AllReduceOptions options;
      options.stream = options_.stream;
      options.overlap = true;  // the rest of the backward runs alongside; finish_step waits
      for (size_t off = 0; off < part.numel(); off += bucket) {
        size_t n = std::min(bucket, part.numel() - off);
        s.pending_reduce.push_back(comm.all_reduce_async(grads + off, grads + off, n, DType::kF32, options));
      }
      continue;
    }
    const size_t S = part.shard_numel(), padded = part.layout.padded_numel();
    const float* source = grads;
    if (!part.layout.is_flat() || !s.single()) {
      // Packed as [ranks][S] (FSDP2), or copied out so that the padding
      // past a part is zeros rather than the next part.
      part.reduce_source = pool_take(padded);
      backend_->zero(part.reduce_source, padded * sizeof(float));
      if (part.layout.is_flat()) backend_->copy(part.reduce_source, grads, part.numel() * sizeof(float));
      else part.layout.pack(*backend_, grads, part.reduce_source);
      source = part.reduce_source;
    }
    part.reduce_target = pool_take(S);
    collective::ReduceScatterOptions options;
    options.stream = options_.stream;
    options.overlap = true;
    s.pending_reduce.push_back(comm.reduce_scatter_async(source, part.reduce_target, S, DType::kF32, options));
  }
}

Status DataParallel::wait_reductions() {
  Status first;
  auto keep_first = [&](const Status& st) {
    if (!st.is_ok() && first.is_ok()) first = st;
  };
  for (auto& w : unsettled_gathers_) keep_first(w->wait());
  unsettled_gathers_.clear();
  // A prefetched gather nobody used: let it land before its buffers move.
  for (auto& state : groups_)
    for (Part& part : state->parts)
      if (part.pending_gather) keep_first(part.pending_gather->wait());
  for (auto& state : groups_) {
    GroupState& s = *state;
    for (auto& w : s.pending_reduce) keep_first(w->wait());
    s.pending_reduce.clear();
    if (!shard_grads_ || !s.full_grads) continue;
    // Sharded gradients accumulate over micro-steps.
    for (Part& part : s.parts) {
      if (!part.reduce_target) continue;
      backend_->accumulate(s.shard_grads + part.shard_base, part.reduce_target, part.shard_numel());
      pool_return(part.reduce_target, part.shard_numel());
      part.reduce_target = nullptr;
      if (part.reduce_source) pool_return(part.reduce_source, part.layout.padded_numel());
      part.reduce_source = nullptr;
    }
    pool_return(s.full_grads, s.full_extent);
    s.full_grads = nullptr;
    trained_->set_group_buffers(s.index, s.current_params, nullptr);
  }
  return first;
}

// This rank's share of the squared global norm over its parts of dense
// parameters (experts: false) or of experts: its owned gradient shard,
// counting a parameter replicated over the tp group on one tp rank only.
double DataParallel::owned_sum_of_squares(bool experts) {
  int tp_rank = mesh_->tp_rank();
  const auto& dims = model_->dims();
  int kv_replicas = dims.kv_replicated ? mesh_->dims().tp / model_->config().kv_heads : 1;
  std::vector<models::FloatRange> ranges;
  for (auto& state : groups_) {
    GroupState& s = *state;
    if (s.empty()) continue;
    for (const Part& part : s.parts) {
      if (part.experts != experts) continue;
      float* grads = part_grads(s, part);
      for (const auto& seg : part.layout.segments(part.rank)) {
        const auto& p = part.spec.params[seg.param];
        bool replicated = p.shard_dim == models::ShardDim::kReplicated;
        bool kv_copy = kv_replicas > 1 && p.tp_partial_grad && !replicated;
        if (replicated && tp_rank != 0) continue;
        if (kv_copy && tp_rank % kv_replicas != 0) continue;
        ranges.push_back({grads + seg.shard_offset, seg.length});
      }
    }
  }
  return ranges.empty() ? 0.0 : backend_->sum_of_squares_ranges(ranges);
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

Status DataParallel::gather_full_params(GroupState& s) {
  collective::AllGatherOptions options;
  options.stream = options_.stream;
  for (Part& part : s.parts) {
    const size_t S = part.shard_numel();
    if (s.single()) {  // in place: the full buffer holds the padding
      COHORT_RETURN_IF_ERROR(part.comm->all_gather(part_params(s, part), s.full_params, S, DType::kF32, options));
      continue;
    }
    // Through scratch: a part's padding would overwrite the next part.
    float* gathered = pool_take(part.layout.padded_numel());
    Status st = part.comm->all_gather(part_params(s, part), gathered, S, DType::kF32, options);
    if (st.is_ok()) backend_->copy(s.full_params + part.begin, gathered, part.numel() * sizeof(float));
    pool_return(gathered, part.layout.padded_numel());
    COHORT_RETURN_IF_ERROR(st);
  }
  refresh_working(s.index);  // the other ranks' shards arrived in fp32
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
  const double unscale = 1.0 / (loss_scale * loss_scale);
  double sum = owned_sum_of_squares(false) * unscale;
  if (mesh_->dims().ep > 1) {
    // Each rank of an expert group holds other experts. Under DDP their
    // squares add over the group (the replicas repeat them); a sharded
    // strategy's owned shards of experts are all distinct over the world.
    double experts = owned_sum_of_squares(true) * unscale;
    if (options_.strategy == Strategy::kDdp) COHORT_RETURN_IF_ERROR(all_reduce_scalar(mesh_->ep(), &experts));
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

  for (auto& state : groups_) {
    GroupState& s = *state;
    if (s.empty()) continue;
    for (const Part& part : s.parts) {
      float* params = part_params(s, part);
      float* grads = part_grads(s, part);
      for (const auto& seg : part.layout.segments(part.rank)) {
        float* g = grads + seg.shard_offset;
        const size_t moments = part.shard_base + seg.shard_offset;
        if (coefficient != 1.0f) backend_->scale(g, seg.length, coefficient);
        backend_->adamw_update(params + seg.shard_offset, g, s.m + moments, s.v + moments, seg.length, adamw, step,
                               part.spec.params[seg.param].weight_decay);
      }
    }
  }
  refresh_half_shards();
  // ZeRO-1/2 keep full parameters: every rank gathers the updated shards.
  // ZeRO-3/FSDP2 gather at the next forward; DDP updated everything.
  if (shard_optimizer_ && !shard_params_) {
    for (auto& state : groups_)
      if (!state->empty()) COHORT_RETURN_IF_ERROR(gather_full_params(*state));
  }
  clear_gradients();
  return outcome;
}

void DataParallel::clear_gradients() {
  for (auto& state : groups_) {
    GroupState& s = *state;
    if (s.empty()) continue;
    if (shard_grads_) backend_->zero(s.shard_grads, s.owned_numel * sizeof(float));
    else backend_->zero(s.full_grads, s.full_extent * sizeof(float));
  }
}

MemoryReport DataParallel::memory() const {
  MemoryReport r;
  for (const auto& state : groups_) {
    const GroupState& s = *state;
    if (s.empty()) continue;
    const size_t owned = s.owned_numel, full = s.full_extent;
    r.param_bytes += (shard_params_ ? owned : full) * sizeof(float);
    if (half_params()) r.param_bytes += owned * dtype_size(options_.param_dtype);
    if (s.working) r.param_bytes += full * dtype_size(working_dtype());
    r.grad_bytes += (shard_grads_ ? owned : full) * sizeof(float);
    r.optimizer_bytes += 2 * owned * sizeof(float);
  }
  r.transient_bytes = pool_bytes();
  return r;
}

Status DataParallel::read_shard(int group, std::vector<float>* params, std::vector<float>* m,
                                std::vector<float>* v) {
  COHORT_RETURN_IF_ERROR(wait_reductions());
  GroupState& s = *groups_[group];
  const size_t n = s.owned_numel;
  params->assign(n, 0.0f);
  m->resize(n);
  v->resize(n);
  if (s.empty()) return Status::ok();
  for (const Part& part : s.parts) {
    const float* from = part_params(s, part);
    for (const auto& seg : part.layout.segments(part.rank))
      backend_->copy_to_host(params->data() + part.shard_base + seg.shard_offset, from + seg.shard_offset,
                             seg.length * sizeof(float));
  }
  backend_->copy_to_host(m->data(), s.m, n * sizeof(float));
  backend_->copy_to_host(v->data(), s.v, n * sizeof(float));
  return Status::ok();
}

Status DataParallel::write_shard(int group, const std::vector<float>& params, const std::vector<float>& m,
                                 const std::vector<float>& v) {
  GroupState& s = *groups_[group];
  const size_t n = s.owned_numel;
  if (params.size() != n || m.size() != n || v.size() != n)
    return invalid_argument(fmt::format("group {}: shard of {} floats expected, got {}/{}/{}", s.spec->name,
                                        n, params.size(), m.size(), v.size()));
  if (s.empty()) return Status::ok();
  // Segment by segment: a shard held in the full buffer (ZeRO-1/2) may end
  // in padding that is the next part's parameters.
  for (const Part& part : s.parts) {
    float* into = part_params(s, part);
    for (const auto& seg : part.layout.segments(part.rank))
      backend_->copy_from_host(into + seg.shard_offset, params.data() + part.shard_base + seg.shard_offset,
                               seg.length * sizeof(float));
  }
  backend_->copy_from_host(s.m, m.data(), n * sizeof(float));
  backend_->copy_from_host(s.v, v.data(), n * sizeof(float));
  if (half_params()) backend_->cast_to_half(s.shard_half, options_.param_dtype, s.shard_params, n);
  if (shard_optimizer_ && !shard_params_) return gather_full_params(s);
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
  collective::AllGatherOptions options;
  options.stream = options_.stream;
  for (const Part& part : s.parts) {
    const size_t S = part.shard_numel(), padded = part.layout.padded_numel();
    float* gathered = pool_take(padded);
    Status st = part.comm->all_gather(s.shard_params + part.shard_base, gathered, S, DType::kF32, options);
    if (st.is_ok()) {
      float* full = gathered;
      if (!part.layout.is_flat()) {
        full = pool_take(part.layout.full_numel());
        part.layout.unpack(*backend_, gathered, models::DType::kF32, full);
      }
      backend_->copy_to_host(params->data() + part.begin, full, part.numel() * sizeof(float));
      if (full != gathered) pool_return(full, part.layout.full_numel());
    }
    pool_return(gathered, padded);
    COHORT_RETURN_IF_ERROR(st);
  }
  return Status::ok();
}

Status DataParallel::gather_all() {
  for (int g = 0; g < int(groups_.size()); ++g) ensure_gathered(g);
  return status_;
}

}  // namespace cohort::parallel
