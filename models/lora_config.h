// LoRA's configuration: which block projections get low-rank adapters, their
// rank and scale, dropout, initialisation and how the frozen base is held,
// in PEFT's vocabulary (LoraConfig, adapter_config.json), so that adapters
// move between cohort and transformers + PEFT unchanged. The adapters
// themselves (buffers, forward, backward) are lora.h's.
//
// A targeted projection W [out, in] of every layer gets A [rank, in] and
// B [out, rank]; the layer computes W x + scale · B A dropout(x), with
// scale = alpha / rank (alpha / sqrt(rank) for rank-stabilised LoRA).
// CPU only and free of the model's buffers: the control plane prints plans
// from it (`cohort validate`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "models/config.h"

namespace cohort::models {

// The decoder block's projections, in the order a block runs them.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr LoraTarget kAllLoraTargets[] = {
    LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
    LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};
// PEFT's target module name: "q_proj" ... "down_proj".
const char* peft_module_name(LoraTarget target);
// The module inside a Hugging Face decoder layer: "self_attn.q_proj", "mlp.down_proj".
const char* hf_module_path(LoraTarget target);
// "q_proj" ... "down_proj"; false for anything else.
bool parse_lora_target(std::string_view name, LoraTarget* target);
// Column-parallel projections (q, k, v, gate, up: W's rows are split under
// tensor parallelism); o and down are row-parallel (W's columns split).
bool is_column_parallel(LoraTarget target);

// How A starts; B always starts at zero, so a fresh adapter leaves the base
// model's outputs unchanged.
enum class LoraInit {
  kKaimingUniform,  // PEFT's default (init_lora_weights = true): nn.Linear's
                    // kaiming_uniform_(a = sqrt(5)), uniform in ±1/sqrt(in)
  kGaussian,        // init_lora_weights = "gaussian": N(0, (1/rank)²)
};
const char* to_string(LoraInit init);  // "kaiming_uniform", "gaussian"
struct LoraConfig;
// The job file's base_dtype spelling of a config: "bf16", "fp32", "nf4", "fp8".
const char* base_dtype_name(const LoraConfig& lora);

struct LoraConfig {
  // The largest rank an adapter file may declare: buffers are sized from it.
  static constexpr int kMaxRank = 1 << 16;
  int rank = 8;
  double alpha = 8.0;
  double dropout = 0.0;  // on the adapters' input, training passes only
  std::vector<LoraTarget> targets = {LoraTarget::kQ, LoraTarget::kV};  // block order, no repeats
  bool use_rslora = false;
  LoraInit init = LoraInit::kKaimingUniform;
  // The frozen base's precision: kBF16 rounds its weights to bf16 when the
  // model loads (numerically a bf16 base) and holds its blocks' projections
  // in bf16, 2 bytes a parameter (models/quantized_base.h); kF32 keeps them
  // as loaded, resident in fp32.
  DType base_dtype = DType::kBF16;
  // QLoRA: the base's block projections held quantized, NF4 (with double
  // quantization, blocks of 64) or FP8 (128 x 128 block scales), and
  // expanded a block at a time while it runs (models/quantized_base.h); the
  // rest of the base (embeddings, norms, LM head) is base_dtype's.
  enum class BaseFormat { kPlain, kNf4, kFp8 };
  BaseFormat base_format = BaseFormat::kPlain;

  // alpha / rank, or alpha / sqrt(rank) with use_rslora.
  float scale() const;
  bool has_target(LoraTarget target) const;
  // A rank in [1, kMaxRank], a positive alpha, dropout in [0, 1), at least
  // one target and no repeats, base bf16 or fp32.
  Status validate() const;
};

// From the job file's spellings: target modules as PEFT names (in any order;
// kept in block order) or the one name "all-linear"; init "kaiming_uniform"
// or "gaussian"; base_dtype "bf16", "fp32", "nf4" or "fp8" (the last two a
// quantized base over bf16). Errors name the value at fault.
Result<LoraConfig> make_lora_config(int rank, double alpha, double dropout,
                                    const std::vector<std::string>& target_modules, bool use_rslora,
                                    const std::string& init, const std::string& base_dtype);

// W's [out, in] in the unsharded model.
struct ProjectionShape {
  int64_t out = 0, in = 0;
};
ProjectionShape projection_shape(const ModelConfig& config, LoraTarget target);

// The values the adapters train: layers × Σ over targets rank · (in + out).
int64_t lora_parameter_count(const ModelConfig& config, const LoraConfig& lora);

// An adapter tensor's name in a PEFT folder (adapter_model.safetensors):
// "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"; `a`
// selects lora_A, else lora_B.
std::string peft_tensor_name(int layer, LoraTarget target, bool a);

// One line for logs and plans: "rank 8, alpha 16 (scale 2), dropout 0.05 on
// q_proj, v_proj; A kaiming_uniform, B zero; frozen base bf16".
std::string describe(const LoraConfig& lora);

}  // namespace cohort::models
