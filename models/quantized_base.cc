// QuantizedBase (quantized_base.h).
#include "models/quantized_base.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/parallel_for.h"
#include "models/lora.h"
#include "models/quant/row_packed.h"
#include "models/tensor.h"

namespace cohort::models {

const char* to_string(HeldFormat format) {
  switch (format) {
    case HeldFormat::kBf16: return "bf16";
    case HeldFormat::kNf4: return "nf4";
    case HeldFormat::kFp8Block: return "fp8";
  }
  return "?";
}

namespace {

quant::WeightFormat quantized_format(HeldFormat format) {
  return format == HeldFormat::kNf4 ? quant::WeightFormat::kNf4 : quant::WeightFormat::kFp8Block;
}

}  // namespace

Result<std::unique_ptr<QuantizedBase>> QuantizedBase::create(Model& model, HeldFormat format) {
  std::unique_ptr<QuantizedBase> base(new QuantizedBase(model));
  base->format_ = format;
  const ParamLayout& layout = model.layout();
  for (int l = 0; l < model.config().layers; ++l) {
    if (format == HeldFormat::kBf16) round_group(model, layout.block_group(l), DType::kBF16);
    COHORT_RETURN_IF_ERROR(base->add_block(layout.block_group(l)));
  }
  std::vector<float>().swap(base->staging_);
  for (const Block& b : base->blocks_) model.set_group_buffers(b.group, nullptr, model.grads(b.group));
  model.release_own_buffers();
  return base;
}

Result<std::unique_ptr<QuantizedBase>> QuantizedBase::stream(Model& model, HeldFormat format, DType round_to) {
  std::unique_ptr<QuantizedBase> base(new QuantizedBase(model));
  base->format_ = format, base->round_to_ = format == HeldFormat::kBf16 ? DType::kBF16 : round_to;
  base->blocks_.reserve(size_t(model.config().layers));
  QuantizedBase* self = base.get();
  model.set_group_filled_listener([self](int group, const float* host) {
    if (!self->stream_status_.is_ok()) return;
    const ParamLayout& layout = self->model_.layout();
    const int first = layout.block_group(0);
    if (group < first || group >= first + self->model_.config().layers) return;
    for (const Block& b : self->blocks_) {
      if (b.group == group) {
        self->stream_status_ = internal_error("block group " + std::to_string(group) + " was loaded twice");
        return;
      }
    }
    // The loader's host copy where it has one, rounded here; else the
    // buffer, rounded where it is and copied back.
    if (!host) round_group(self->model_, group, self->round_to_);
    self->stream_status_ = self->add_block(group, host, host ? self->round_to_ : DType::kF32);
  }, /*reads_buffer=*/false);
  return base;
}

Status QuantizedBase::finish_stream() {
  model_.set_group_filled_listener(nullptr);
  std::vector<float>().swap(staging_);
  COHORT_RETURN_IF_ERROR(stream_status_);
  if (static_cast<int>(blocks_.size()) != model_.config().layers) {
    return internal_error("a streamed base got " + std::to_string(blocks_.size()) + " of " +
                          std::to_string(model_.config().layers) + " blocks from its loader");
  }
  // Layer order, as block_of() expects.
  std::sort(blocks_.begin(), blocks_.end(), [](const Block& a, const Block& b) { return a.group < b.group; });
  for (const Block& b : blocks_) model_.set_group_buffers(b.group, nullptr, model_.grads(b.group));
  model_.release_own_buffers();
  return Status::ok();
}

QuantizedBase::~QuantizedBase() {
  Backend& be = model_.backend();
  for (Block& b : blocks_) {
    if (b.expanded) {
      if (b.attached) be.clear_working_weights(b.expanded);
      model_.set_group_buffers(b.group, nullptr, model_.grads(b.group));
      be.free(b.expanded);
    }
  }
  for (auto& [numel, buffers] : free_)
    for (float* p : buffers) be.free(p);
  for (void* p : owned_) be.free(p);
}

void* QuantizedBase::keep(size_t bytes) {
  void* p = model_.backend().alloc(bytes);
  owned_.push_back(p);
  stored_bytes_ += bytes;
  return p;
}

Status QuantizedBase::add_block(int group, const float* values, DType round_to) {
  Backend& be = model_.backend();
  const ParamGroup& spec = model_.layout().groups[group];
  // One staging vector for every block: a fresh one a block would be
  // gigabytes of page faults each time.
  staging_.resize(spec.numel);
  std::vector<float>& host = staging_;
  if (values) {
    constexpr size_t kChunk = size_t(1) << 22;
    parallel_for((spec.numel + kChunk - 1) / kChunk, [&](size_t c) {
      const size_t begin = c * kChunk, end = std::min(spec.numel, begin + kChunk);
      if (round_to == DType::kF32) {
        std::copy(values + begin, values + end, host.begin() + begin);
      } else {  // through the half type and back, as the CPU backend's round_group does
        std::vector<uint16_t> half(end - begin);
        convert_from_f32(half.data(), round_to, values + begin, end - begin);
        convert_to_f32(host.data() + begin, half.data(), round_to, end - begin);
      }
    });
  } else {
    be.copy_to_host(host.data(), model_.params(group), spec.numel * sizeof(float));
  }
  Block block;
  block.group = group;
  block.numel = spec.numel;
  unquantized_bytes_ += spec.numel * sizeof(float);
  auto upload = [&](const void* data, size_t bytes) {
    void* p = keep(bytes);
    be.copy_from_host(p, data, bytes);
    return p;
  };
  if (format_ == HeldFormat::kBf16) {
    std::vector<uint16_t> image(spec.numel);
    convert_from_f32(image.data(), DType::kBF16, host.data(), spec.numel);
    block.image = static_cast<const uint16_t*>(upload(image.data(), image.size() * sizeof(uint16_t)));
  }
  for (const ParamSpec& p : spec.params) {
    const float* values = host.data() + p.offset;
    if (!is_projection_weight(p.name) || p.shape.size() != 2) {
      block.kept.push_back({p.offset, p.numel, static_cast<float*>(upload(values, p.numel * sizeof(float)))});
      continue;
    }
    if (format_ == HeldFormat::kBf16) continue;  // in the image
    COHORT_ASSIGN_OR_RETURN(const quant::QuantizedWeight q,
                            quant::quantize(quantized_format(format_), p.name, values, p.shape[0], p.shape[1]));
    COHORT_ASSIGN_OR_RETURN(const quant::RowPackedWeight packed, quant::pack_rows(q));
    Projection projection;
    projection.offset = p.offset;
    projection.view = quant::view_of(packed);
    projection.view.codes = static_cast<const uint8_t*>(upload(packed.codes.data(), packed.codes.size()));
    projection.view.scales = static_cast<const float*>(upload(packed.scales.data(), packed.scales.size() * 4));
    if (!packed.zeros.empty()) {
      projection.view.zeros = static_cast<const float*>(upload(packed.zeros.data(), packed.zeros.size() * 4));
    }
    block.projections.push_back(projection);
  }
  blocks_.push_back(std::move(block));
  return Status::ok();
}

QuantizedBase::Block* QuantizedBase::block_of(int group) {
  const int first = model_.layout().block_group(0);
  if (group < first || group >= first + static_cast<int>(blocks_.size())) return nullptr;
  return &blocks_[group - first];
}

void QuantizedBase::expand(int group, bool fp32) {
  Block* b = block_of(group);
  if (!b) return;
  if (b->holds++ > 0) return;
  Backend& be = model_.backend();
  std::vector<float*>& spare = free_[b->numel];
  if (spare.empty()) {
    b->expanded = be.alloc_floats(b->numel);
  } else {
    b->expanded = spare.back();
    spare.pop_back();
  }
  if (b->image && !fp32 && matmul_operand_dtype(be.matmul_precision()) == DType::kBF16) {
    // The GEMMs read the image; what else reads the block reads the kept
    // parameters, whose values the image also holds.
    for (const Kept& k : b->kept) be.copy(b->expanded + k.offset, k.data, k.numel * sizeof(float));
    be.attach_working_weights(b->expanded, b->image, b->numel, DType::kBF16);
    b->attached = true;
  } else {
    widen(*b);
  }
  model_.set_group_buffers(group, b->expanded, model_.grads(group));
}

void QuantizedBase::widen(Block& b) {
  Backend& be = model_.backend();
  if (b.attached) {
    be.clear_working_weights(b.expanded);
    b.attached = false;
  }
  if (b.image) {
    be.cast_from_half(b.expanded, b.image, DType::kBF16, b.numel);
    return;
  }
  for (const Kept& k : b.kept) be.copy(b.expanded + k.offset, k.data, k.numel * sizeof(float));
  for (const Projection& p : b.projections) be.dequantize_rows(b.expanded + p.offset, p.view);
}

void QuantizedBase::drop(int group) {
  Block* b = block_of(group);
  if (!b) return;
  COHORT_CHECK(b->holds > 0);
  if (--b->holds > 0) return;
  if (b->attached) {
    model_.backend().clear_working_weights(b->expanded);
    b->attached = false;
  }
  model_.set_group_buffers(group, nullptr, model_.grads(group));
  free_[b->numel].push_back(b->expanded);
  b->expanded = nullptr;
}

void QuantizedBase::expand_all() {
  for (Block& b : blocks_) {
    if (b.holds >= kPinned) continue;
    if (b.attached) widen(b);  // expanded by a pass still under way
    expand(b.group, /*fp32=*/true);
    b.holds += kPinned - 1;
  }
}

ModelHooks QuantizedBase::wrap(ModelHooks inner) {
  ModelHooks hooks;
  hooks.before_forward = [this, f = inner.before_forward](int g) {
    expand(g);
    if (f) f(g);
  };
  hooks.after_forward = [this, f = inner.after_forward](int g) {
    if (f) f(g);
    drop(g);
  };
  hooks.before_backward = [this, f = inner.before_backward](int g) {
    expand(g);
    if (f) f(g);
  };
  hooks.after_backward = [this, f = inner.after_backward](int g) {
    if (f) f(g);
    drop(g);
  };
  return hooks;
}

}  // namespace cohort::models
