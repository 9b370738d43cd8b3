// The decoder-only transformer (Llama / Qwen2 / Qwen3, and the mixtures of
// experts Qwen3-MoE and Mixtral): explicit forward and backward, group by
// group, over flat parameter buffers.
//
// Building. Model::create(config, shard, backend, tp) lays out the parameters
// (param_layout.h: one flat buffer per group = embedding, each block, head)
// for tensor-parallel rank shard.tp_rank of shard.tp_size, allocates params and
// grads through the backend (zeroed), and returns the model. init_weights(seed)
// fills them deterministically: every element's value depends only on (seed,
// parameter name, global element index), so a TP shard of a model initialised
// with seed s equals the same slice of the unsharded model with seed s.
//
// Training. forward(tokens, targets, B, T) runs embedding, blocks and head and
// returns the summed loss and the count of non-ignored targets; backward(scale)
// then accumulates (+=) d(scale * loss_sum)/dparams into the grad buffers. Pass
// scale = 1 / (valid targets of the *global* batch) so that micro-batches and
// data-parallel ranks add up to the global mean exactly. zero_grads() clears.
// The same steps are public one group at a time (forward_embedding,
// forward_block(i), forward_head, backward_head, backward_block(i),
// backward_embedding), and forward()/backward() call ModelHooks around each
// group: before_forward/after_forward (gather / free sharded params for
// ZeRO-3, FSDP), before_backward/after_backward (after_backward(g) means group
// g's grads are complete for this micro-batch: all-reduce or reduce-scatter
// them). With tied embeddings the head reads the embedding group's params and
// writes its grads (gather group 0 for the head too under ZeRO-3/FSDP); the
// embedding group's after_backward still comes last, after all its grads.
//
// Parameter storage may be redirected with set_group_buffers (e.g. to a
// gathered FSDP buffer); the model then reads and writes there.
//
// Tensor parallelism. Pass the TensorParallelComm of the TP group; the model
// calls it where row-parallel outputs and column-parallel input gradients must
// be summed (tensor_parallel.h). Logits are vocab-sharded: logits() holds
// [B*T, vocab_local]. A sparse layer's experts split like the dense MLP,
// each expert's intermediate rows across the ranks; every rank routes every
// token the same way with the replicated router.
//
// Expert parallelism (ShardSpec::ep_size > 1, set_expert_parallel): the
// model holds experts / ep_size of every sparse layer's experts, under their
// global names; each layer sends its rows to their experts' ranks and takes
// the outputs back (model_moe.cc), the same routing and sums as one rank.
//
// Mixture of experts. A sparse layer (ModelConfig::is_moe_layer) routes
// each token to its top-k experts and sums their SwiGLU outputs
// (model_moe.cc, ops/moe_routing.h), dropless; with MoeConfig::aux_loss the
// training loss gains router_aux_loss_coef times transformers'
// load-balancing loss over all sparse layers of the pass, counted once per
// valid target so that the mean loss of a micro-batch is transformers'
// (cross-entropy + coef * aux), and backward follows it into the routers.
// Like transformers', it is a loss of each forward's tokens: micro-batches
// and data-parallel ranks each have their own, so a run split differently
// routes the same but balances over other token sets.
//
// Memory. Activations for a (B, T) are allocated on first use and reused; a
// larger B*T reallocates (warm-up). No allocation happens after that.
// Errors: shapes and indices are invariants (COHORT_CHECK); Status comes from
// create() (config or shard that does not split). Threading: one thread at a
// time per Model; the backend must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "models/backend.h"
#include "models/config.h"
#include "models/ops/cross_entropy.h"  // kIgnoreIndex
#include "models/param_layout.h"
#include "models/tensor_parallel.h"
#include "models/trainable_params.h"

namespace cohort::models {

// What training keeps between forward and backward. kNone: every block's
// activations. kSelective: the inputs and outputs of the GEMMs and attention
// (res, q, k, v, y, x2, g, u, the norms' rstd, attention's lse), while the
// normalised inputs (xn1, xn2), the rotated q/k and SwiGLU's output are one
// layer's buffer shared by all, recomputed by elementwise ops at the start
// of each block's backward: about a third less activation memory for no
// extra GEMM. kFull: only each block's input (res[l]), the rest one layer's
// buffers shared, the block's whole forward rerun before its backward: a
// block's worth of activations plus one vector a layer, for one more forward
// pass of the blocks. Gradients are the same in every mode (the recomputed
// values are the saved ones, op for op).
enum class ActivationCheckpointing { kNone, kSelective, kFull };
const char* to_string(ActivationCheckpointing mode);
// "none", "selective", "full"; false for anything else.
bool parse_activation_checkpointing(std::string_view name, ActivationCheckpointing* mode);

struct ModelHooks {
  std::function<void(int group)> before_forward;
  std::function<void(int group)> after_forward;
  std::function<void(int group)> before_backward;
  std::function<void(int group)> after_backward;
};

struct LossSum {
  double sum = 0;
  int64_t count = 0;
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
};

class KvCache;
class LoraAdapters;
struct Activations;
struct MoeIo;
struct MoeRoute;

class Model final : public TrainableParams {
 public:
  // kParamsOnly holds weights and nothing to train them with: no gradient
  // buffers (a weights holder that another engine copies from, or the frozen
  // base under LoRA adapters, set_lora; without adapters backward must not
  // be called on it). Gradient buffers of a 0.6B model are 2.4 GB of host
  // memory to zero.
  // kStreamedBlocks: kParamsOnly, except that every decoder block's group
  // shares one staging buffer: a loader fills a block and calls
  // group_filled(), whose listener (a quantized base, quantized_base.h)
  // takes the values before the next block overwrites them, so a base far
  // larger than memory in fp32 loads a block at a time.
  enum class Buffers { kParamsAndGrads, kParamsOnly, kStreamedBlocks };
  static Result<std::unique_ptr<Model>> create(const ModelConfig& config, const ShardSpec& shard,
                                               Backend* backend, TensorParallelComm tp = {},
                                               Buffers buffers = Buffers::kParamsAndGrads);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ShardSpec& shard() const { return shard_; }
  const LocalDims& dims() const { return dims_; }
  const ParamLayout& layout() const override { return layout_; }
  Backend& backend() const { return *backend_; }

  // Flat buffers, one per layout group (backend memory; TrainableParams).
  float* params(int group) const override { return params_[group]; }
  float* grads(int group) const override { return grads_[group]; }
  void set_group_buffers(int group, float* params, float* grads) override;
  // Frees the parameter and gradient buffers the model allocated itself, once
  // every group points elsewhere (parallel/ keeps its own, sharded ones);
  // without this a sharded model would also hold a full unsharded copy.
  void release_own_buffers() override;
  // A view (local shape, backend device) of one parameter or its gradient by
  // HF name; NotFound for names this rank's layout does not hold.
  Result<Tensor> param_view(const std::string& name) const;
  Result<Tensor> grad_view(const std::string& name) const;
  void zero_grads();
  void init_weights(uint64_t seed, float stddev = 0.02f);
  // Loaders (init_weights, hf::load_weights, checkpoint params) call this
  // after filling group `g`; a listener set here sees each group's values
  // while they are in its buffer (Buffers::kStreamedBlocks). Null: none.
  // `host`: the same values in host memory where the loader has them whole
  // (else null), so that a listener need not copy a block back from the
  // device (a 70B block is 3.4 GB in fp32); a listener that changes the
  // buffer passes null on to the one it wraps. reads_buffer false: the
  // listener reads a block's buffer only when no host copy comes with it,
  // so init_weights leaves a streamed block's staging buffer unfilled.
  using GroupFilled = std::function<void(int group, const float* host)>;
  void set_group_filled_listener(GroupFilled listener, bool reads_buffer = true) {
    group_filled_ = std::move(listener), listener_reads_buffer_ = reads_buffer;
  }
  const GroupFilled& group_filled_listener() const { return group_filled_; }
  void group_filled(int group, const float* host = nullptr) {
    if (group_filled_) group_filled_(group, host);
  }

  // Training: the whole pass, with hooks.
  void set_hooks(ModelHooks hooks) { hooks_ = std::move(hooks); }
  const ModelHooks& hooks() const { return hooks_; }
  // Takes effect at the next forward (the activation arena is re-planned).
  void set_activation_checkpointing(ActivationCheckpointing mode);
  // The LM head and cross-entropy in chunks of `tokens` rows (0: all rows
  // at once), so that the [B*T, vocab] fp32 logits never exist whole: at
  // micro-batch 8 x 1024 and a 151,936 vocabulary they are 5 GB, a chunk of
  // 1,024 rows 0.6 GB. backward_head computes each chunk's logits again (one
  // more LM-head GEMM a step). A chunked forward needs targets, and logits()
  // then holds only its last chunk. Re-plans the arena like the above.
  void set_lm_head_chunk_tokens(int tokens);
  ActivationCheckpointing activation_checkpointing() const { return checkpointing_; }
  // Whether training may run the backend's fused blocks (block_engine.h)
  // where it has them; on by default (COHORT_TRAIN_BLOCKS=ops turns it off
  // through worker/debug_switches.h). Off,
  // every block runs op by op. Takes effect at the next forward.
  void set_fused_blocks(bool on);
  // Whether a mixture of experts' sparse layers may run inside the fused
  // blocks too (models/cuda/train_experts.cuh) when its experts are not
  // split over ranks and it trains no LoRA adapters; on by default
  // (COHORT_TRAIN_BLOCKS=dense turns it off); otherwise the sparse layers
  // run op by op. Takes effect at the next forward.
  void set_fused_moe_blocks(bool on);
  // True when the last forward's blocks ran fused.
  bool runs_fused_blocks() const { return engine_ != nullptr; }
  // Low-rank adapters on the block projections (lora.h), or null. Every
  // block (training, evaluation, KV decode) adds their terms; the fused
  // CUDA blocks take adapters without dropout (two skinny GEMMs an adapted
  // projection), dropout runs the blocks op by op. A base without
  // gradient buffers (Buffers::kParamsOnly) is frozen: backward computes the
  // input gradients and the adapters' only. Borrowed; takes effect at the
  // next forward.
  void set_lora(LoraAdapters* lora);
  // Expert parallelism: the expert group's exchange (tensor_parallel.h),
  // required before the first forward when shard().ep_size > 1.
  void set_expert_parallel(ExpertParallelComm ep) { ep_ = std::move(ep); }
  LoraAdapters* lora() const { return lora_; }
  // Several adapters over one base, by rows (serving many adapters, one per
  // sequence): until cleared, forwards add each run's adapters' terms to its
  // rows only (a null adapter: the base alone) instead of set_lora's to
  // every row. Inference passes only: backward knows one adapter set.
  struct LoraRows {
    LoraAdapters* adapters = nullptr;
    int first = 0, count = 0;
  };
  void set_lora_rows(std::vector<LoraRows> runs) { lora_rows_ = std::move(runs); }
  LossSum forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  void backward(float grad_scale);

  // Training: one group at a time. tokens/targets are host pointers
  // [B*T]; targets may be null for logits only.
  void forward_embedding(const int32_t* tokens, const int32_t* targets, int B, int T);
  void forward_block(int layer);
  LossSum forward_head();
  void backward_head(float grad_scale);
  void backward_block(int layer);
  void backward_embedding();
  // [B*T, vocab_local] fp32 logits of the last forward_head that computed
  // them (backend memory; with LM-head chunking only the last chunk's rows):
  // every forward without targets, and training forwards on the op-by-op
  // path (the fused head keeps its logits in bf16, to itself). backward_head
  // overwrites them with their gradient.
  const float* logits() const;
  // Bytes of activation and inference scratch allocated so far, LoRA's
  // included (the largest (B, T) seen): the "peak activations" line of a
  // memory report.
  size_t activation_bytes() const;

  // Inference with a KV cache (kv_cache.h). prefill appends n tokens to one
  // slot; decode appends one token to each of B slots. Both write the
  // full-vocabulary logits of each sequence's last token to host memory:
  // [vocab] for prefill, [B, vocab] for decode.
  void prefill(KvCache& cache, int slot, const int32_t* tokens, int n, float* logits_host);
  // Several prompts in one pass (distinct slots): logits [prompts, vocab].
  void prefill_batch(KvCache& cache, const std::vector<int>& slots,
                     const std::vector<std::vector<int32_t>>& prompts, float* logits_host);
  void decode(KvCache& cache, const int* slots, const int32_t* tokens, int B, float* logits_host);

 private:
  Model(const ModelConfig& config, const ShardSpec& shard, const LocalDims& dims,
        ParamLayout layout, Backend* backend, TensorParallelComm tp, Buffers buffers);
  // fp32_head: the LM head's fp32 buffers (logits of a forward without
  // targets) even where fused blocks run the training head.
  void ensure_activations(int B, int T, bool fp32_head);
  void tp_sum(float* data, size_t n);
  void block_attention_backward(int layer, const BlockTensors& w, const BlockTensors& dw);
  void block_mlp_backward(int layer, const BlockTensors& w, const BlockTensors& dw);
  // Sparse layers (model_moe.cc): out [N, H] = the mixture of experts of the
  // normalised x [N, H] (this rank's slice of each expert under tensor
  // parallelism: a partial sum, as the dense MLP's down projection), and its
  // backward from acts_->dres into dtmp (before tp_sum) and the router's.
  void moe_forward(const BlockTensors& w, const MoeIo& m, const float* x, float* out, int N);
  void block_moe_backward(int layer, const BlockTensors& w, const BlockTensors& dw);
  // The route of a layer's sorted rows from its offsets (on the host):
  // without expert parallelism one chunk per expert; with it the counts are
  // exchanged over the expert group (`counts`: backend scratch).
  void plan_moe_route(MoeRoute& route, float* counts);
  // rows of `width` floats from `send` to the expert group's ranks by
  // send_rows, into `recv` by recv_rows.
  void exchange_rows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                     const std::vector<size_t>& recv_rows, int width);
  // forward_head's share of the load-balancing loss over every sparse layer
  // of the pass, and backward_head's scaling of its gradient.
  void add_router_aux_loss(LossSum* loss);
  void prepare_router_aux_grad(float grad_scale);
  Result<Tensor> view(const std::string& name, const std::vector<float*>& buffers) const;
  float* embedding_table() const { return params_[ParamLayout::kEmbedGroup]; }
  float* lm_head_weight() const;
  float* lm_head_grad() const;
  struct Segment {
    int slot, first_pos, count;
  };
  void forward_incremental(KvCache& cache, const std::vector<Segment>& segments,
                           const int32_t* tokens, float* logits_host);
  void incremental_block(KvCache& cache, const std::vector<Segment>& segments, int N, int layer);
  void gather_vocab_logits(int rows, float* logits_host);

  ModelConfig config_;
  ShardSpec shard_;
  LocalDims dims_;
  ParamLayout layout_;
  Backend* backend_;
  TensorParallelComm tp_;
  ExpertParallelComm ep_;
  ModelHooks hooks_;
  std::vector<float*> params_, grads_;
  std::vector<float*> owned_;  // what this model allocated and frees
  float* rope_cos_ = nullptr;
  float* rope_sin_ = nullptr;
  std::unique_ptr<Activations> acts_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::kNone;
  int head_chunk_ = 0;  // set_lm_head_chunk_tokens
  bool fused_blocks_ = true;
  bool fused_moe_blocks_ = true;  // set_fused_moe_blocks
  std::unique_ptr<BlockEngine> engine_;  // made by ensure_activations
  LoraAdapters* lora_ = nullptr;         // set_lora
  std::vector<LoraRows> lora_rows_;      // set_lora_rows
  GroupFilled group_filled_;  // set_group_filled_listener
  bool listener_reads_buffer_ = true;
  float* staging_ = nullptr;  // Buffers::kStreamedBlocks: the blocks' one buffer
  BlockPass block_pass() const;
  HeadTensors head_tensors() const;
  // forward_head's op-by-op path: fp32 logits (and losses with targets).
  void head_logits_fp32();
  // kSelective: the elementwise ops of block l's forward whose outputs were
  // not kept (forward_block's, in its order).
  void recompute_block_elementwise(int l);
  // Where one block's op-by-op forward reads and writes: training keeps a
  // set per layer (backward reads them), KV decode shares one set and works
  // in place (q == qr, x == x2 == out).
  struct BlockIo {
    const float* x;  // the block's input
    float *xn1, *rstd1, *q, *k, *v, *qr, *kr, *rstd_q, *rstd_k, *y, *tmp, *x2, *xn2, *rstd2, *g,
        *u, *h, *out;
    const int32_t* pos;  // each row's position
    const MoeIo* moe;    // a sparse layer's (g, u, h unused), else null
  };
  BlockIo training_block_io(int l) const;
  // The decoder block, op by op, for N rows: the one definition that
  // training's forward and KV decode share. `attend` fills io.y from io.qr,
  // io.kr and io.v (causal attention over the batch, or over a cache).
  void block_forward(int layer, const BlockTensors& w, const BlockIo& io, int N,
                     const std::function<void()>& attend);
  // io.qr, io.kr = RoPE of q, k (after Qwen3's per-head norms).
  void rotate_qk(const BlockTensors& w, const BlockIo& io, int N);
  std::vector<float> host_logits_;  // staging for TP gathers and losses
  std::vector<int32_t> host_pos_;
};

}  // namespace cohort::models
