// Incremental inference: prefill and single-token decode over a KV cache.
// Sequences in one call are "segments" (slot, first position, token count)
// packed token-major, so ragged batches need no padding.
#include <algorithm>

#include "base/check.h"
#include "models/activations.h"
#include "models/kv_cache.h"
#include "models/model.h"

namespace cohort::models {

Result<KvCache> KvCache::create(const Model& model, int slots, int capacity) {
  const ModelConfig& c = model.config();
  if (slots < 1 || capacity < 1 || capacity > c.max_seq) {
    return invalid_argument("kv cache: need slots >= 1 and 1 <= capacity <= max_seq (" +
                            std::to_string(c.max_seq) + "), got slots " + std::to_string(slots) +
                            ", capacity " + std::to_string(capacity));
  }
  KvCache cache;
  cache.backend_ = &model.backend();
  cache.slots_ = slots;
  cache.capacity_ = capacity;
  cache.layers_ = c.layers;
  cache.slot_stride_ = static_cast<size_t>(model.dims().kv_heads) * capacity * c.head_dim;
  for (int l = 0; l < c.layers; ++l) {
    cache.k_.push_back(cache.backend_->alloc_floats(cache.slot_stride_ * slots));
    cache.v_.push_back(cache.backend_->alloc_floats(cache.slot_stride_ * slots));
  }
  cache.lengths_.assign(slots, 0);
  return cache;
}

KvCache::KvCache(KvCache&& o) noexcept
    : backend_(o.backend_),
      slots_(o.slots_),
      capacity_(o.capacity_),
      layers_(o.layers_),
      slot_stride_(o.slot_stride_),
      k_(std::move(o.k_)),
      v_(std::move(o.v_)),
      lengths_(std::move(o.lengths_)) {
  o.k_.clear();
  o.v_.clear();
}

KvCache::~KvCache() {
  for (float* p : k_) backend_->free(p);
  for (float* p : v_) backend_->free(p);
}

float* KvCache::keys(int layer, int slot) const {
  return k_.at(layer) + slot * slot_stride_;
}
float* KvCache::values(int layer, int slot) const {
  return v_.at(layer) + slot * slot_stride_;
}
size_t KvCache::bytes() const {
  return 2 * slot_stride_ * slots_ * layers_ * sizeof(float);
}

void Model::prefill(KvCache& cache, int slot, const int32_t* tokens, int n, float* logits_host) {
  COHORT_CHECK(n >= 1);
  forward_incremental(cache, {Segment{slot, cache.length(slot), n}}, tokens, logits_host);
}

void Model::prefill_batch(KvCache& cache, const std::vector<int>& slots,
                          const std::vector<std::vector<int32_t>>& prompts, float* logits_host) {
  COHORT_CHECK(slots.size() == prompts.size() && !prompts.empty());
  std::vector<Segment> segments;
  std::vector<int32_t> packed;
  for (size_t i = 0; i < prompts.size(); ++i) {
    COHORT_CHECK(!prompts[i].empty());
    segments.push_back(
        Segment{slots[i], cache.length(slots[i]), static_cast<int>(prompts[i].size())});
    packed.insert(packed.end(), prompts[i].begin(), prompts[i].end());
  }
  forward_incremental(cache, segments, packed.data(), logits_host);
}

void Model::decode(KvCache& cache, const int* slots, const int32_t* tokens, int B,
                   float* logits_host) {
  std::vector<Segment> segments;
  for (int b = 0; b < B; ++b) segments.push_back(Segment{slots[b], cache.length(slots[b]), 1});
  forward_incremental(cache, segments, tokens, logits_host);
}

namespace {

void ensure_infer_scratch(Backend* be, Activations& a, const ModelConfig& c, const LocalDims& d,
                          const ShardSpec& shard, int n, int rows, int context) {
  const int tp_size = shard.tp_size;
  if (n <= a.infer_tokens && rows <= a.infer_rows && context <= a.infer_context) return;
  for (void* p : a.infer_allocations) be->free(p);
  a.infer_allocations.clear();
  n = std::max(n, a.infer_tokens), rows = std::max(rows, a.infer_rows);
  context = std::max(context, a.infer_context);
  a.infer_bytes = 0;
  auto take = [&](size_t count) {
    a.infer_bytes += count * sizeof(float);
    float* p = be->alloc_floats(count);
    a.infer_allocations.push_back(p);
    return p;
  };
  const size_t N = n, H = c.hidden, I = d.intermediate;
  a.infer_ids = reinterpret_cast<int32_t*>(take(N));
  a.infer_pos = reinterpret_cast<int32_t*>(take(N));
  a.ix = take(N * H), a.ixn = take(N * H), a.itmp = take(N * H);
  a.iq = take(N * d.q_dim()), a.iy = take(N * d.q_dim());
  a.ik = take(N * d.kv_dim()), a.iv = take(N * d.kv_dim());
  a.ig = take(N * I), a.iu = take(N * I), a.ih = take(N * I);
  a.irstd = take(N * d.heads);
  a.ilast = take(static_cast<size_t>(rows) * H);
  a.ilogits = take(static_cast<size_t>(rows) * d.vocab);
  a.igathered = take(static_cast<size_t>(rows) * d.vocab * tp_size);
  a.iscores = take(context);
  if (c.is_moe()) {
    // One sparse layer's routing and experts at a time (model_moe.cc).
    MoeIo& m = a.infer_moe;
    const size_t E = c.moe.experts, rows_k = N * c.moe.experts_per_token, Ie = d.expert_intermediate;
    m.probs = take(N * E);
    m.experts = reinterpret_cast<int32_t*>(take(rows_k));
    m.weights = take(rows_k);
    m.prob_sums = nullptr;  // the load-balancing loss is training's
    m.offsets = reinterpret_cast<int32_t*>(take(E + 1));
    m.source_rows = reinterpret_cast<int32_t*>(take(rows_k));
    m.slots = reinterpret_cast<int32_t*>(take(rows_k));
    m.xs = take(rows_k * H), m.ys = take(rows_k * H);
    // Under expert parallelism (a training job's sample after its steps)
    // every rank of the expert group runs the same rows in lockstep, and
    // each takes up to ep times its rows for its experts.
    const size_t ep = size_t(shard.ep_size), expert_rows = ep * rows_k;
    m.xe = ep > 1 ? take(expert_rows * H) : m.xs;
    m.ye = ep > 1 ? take(expert_rows * H) : m.ys;
    m.g = take(expert_rows * Ie), m.u = take(expert_rows * Ie), m.h = take(expert_rows * Ie);
    m.route = &a.infer_moe_route;
    m.counts = ep > 1 ? take(2 * ep * size_t(d.experts)) : nullptr;
  }
  a.infer_tokens = n, a.infer_rows = rows, a.infer_context = context;
}

}  // namespace

void Model::forward_incremental(KvCache& cache, const std::vector<Segment>& segments,
                                const int32_t* tokens, float* logits_host) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  int N = 0;
  host_pos_.clear();
  for (const Segment& s : segments) {
    COHORT_CHECK_MSG(s.first_pos + s.count <= cache.capacity(),
                     "kv cache slot {} full: {} + {} > capacity {}", s.slot, s.first_pos, s.count,
                     cache.capacity());
    for (int t = 0; t < s.count; ++t) host_pos_.push_back(s.first_pos + t);
    N += s.count;
  }
  for (int i = 0; i < N; ++i) COHORT_CHECK(tokens[i] >= 0 && tokens[i] < config_.vocab_size);
  ensure_infer_scratch(backend_, a, config_, dims_, shard_, N,
                       static_cast<int>(segments.size()), cache.capacity());
  const int H = config_.hidden;
  be.copy_from_host(a.infer_ids, tokens, N * sizeof(int32_t));
  be.copy_from_host(a.infer_pos, host_pos_.data(), N * sizeof(int32_t));
  be.embedding_forward(a.ix, a.infer_ids, embedding_table(), N, H, dims_.vocab_begin, dims_.vocab);
  tp_sum(a.ix, static_cast<size_t>(N) * H);
  for (int l = 0; l < config_.layers; ++l) incremental_block(cache, segments, N, l);
  int off = 0, row = 0;
  for (const Segment& s : segments) {
    off += s.count;
    be.copy(a.ilast + static_cast<size_t>(row++) * H, a.ix + static_cast<size_t>(off - 1) * H,
            H * sizeof(float));
    cache.lengths_[s.slot] = s.first_pos + s.count;
  }
  const int rows = static_cast<int>(segments.size());
  be.rmsnorm_forward(a.ilast, a.irstd, a.ilast, params_[layout_.head_group()], rows, H,
                     config_.rms_eps);
  be.linear_forward(a.ilogits, a.ilast, lm_head_weight(), nullptr, rows, H, dims_.vocab);
  gather_vocab_logits(rows, logits_host);
}

// One block over N packed new tokens (block_forward, in place): writes
// their K/V into the cache, then each segment attends over its slot's
// cached prefix.
void Model::incremental_block(KvCache& cache, const std::vector<Segment>& segments, int N, int l) {
  Activations& a = *acts_;
  const BlockTensors w = layout_.block_tensors(l, params_[layout_.block_group(l)]);
  const BlockIo io{a.ix, a.ixn, a.irstd, a.iq, a.ik, a.iv, a.iq, a.ik, a.irstd, a.irstd,
                   a.iy, a.itmp, a.ix, a.ixn, a.irstd, a.ig, a.iu, a.ih, a.ix, a.infer_pos,
                   config_.is_moe_layer(l) ? &a.infer_moe : nullptr};
  block_forward(l, w, io, N, [&] {
    Backend& be = *backend_;
    const int D = config_.head_dim, hq = dims_.heads, hkv = dims_.kv_heads;
    const int Qd = dims_.q_dim(), KVd = dims_.kv_dim(), cap = cache.capacity();
    int off = 0;
    for (const Segment& s : segments) {
      be.kv_cache_write(cache.keys(l, s.slot), io.kr + static_cast<size_t>(off) * KVd, s.count,
                        s.first_pos, cap, hkv, D);
      be.kv_cache_write(cache.values(l, s.slot), io.v + static_cast<size_t>(off) * KVd, s.count,
                        s.first_pos, cap, hkv, D);
      be.attention_cached(io.y + static_cast<size_t>(off) * Qd, a.iscores, io.qr + static_cast<size_t>(off) * Qd,
                          cache.keys(l, s.slot), cache.values(l, s.slot), s.count, s.first_pos, cap, hq,
                          hkv, D);
      off += s.count;
    }
  });
}

// Local logits [rows, V_local] -> host [rows, V]: TP ranks hold column blocks.
void Model::gather_vocab_logits(int rows, float* logits_host) {
  Activations& a = *acts_;
  const size_t Vl = dims_.vocab, local = static_cast<size_t>(rows) * Vl;
  if (shard_.tp_size == 1) {
    backend_->copy_to_host(logits_host, a.ilogits, local * sizeof(float));
    return;
  }
  tp_.all_gather(a.ilogits, a.igathered, local);
  host_logits_.resize(local * shard_.tp_size);
  backend_->copy_to_host(host_logits_.data(), a.igathered, host_logits_.size() * sizeof(float));
  const size_t V = static_cast<size_t>(config_.vocab_size);
  for (int r = 0; r < shard_.tp_size; ++r) {
    for (int i = 0; i < rows; ++i) {
      const float* src = host_logits_.data() + r * local + i * Vl;
      std::copy(src, src + Vl, logits_host + i * V + r * Vl);
    }
  }
}

}  // namespace cohort::models
