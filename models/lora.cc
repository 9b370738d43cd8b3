// LoraAdapters: layout, initialisation, and the forward and backward terms
// over the backend's ops (lora.h).
#include "models/lora.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "base/check.h"
#include "models/counter_random.h"
#include "models/param_init.h"

namespace cohort::models {
namespace {

bool is_lora_a(const ParamSpec& p) {
  const std::string suffix = "lora_A.weight";
  return p.name.size() >= suffix.size() &&
         p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::unique_ptr<LoraAdapters>> LoraAdapters::create(const Model& model,
                                                           const LoraConfig& config) {
  COHORT_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<LoraAdapters> lora(new LoraAdapters(model, config));
  COHORT_RETURN_IF_ERROR(lora->build_layout());
  for (const ParamGroup& g : lora->layout_.groups) {
    float* params = g.numel ? lora->backend_.alloc_floats(g.numel) : nullptr;
    float* grads = g.numel ? lora->backend_.alloc_floats(g.numel) : nullptr;
    lora->params_.push_back(params);
    lora->grads_.push_back(grads);
    for (float* p : {params, grads})
      if (p) lora->owned_.push_back(p);
  }
  return lora;
}

LoraAdapters::LoraAdapters(const Model& model, const LoraConfig& config)
    : model_(model), backend_(model.backend()), config_(config) {}

LoraAdapters::~LoraAdapters() {
  for (float* p : owned_) backend_.free(p);
  if (scratch_) backend_.free(scratch_);
}

// Each target's tensors follow its projection's cut (lora.h, Layout).
Status LoraAdapters::build_layout() {
  const ParamLayout& base = model_.layout();
  layout_.layers = base.layers;
  layout_.tied = false;
  const int tp = model_.shard().tp_size, r = config_.rank;
  for (const ParamGroup& g : base.groups) layout_.groups.push_back(ParamGroup{g.name, {}, 0});
  for (int l = 0; l < base.layers; ++l) {
    ParamGroup& group = layout_.groups[base.block_group(l)];
    auto add = [&](ParamSpec p) {
      p.offset = group.numel;
      p.numel = size_t(p.shape[0]) * size_t(p.shape[1]);
      p.weight_decay = true;  // as transformers' Trainer decays every adapter matrix
      group.numel += p.numel;
      group.params.push_back(std::move(p));
      return group.params.back().offset;
    };
    for (LoraTarget t : kAllLoraTargets) {
      if (!config_.has_target(t)) continue;
      const bool mlp = t == LoraTarget::kGate || t == LoraTarget::kUp || t == LoraTarget::kDown;
      if (mlp && model_.config().moe.experts > 0) {
        return failed_precondition(
            "[lora] target_modules: this model's MLPs are mixtures of experts, and adapters on the experts are "
            "not supported yet; target the attention projections (q_proj, k_proj, v_proj, o_proj)");
      }
      const std::string w_name = fmt::format("model.layers.{}.{}.weight", l, hf_module_path(t));
      const ParamSpec* w = base.groups[base.block_group(l)].find(w_name);
      if (!w) return internal_error("lora: the model has no " + w_name);
      const int64_t out = w->shape[0], in = w->shape[1];
      ParamSpec a{peft_tensor_name(l, t, true), {r, in}, {r, w->global_shape[1]}};
      ParamSpec b{peft_tensor_name(l, t, false), {out, r}, {w->global_shape[0], r}};
      if (is_column_parallel(t)) {
        // B takes W's rows; A sees the whole input, and its gradient sums
        // what every tp rank's rows of B send back.
        b.shard_dim = w->shard_dim, b.shard_begin = w->shard_begin,
        b.tp_partial_grad = w->tp_partial_grad;
        a.tp_partial_grad = tp > 1;
      } else {
        // A takes W's columns; B's gradient sums every rank's partial product.
        a.shard_dim = w->shard_dim, a.shard_begin = w->shard_begin;
        b.tp_partial_grad = tp > 1;
      }
      Slot& s = slots_[static_cast<int>(t)];
      s.present = true;
      s.in = int(in), s.out = int(out), s.global_in = int(w->global_shape[1]);
      s.col_begin = a.shard_dim == ShardDim::kCols ? int(a.shard_begin) : 0;
      s.a = add(std::move(a));
      s.b = add(std::move(b));
    }
  }
  return Status::ok();
}

void LoraAdapters::set_group_buffers(int group, float* params, float* grads) {
  COHORT_CHECK(group >= 0 && group < num_groups());
  params_[group] = params;
  grads_[group] = grads;
}

void LoraAdapters::release_own_buffers() {
  std::vector<float*> kept;
  for (float* p : owned_) {
    bool in_use = false;
    for (int g = 0; g < num_groups(); ++g) in_use = in_use || params_[g] == p || grads_[g] == p;
    if (in_use)
      kept.push_back(p);
    else
      backend_.free(p);
  }
  owned_ = std::move(kept);
}

BlockAdapterShape LoraAdapters::block_shape() const {
  BlockAdapterShape shape;
  shape.rank = config_.rank;
  for (int t = 0; t < kAdapterTargets; ++t) {
    if (!slots_[t].present) continue;
    shape.a[t] = slots_[t].a;
    shape.b[t] = slots_[t].b;
  }
  // Every block group has the same layout; an all-MoE model's may be empty.
  for (int l = 0; l < model_.config().layers; ++l)
    shape.group_numel = std::max(shape.group_numel, layout_.groups[layout_.block_group(l)].numel);
  return shape;
}

BlockAdapters LoraAdapters::block(int layer) const {
  const int g = layout_.block_group(layer);
  COHORT_CHECK_MSG(params_[g] != nullptr, "lora: layer {}'s adapters are not gathered", layer);
  return {params_[g], grads_[g], config_.scale()};
}

void LoraAdapters::zero_grads() {
  for (int g = 0; g < num_groups(); ++g)
    if (grads_[g]) backend_.zero(grads_[g], layout_.groups[g].numel * sizeof(float));
}

void LoraAdapters::init(uint64_t seed) {
  std::vector<float> host;
  for (int g = 0; g < num_groups(); ++g) {
    const ParamGroup& group = layout_.groups[g];
    if (group.numel == 0) continue;
    host.assign(group.numel, 0.0f);  // B stays zero
    for (const ParamSpec& p : group.params) {
      if (!is_lora_a(p)) continue;
      const uint64_t stream = splitmix64(seed) ^ hash_name(p.name);
      if (config_.init == LoraInit::kGaussian) {
        fill_normal(host.data() + p.offset, p, stream, 1.0f / float(config_.rank));
      } else {
        // kaiming_uniform_(a = sqrt(5)) on A [rank, in]: gain sqrt(1/3), so
        // the bound sqrt(3) · gain / sqrt(fan_in) is 1 / sqrt(in).
        fill_uniform(host.data() + p.offset, p, stream, 1.0f / std::sqrt(float(p.global_shape[1])));
      }
    }
    backend_.copy_from_host(params_[g], host.data(), host.size() * sizeof(float));
  }
}

void LoraAdapters::begin_training_pass(uint64_t seed, uint64_t pass) {
  pass_ = splitmix64(splitmix64(seed ^ 0x4c6f5241ull) ^ (pass * 0x9e3779b97f4a7c15ull));
}

DropoutMask LoraAdapters::mask(int layer, LoraTarget target) const {
  const Slot& s = slot(target);
  DropoutMask m;
  m.seed =
      splitmix64(*pass_ ^ ((uint64_t(layer) * 8 + uint64_t(target) + 1) * 0xd1b54a32d192ed03ull));
  m.p = float(config_.dropout);
  m.col_begin = s.col_begin;
  m.global_cols = s.global_in;
  return m;
}

void LoraAdapters::ensure_scratch(int N) {
  if (N <= scratch_rows_) return;
  int max_in = 0, max_out = 0;
  for (const Slot& s : slots_) {
    if (!s.present) continue;
    max_in = std::max(max_in, s.in);
    max_out = std::max(max_out, s.out);
  }
  if (scratch_) backend_.free(scratch_);
  const size_t n = size_t(N), r = size_t(config_.rank);
  auto padded = [](size_t floats) { return (floats + 15) / 16 * 16; };  // 64-byte aligned slices
  const size_t xd = padded(n * max_in), u = padded(n * r), delta = padded(n * max_out);
  scratch_floats_ = xd + 2 * u + delta;
  float* base = backend_.alloc_floats(scratch_floats_);
  scratch_ = base;
  xd_ = base, u_ = base + xd, du_ = u_ + u, delta_ = du_ + u;
  scratch_rows_ = N;
}

const float* LoraAdapters::dropped_input(int layer, LoraTarget target, const float* x, int N) {
  if (!pass_ || config_.dropout <= 0) return x;
  backend_.dropout_forward(xd_, x, N, slot(target).in, mask(layer, target));
  return xd_;
}

void LoraAdapters::forward(int layer, const float* x, std::initializer_list<Output> outputs,
                           int N) {
  ensure_scratch(N);
  for (const Output& o : outputs)
    if (slot(o.target).present) forward_one(layer, x, o, N);
}

void LoraAdapters::forward_rows(int layer, const float* x, std::initializer_list<Output> outputs, int first,
                                int count) {
  ensure_scratch(count);
  for (const Output& o : outputs) {
    const Slot& s = slot(o.target);
    if (!s.present) continue;
    forward_one(layer, x + size_t(first) * s.in, Output{o.target, o.y + size_t(first) * s.out}, count);
  }
}

void LoraAdapters::forward_one(int layer, const float* x, const Output& o, int N) {
  const Slot& s = slot(o.target);
  const int r = config_.rank;
  const float* group = params_[layout_.block_group(layer)];
  COHORT_CHECK_MSG(group != nullptr, "lora: layer {}'s adapters are not gathered", layer);
  const float* xin = dropped_input(layer, o.target, x, N);
  backend_.linear_forward(u_, xin, group + s.a, nullptr, N, s.in, r);
  backend_.scale(u_, size_t(N) * r, config_.scale());
  backend_.linear_forward(delta_, u_, group + s.b, nullptr, N, r, s.out);
  backend_.accumulate(o.y, delta_, size_t(N) * s.out);
}

void LoraAdapters::backward(int layer, const float* x, float* dx,
                            std::initializer_list<OutputGrad> outputs, int N) {
  ensure_scratch(N);
  for (const OutputGrad& o : outputs)
    if (slot(o.target).present) backward_one(layer, x, dx, o, N);
}

// With u = scale · A x' (x' the dropped input) and y += B u:
//   dB += dy^T u,  du = scale · dy B,  dA += du^T x',  dx' = du A.
void LoraAdapters::backward_one(int layer, const float* x, float* dx, const OutputGrad& o, int N) {
  const Slot& s = slot(o.target);
  const int r = config_.rank, g = layout_.block_group(layer);
  const float* A = params_[g] + s.a;
  const float* B = params_[g] + s.b;
  COHORT_CHECK_MSG(grads_[g] != nullptr, "lora: layer {}'s adapters have no gradient buffer",
                   layer);
  float* dA = grads_[g] + s.a;
  float* dB = grads_[g] + s.b;
  const size_t nr = size_t(N) * r;
  const float* xin = dropped_input(layer, o.target, x, N);
  backend_.linear_forward(u_, xin, A, nullptr, N, s.in, r);
  backend_.scale(u_, nr, config_.scale());
  backend_.linear_backward(nullptr, dB, nullptr, o.dy, u_, B, N, r, s.out);
  backend_.zero(du_, nr * sizeof(float));
  backend_.linear_backward(du_, nullptr, nullptr, o.dy, nullptr, B, N, r, s.out);
  backend_.scale(du_, nr, config_.scale());
  backend_.linear_backward(nullptr, dA, nullptr, du_, xin, A, N, s.in, r);
  if (!dx) return;
  if (xin == x) {
    backend_.linear_backward(dx, nullptr, nullptr, du_, nullptr, A, N, s.in, r);
    return;
  }
  // Through the dropout: its own mask again, on the dropped input's scratch.
  backend_.zero(xd_, size_t(N) * s.in * sizeof(float));
  backend_.linear_backward(xd_, nullptr, nullptr, du_, nullptr, A, N, s.in, r);
  backend_.dropout_backward(dx, xd_, N, s.in, mask(layer, o.target));
}

void round_group(Model& model, int g, DType dtype) {
  const size_t n = model.layout().groups[g].numel;
  if (dtype == DType::kF32 || n == 0 || model.params(g) == nullptr) return;
  Backend& be = model.backend();
  void* half = be.alloc((n + 1) / 2 * sizeof(float));
  be.cast_to_half(half, dtype, model.params(g), n);
  be.cast_from_half(model.params(g), half, dtype, n);
  be.free(half);
}

void round_frozen_base(Model& model, DType dtype) {
  for (int g = 0; g < model.num_groups(); ++g) round_group(model, g, dtype);
}

void merge_lora_delta(float* w, const float* a, const float* b, int64_t out, int64_t in, int rank,
                      float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(out), int(in), rank, scale, b, rank, a,
              int(in), 1.0f, w, int(in));
}


Status merge_lora_adapters(const LoraAdapters& adapters, Model& model) {
  for (int g = 0; g < model.num_groups(); ++g) COHORT_RETURN_IF_ERROR(merge_lora_group(adapters, model, g));
  return Status::ok();
}

Status merge_lora_group(const LoraAdapters& adapters, Model& model, int group) {
  const LoraConfig& config = adapters.config();
  const ParamLayout& own = adapters.layout();
  // An adapter tensor's group and place in the adapters' layout.
  auto locate = [&](const std::string& name, int* group) -> const ParamSpec* {
    for (int g = 0; g < static_cast<int>(own.groups.size()); ++g) {
      if (const ParamSpec* p = own.groups[g].find(name)) return *group = g, p;
    }
    return nullptr;
  };
  std::vector<float> a, b, w;
  const int r = config.rank;
  for (int l = 0; l < model.config().layers; ++l) {
    const int wg = model.layout().block_group(l);
    if (wg != group) continue;
    for (LoraTarget t : config.targets) {
      int ag = 0, bg = 0;
      const ParamSpec* pa = locate(peft_tensor_name(l, t, true), &ag);
      const ParamSpec* pb = locate(peft_tensor_name(l, t, false), &bg);
      const std::string weight = fmt::format("model.layers.{}.{}.weight", l, hf_module_path(t));
      const ParamSpec* pw = model.layout().groups[wg].find(weight);
      if (!pa || !pb || !pw) return internal_error("merging adapters: no tensors for " + weight);
      const int64_t in = static_cast<int64_t>(pa->numel) / r, out = static_cast<int64_t>(pb->numel) / r;
      if (static_cast<int64_t>(pw->numel) != in * out) {
        return internal_error(fmt::format("merging adapters: {} holds {} values, its adapter [{}, {}]", weight,
                                          pw->numel, out, in));
      }
      a.resize(pa->numel), b.resize(pb->numel), w.resize(pw->numel);
      adapters.backend().copy_to_host(a.data(), adapters.params(ag) + pa->offset, a.size() * sizeof(float));
      adapters.backend().copy_to_host(b.data(), adapters.params(bg) + pb->offset, b.size() * sizeof(float));
      float* dst = model.params(wg) + pw->offset;
      model.backend().copy_to_host(w.data(), dst, w.size() * sizeof(float));
      merge_lora_delta(w.data(), a.data(), b.data(), out, in, r, config.scale());
      model.backend().copy_from_host(dst, w.data(), w.size() * sizeof(float));
    }
  }
  return Status::ok();
}

}  // namespace cohort::models
