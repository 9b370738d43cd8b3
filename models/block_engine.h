// BlockEngine: a backend's fused implementation of whole decoder blocks for
// training, in place of the op-by-op path of model.cc / model_backward.cc.
// The CUDA backend's (models/cuda/train_blocks.cu) keeps the activations it
// saves for backward in bf16, runs one GEMM for q, k and v and one for gate
// and up (their weights are adjacent in a block's group), folds the per-head
// norms into RoPE and writes attention's gradients straight into the layout
// the next GEMM reads. The residual stream between blocks, the parameters,
// their gradients and every reduction stay fp32.
//
// The model asks for one (Backend::make_block_engine) when nothing it needs
// is missing: no tensor parallelism (the partial sums between the GEMMs),
// no attention biases, no adapter dropout; the backend refuses when its
// numerics do not fit (fp16 or fp32 GEMMs, the math attention, an
// unsupported head size). The op-by-op path stays the reference the engine
// is tested against.
//
// LoRA adapters (models/lora.h) run inside the blocks: each targeted
// projection's output gets scale · B (A x) from two skinny bf16 GEMMs, A x
// kept for backward ([N, rank] per target), and backward accumulates the
// adapters' gradients and adds their share to the input gradients. Where
// dw's tensors are null (a frozen base) the base's weight and norm
// gradients are not computed at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/param_layout.h"

namespace cohort::models {

enum class ActivationCheckpointing;

// Where a layer's adapters sit in its adapter group (the same offsets in
// every layer): A [rank, in] and B [out, rank] of each projection, indexed
// as models::LoraTarget (q, k, v, o, gate, up, down); kNoAdapter where the
// projection has none. rank 0: no adapters.
inline constexpr size_t kNoAdapter = ~size_t{0};
inline constexpr int kAdapterTargets = 7;
struct BlockAdapterShape {
  int rank = 0;
  size_t group_numel = 0;
  size_t a[kAdapterTargets] = {kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter};
  size_t b[kAdapterTargets] = {kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter, kNoAdapter};
  int targets() const {
    int n = 0;
    for (size_t offset : a) n += offset != kNoAdapter;
    return n;
  }
};

// One layer's adapters in a pass: its group's values (fp32), their
// gradients (+=; null outside training), and LoRA's scale (alpha / rank).
struct BlockAdapters {
  const float* params = nullptr;
  float* grads = nullptr;
  float scale = 0;
};

// A mixture of experts' sparse layers (models/cuda/train_experts.cuh): E
// experts of `intermediate` rows, top_k of them per token, and which layers
// are sparse. experts 0: every layer is dense.
struct BlockMoeShape {
  int experts = 0, top_k = 0, intermediate = 0;
  bool normalize_top_k = false;
  bool aux_loss = false;      // the router's load-balancing loss (its prob sums are kept)
  std::vector<bool> sparse;   // per layer
  bool sparse_layer(int l) const { return experts > 0 && l < static_cast<int>(sparse.size()) && sparse[l]; }
};

struct BlockEngineShape {
  int hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  bool qk_norm = false;
  float eps = 1e-6f;
  BlockAdapterShape lora;
  BlockMoeShape moe;
};

// The current pass: its shape (at most what reserve() was given), positions
// and the rope tables (backend memory, as the model keeps them: pos [B * T],
// cos/sin [max_seq, head_dim / 2]).
struct BlockPass {
  int B = 0, T = 0;
  const int32_t* pos = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  // Backward of a sparse layer: the load-balancing loss's gradient per
  // expert probability [E] (backend memory), or null without that loss.
  const float* moe_aux_grad = nullptr;
};

// A sparse layer's routing in the last forward, which the load-balancing
// loss reads: each expert's first sorted row [E + 1] (host) and the column
// sums of the router's probabilities [E] (backend memory; null without the
// loss). Null offsets: the layer is dense.
struct BlockMoeStats {
  const std::vector<int32_t>* offsets = nullptr;
  const float* prob_sums = nullptr;
};

// The final norm and the LM head (tied: the embedding table), with their
// gradients.
struct HeadTensors {
  const float* norm = nullptr;    // [hidden]
  const float* weight = nullptr;  // [vocab, hidden]
  float* dnorm = nullptr;
  float* dweight = nullptr;
};

class BlockEngine {
 public:
  virtual ~BlockEngine() = default;
  // Allocates what `layers` blocks need at B * T tokens of sequences of T:
  // per layer what `mode` keeps (ActivationCheckpointing), once what every
  // layer shares, and the head's logits for head_rows rows at a time (the
  // model's LM-head chunk, or B * T). Called at warm-up; again only when
  // the shape grows.
  virtual void reserve(int B, int T, int layers, ActivationCheckpointing mode, int head_rows) = 0;
  virtual size_t bytes() const = 0;
  // res_out = block l of res_in (both [B * T, hidden] fp32); `lora` is
  // layer l's adapters where the shape has them (else null).
  virtual void forward(int l, const BlockTensors& w, const float* res_in, float* res_out,
                       const BlockPass& pass, const BlockAdapters* lora) = 0;
  // kSelective: the saved-nothing parts of forward(l) again, before backward(l).
  virtual void recompute(int l, const BlockTensors& w, const float* res_in,
                         const BlockPass& pass) = 0;
  // On entry dres holds d loss / d res_out of block l, on exit d loss / d
  // res_in; dw's gradients accumulate (+=), none where dw's are null; the
  // adapters' too.
  virtual void backward(int l, const BlockTensors& w, const BlockTensors& dw, float* dres,
                        const float* res_in, const BlockPass& pass, const BlockAdapters* lora) = 0;
  // Training's head on the last block's output res [N, hidden]: per-row
  // cross-entropy losses against targets (kIgnoreIndex rows 0), the logits
  // in bf16 and head_rows rows at a time, the log-sum-exp kept for backward.
  virtual void head_forward(const HeadTensors& h, const float* res, const int32_t* targets,
                            float* losses, int N) = 0;
  // dres = d (grad_scale * sum of losses) / d res (overwritten); the head's
  // gradients accumulate (none where h's are null). Logits a chunked head no
  // longer holds are computed again.
  virtual void head_backward(const HeadTensors& h, const float* res, const int32_t* targets,
                             float grad_scale, float* dres, int N) = 0;
  virtual BlockMoeStats moe_stats(int /*l*/) const { return {}; }
};

}  // namespace cohort::models
