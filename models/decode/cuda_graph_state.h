// The CudaGraphEngine class, private to cuda_graph_engine.cc (creation,
// weights, buffers), cuda_graph_rows.cc (what each call puts in the row
// buffers), cuda_graph_step.cc (the forward step and its graphs) and
// cuda_graph_ahead.cc (steps launched ahead of reading the last).
// Its kernels are the models library's decode ops (models/ops/, each beside
// its CPU reference); its collectives are the callbacks of the
// tensor-parallel group it is given (models/tensor_parallel.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <deque>
#include <initializer_list>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "models/decode/cuda_graph_ahead.h"
#include "models/decode/cuda_graph_engine.h"
#include "models/decode/cuda_tuned_gemm.h"
#include "models/decode/host_layer.h"
#include "models/ops/argmax.h"
#include "models/decode/kv_blocks.h"
#include "models/ops/decode_attention.h"
#include "models/ops/decode_rows.h"
#include "models/ops/embedding.h"
#include "models/ops/gemv.h"
#include "models/ops/lora_rows.h"
#include "models/ops/moe_experts.h"
#include "models/ops/quant_gemv.h"
#include "models/lora.h"
#include "models/param_layout.h"
#include "models/ops/prefill_attention.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/rope.h"
#include "models/ops/swiglu.h"

namespace cohort::models::decode {

// Device bytes of one projection [rows, cols] stored as `format` (unset:
// bf16), scales and zero points included (cuda_graph_quant.cc).
size_t projection_bytes(const std::optional<models::quant::WeightFormat>& format, size_t rows, size_t cols);

// Rows a sparse layer takes at once out of a forward of `rows`: its
// buffers hold k (token, expert) pairs a row, at most 8,192 pairs.
inline size_t moe_chunk_rows(size_t rows, size_t k) {
  return std::max<size_t>(1, std::min(rows, size_t{8192} / std::max<size_t>(k, 1)));
}

// A small fp32 table host -> device on `stream` (after the allocation's
// zeros), synchronised.
Status upload_f32(float* dst, const std::vector<float>& host, cudaStream_t stream);

// Batch sizes decode steps are padded to (and captured at); the last one
// holds `slots`.
std::vector<int> decode_buckets(int slots);

using Bf16 = models::Bf16Bits;

// The row index buffers' parts of R ints each: tokens, slots, positions,
// two for the prefill attention's tiles (prefill_attention.h), and for a
// step launched ahead each row's token source (take_tokens in argmax.h).
inline constexpr int kTokenSourcePart = 5;
inline constexpr int kRowIndexParts = 6;

class CudaGraphEngine final : public InferenceEngine {
 public:
  CudaGraphEngine(const models::ModelConfig& config, const models::LocalDims& dims,
                  const CudaEngineOptions& options)
      : config_(config), dims_(dims), options_(options), tp_(options.shard.tp_size),
        layers_(config.layers) {}
  ~CudaGraphEngine() override;

  int vocab_size() const override { return config_.vocab_size; }
  int slots() const override { return options_.slots; }
  int capacity() const override { return options_.capacity; }
  std::string describe() const override;
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override;
  void decode(const int* slots, const int32_t* tokens, int B, float* logits,
              int32_t* greedy) override;
  // Packs the prompts into one forward (several when they exceed the row
  // buffers); the LM head runs on each prompt's last row, gathered.
  void prefill_many(const int* slots, const std::vector<const std::vector<int32_t>*>& prompts,
                    float* logits, int32_t* greedy) override;
  // Chunked prefill: rows are independent (each at its own slot and
  // position, attending over the cache), so a chunk is a prefill whose
  // positions start at the slot's length.
  bool can_extend() const override { return true; }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override;
  // Decode rows and prompt chunks as one eager forward (decode rows first,
  // their attention the decode kernel's, the chunks' the prefill tiles');
  // a step of decode rows only is decode(), replayed from its graph.
  void step(const int* decode_slots, const int32_t* decode_tokens, int d, const std::vector<Chunk>& chunks,
            float* logits, int32_t* greedy) override;
  int max_step_rows() const override { return max_rows_; }
  int reuse_prefix(int slot, const int32_t* tokens, int n) override;
  bool caches_prefixes() const override { return options_.prefix_caching; }
  // One forward of d decode rows and chunks [begin, end), which fit the row
  // buffers; outputs from row 0 of logits/greedy.
  void forward_rows(const int* decode_slots, const int32_t* decode_tokens, int d, const std::vector<Chunk>& chunks,
                    size_t begin, size_t end, float* logits, int32_t* greedy);
  // Running ahead (cuda_graph_ahead.cc) at tp 1: a step's rows are staged
  // and enqueued, their picks copied to a pinned buffer of their own, and
  // collect() waits for that copy alone; decode rows fed by the previous
  // step take its picks on the device (take_tokens). A step of several
  // forwards runs at once (its fed tokens read on the host first).
  bool can_run_ahead() const override { return tp_ == 1; }
  bool launch(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
              const std::vector<Chunk>& chunks) override;
  void collect(int32_t* greedy) override;
  int kv_block_size() const override { return kKvBlockSize; }
  int64_t kv_blocks() const override { return pool_ ? pool_->total() : 0; }
  int64_t kv_free_blocks() const override { return pool_ ? pool_->free() : 0; }
  void release(int slot) override;
  // Served LoRA adapters (CudaEngineOptions::lora; cuda_graph_lora.cc):
  // each sequence's rows add its adapter's delta after every projection it
  // targets, in the same forward and graphs as the others'.
  int adapters() const override { return static_cast<int>(lora_.table_of.size()); }
  void set_adapter(int slot, int index) override;
  models::Model* adapter_base() override { return base_.get(); }
  int add_adapter(std::unique_ptr<models::LoraAdapters> adapters) override;
  void remove_adapter(int index) override;

  Status init_runtime(const models::EnqueuedTensorParallelFactory& make_tp);
  // Times cuBLASLt's candidates for every decode bucket it may serve, on
  // scratch memory (cuda_graph_warmup.cc); needs only init_runtime.
  Status tune_projections();
  // Its FP8 part, on tune_projections' scratch (cuda_graph_warmup.cc).
  Status tune_fp8_projections(const std::vector<int>& buckets, void* w, size_t weight_bytes, void* x, void* y,
                              int* tuned);
  // The embedding, head and final norm from `model`, each layer from its
  // host copy (host_layer.h; freed as it is uploaded).
  Status upload_weights(models::Model& model, std::vector<HostLayer>& layers);
  Status alloc_buffers();
  // The weights-only model the engine loaded from, its buffers released:
  // what LoRA adapters are made for (adapter_base()). Only with options.lora.
  void keep_base(std::unique_ptr<models::Backend> backend, std::unique_ptr<models::Model> model);
  // Runs every step shape once before the first request, into the spare
  // slot: a few prefill sizes eagerly, and each decode bucket (eager, then
  // captured when graphs are on), after tune_projections. The first use of
  // a shape otherwise pays for CUDA's lazy kernel loading, cuBLAS's
  // algorithm choice and the capture inside a request's time to first token.
  void warm_up();

 private:
  // A projection's weight: bf16 [out, in], or (pack_projections) its
  // row-packed codes (models/ops/quant_gemv.h), which the quantized GEMV
  // reads at up to kQuantGemvMaxRows rows, the quantized skinny GEMM up to
  // 64, and larger forwards first expand into bf16 (expanded_).
  struct Weight {
    Bf16* bf16 = nullptr;
    models::RowPackedView packed{};
    // e4m3 codes in 128 x 128 blocks: their scales as the FP8 GEMM reads
    // them (quant::fp8_block_scales), for forwards beyond the GEMV's rows.
    const float* fp8_scales = nullptr;
    bool quantized() const { return packed.codes != nullptr; }
  };
  struct Layer {
    Weight wqkv, wo, wgu, wdown;  // wgu, wdown: dense layers only
    // A sparse layer's router [E, H] and experts, stacked: gate rows then up
    // rows of each [E, 2 Ie, H], down [E, H, Ie] (models/ops/moe_experts.h).
    bool sparse = false;
    Bf16 *router = nullptr, *experts_gu = nullptr, *experts_down = nullptr;
    float *attn_norm = nullptr, *mlp_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    float* qkv_bias = nullptr;
    // bf16 or e4m3 codes (options.kv_dtype); an fp8 cache's scales and its
    // calibration maxima, [2, kv_heads] each (K's, then V's).
    void *k_cache = nullptr, *v_cache = nullptr;
    float *kv_scales = nullptr, *kv_amax = nullptr;
  };
  struct Buffers {
    float* x;            // [R, H] residual stream
    Bf16* xn;      // [R, H] normalised, GEMM input
    float* qkv;          // [R, Qd + 2 KVd]
    float* q;            // [R, Qd] after norm and RoPE
    Bf16* y;       // [R, Qd] attention output
    float* tmp;          // [R, H] o_proj / down_proj output
    float* gate_up;      // [R, 2I]
    Bf16* h;       // [R, I]
    float* logits;       // [B, V_local]
    float* gathered;     // [tp, B, V_local]
    float* pairs;        // [B, 2] local argmax
    float* pairs_all;    // [tp, B, 2]
    int32_t* tokens;     // [B] greedy picks
    int32_t* rows;       // [kRowIndexParts, R] tokens, slots, positions, then a prefill's
                         // attention tiles (up to R (first row, count) pairs)
    int32_t* head_rows;  // [B] rows the LM head reads in a packed prefill
    Bf16* head_x;  // [B, H] those rows, gathered
    float* sumsq;  // [B, H / 64] a folded norm's chunk sums (FoldedNorm, gemv.h)
  };
  // A sparse layer's buffers, for up to moe_rows_ rows at a time (C): the
  // router's logits [C, E] (probabilities in place), each row's k experts and
  // weights [C, k], the pairs sorted by expert (offsets [E + 1], source rows
  // and slots [C k]), the experts' SwiGLU outputs [C k, Ie] and down
  // projections [C k, H].
  struct MoeBuffers {
    float* logits = nullptr;
    int32_t* experts = nullptr;
    float* weights = nullptr;
    int32_t *offsets = nullptr, *source_rows = nullptr, *slots = nullptr;
    Bf16* h = nullptr;
    float* ys = nullptr;
  };
  MoeBuffers moe_{};
  // Served adapters: device tables of each (layer, target, table slot)'s A
  // and B, each slot's rank and scale, each row's slot (-1: none) and the
  // rows sorted by slot (lora_rows_by_adapter); their host mirrors
  // (host_rows: both, pinned), each slot's
  // device memory, each adapter index's slot (-1 once removed) and each
  // sequence slot's adapter index.
  struct LoraTables {
    bool on = false;
    const Bf16** a = nullptr;
    const Bf16** b = nullptr;
    int32_t* ranks = nullptr;
    float* scales = nullptr;
    int32_t* rows = nullptr;
    int32_t* order = nullptr;  // rows + R
    std::vector<const Bf16*> host_a, host_b;
    std::vector<int32_t> host_ranks;
    std::vector<float> host_scales;
    int32_t* host_rows = nullptr;  // pinned [2R]: rows, then order
    std::vector<std::vector<void*>> memory;
    std::vector<int> table_of;
    std::vector<int> slot_adapter;
    // A prompt step's runs of at least run_rows consecutive rows of one
    // adapter (a prompt's rows, stage_lora_rows) take the run kernels
    // (lora_runs_bf16) in tiles of kLoraRunTileRows, and are staged to the
    // per-row kernel as rows without one: its 16-row tiles each read the
    // adapter's whole B and shrink x again.
    int32_t* run_tiles = nullptr;       // device [R, 3]: first row, rows, slot
    int32_t* host_run_tiles = nullptr;  // pinned mirror
    int run_tile_count = 0;
    float* run_t = nullptr;  // [R, kLoraRunScratchStride]: the runs' shrunk rows
    // The rows the per-row kernel serves in a prompt step: its row order
    // puts them first, so it launches over them alone (-1: every row, as a
    // decode step, whose graph replays for whatever rows come).
    int kernel_rows = -1;
    // 0: none (options.overrides.lora_run_rows). On the 8B shape (an H100,
    // bench/RESULTS.md) a 2,048-row run is 5 ms sooner to its first token
    // through the run kernels, 512-row runs slower than the per-row kernel.
    int run_rows = 1024;
    // The dense form (models/ops/lora_rows.h, lora_dense_bf16) for prompt
    // steps, and decode steps of decode_rows or more, while the loaded
    // adapters' ranks sum to at most kLoraDenseMaxColumns: their A and B
    // side by side per layer, rebuilt whenever an adapter comes or goes
    // (rebuild_lora_dense, which also drops the captured decode graphs
    // that read the old matrices). Smaller decode steps keep the per-row
    // kernel, whose graphs read the tables.
    struct Dense {
      bool allowed = true;         // options.overrides.lora_dense
      int decode_rows = INT_MAX;   // lora_dense_decode_rows
      bool step = false;    // the staged step takes it
      int columns = 0;      // 0: not built (no adapter, or too many columns)
      std::vector<const Bf16*> a, b;  // [layers × 7]: a group's A and B, by its first target
      void* memory = nullptr;
      int32_t* column = nullptr;  // device [kGraphLoraSlots]: each slot's first column
      float* t = nullptr;         // [R, kLoraMaxTargets · kLoraDenseMaxColumns]
      Bf16* masked = nullptr;     // as many bf16
      cublasContext* blas = nullptr;
      // A projection's shrink and mask run ahead of it on a stream of their
      // own (both read only the projection's input), its expand after it:
      // the fork and join events and the (layer, first target) entry whose
      // shrink is ahead (SIZE_MAX: none). side null: one stream
      // (options.overrides.lora_side_stream).
      cudaStream_t side = nullptr;
      cudaEvent_t fork = nullptr, join = nullptr;
      size_t ahead = SIZE_MAX;
      bool ahead_expanded = false;  // and its expand (lora_shrink_ahead's expand_into)
    } dense;
  };
  LoraTables lora_;
  std::unique_ptr<models::Backend> base_backend_;
  std::unique_ptr<models::Model> base_;
  Status alloc_lora();
  void upload_lora_tables();
  void rebuild_lora_dense();
  // y [n, out] (row stride y_stride) += each row's adapter delta for
  // `target` of `layer`, x [n, in] the projection's input.
  void enqueue_lora(int layer, models::LoraTarget target, float* y, int y_stride, const Bf16* x, int in, int out,
                    int n);
  // The same for `count` consecutive targets from `first` that read the same
  // x (q, k and v; gate and up), in one launch: y's columns are the
  // targets' outputs side by side, of the given widths. in_sumsq: x is a
  // folded norm's unscaled input (the layers' folded form), these its sums.
  void enqueue_lora(int layer, models::LoraTarget first, int count, float* y, int y_stride, const Bf16* x, int in,
                    std::initializer_list<int> widths, int n, const float* in_sumsq = nullptr);
  // In the dense form, the shrink and mask of enqueue_lora(layer, first,
  // count, …) begun now on the side stream, before the projection that
  // reads the same x; that enqueue_lora then only waits and expands. With
  // expand_into (one target of `out` outputs, row stride out), the expand
  // adds there on the side stream too, and enqueue_lora only waits: for a
  // delta that may join the residual stream x while the projection writes
  // elsewhere (its partial sums into tmp, at one rank).
  void lora_shrink_ahead(int layer, models::LoraTarget first, int count, const Bf16* x, int in, int n,
                         const float* in_sumsq = nullptr, float* expand_into = nullptr, int out = 0);
  models::cuda::LoraDense lora_dense_at(size_t entry) const;
  bool lora_dense_shrunk(size_t entry, const models::cuda::LoraDense& dense, const Bf16* x, int in, int count, int n,
                         const float* in_sumsq);
  // The LoRA kernels' view of a projection's input: a folded norm's sums
  // (in_sumsq, null where x is normalised) and the model's epsilon.
  models::cuda::LoraInputNorm lora_input_norm(const float* in_sumsq) const;
  // In the dense form, buf_.h = the activation of buf_.gate_up (the base's
  // sums) plus layer's gate and up deltas of buf_.xn, in one pass; false
  // (nothing done) where the step or the layer does not take it.
  bool lora_dense_swiglu(int layer, int n, const float* in_sumsq);
  // Staging's part for the adapters: each row's table slot, the runs' tiles
  // (`gathered`: a prompt step, never captured), the rows by slot.
  void stage_lora_rows(int n, bool gathered);
  int moe_rows_ = 0;  // rows a sparse layer takes at once (0: a dense model)
  // `out` [n, H] += the sparse layer's MLP of buf_.xn, moe_rows_ rows at a time.
  void enqueue_moe(const Layer& L, int n, float* out, bool norm_in_router = false);

  Result<void*> device_alloc(size_t bytes);
  // Enqueues the whole step for `n` rows already in the row buffers; the
  // head runs on rows [0, head_count), or with `gathered` on the head_count
  // rows listed in buf_.head_rows.
  void enqueue_step(int n, int head_count, bool gathered);
  // decode_step: one row per slot (each at its own next position), which
  // lets attention prepare q/k/v itself (decode_attention_fused).
  void enqueue_layers(int n, bool decode_step);
  enum class Projection { kGemv, kSkinny, kCublasLt };
  Projection projection(int n, int in) const;
  // `norm`: only on the tile projections (projection() kSkinny, 9 to 64 rows).
  void gemm(float* y, const Bf16* x, const Weight& w, int n, int in, int out,
            models::cuda::GemvOutput output = models::cuda::GemvOutput::kStore,
            const models::cuda::FoldedNorm& norm = {});
  void gemm_bf16(float* y, const Bf16* x, const Bf16* w, int n, int in, int out,
                 models::cuda::GemvOutput output, const models::cuda::FoldedNorm& norm);
  // buf_.h = SwiGLU(x · w_gate/upᵀ).
  void gate_up_swiglu(const Bf16* x, const Weight& w, int n, int in, int I,
                      const models::cuda::FoldedNorm& norm = {});
  // The same with layer l's served adapters, whose gate and up deltas join
  // before the activation (norm: the folded form's, whose sums they scale by).
  void gate_up_lora_swiglu(int l, const Layer& L, int n, const models::cuda::FoldedNorm& norm = {});
  // Whether a quantized weight's projection of n rows takes the tensor-core
  // skinny GEMM over its codes (models/ops/quant_gemv.h, 9 to 64 rows,
  // where projection() picks the skinny family: warm-up measures it against
  // expanding for cuBLASLt per decode bucket).
  bool quant_skinny(const Weight& w, int n, int in) const;
  // The weight as bf16: itself, or its codes expanded into expanded_ (for
  // forwards the quantized GEMV does not serve).
  const Bf16* bf16_for(const Weight& w);
  Status upload_packed(Weight& weight, const models::quant::RowPackedWeight& w);
  // The FP8 tensor-core path (cuda_graph_quant.cc): whether a projection of
  // n rows takes it, and the projection itself, y = or += x · Wᵀ with x
  // quantized per row and 128 columns first (models/ops/fp8_rows.h).
  bool fp8_gemm(const Weight& w, int n) const;
  void norm_into_xn(const float* delta, const float* weight, int n, const Weight* next);
  void gemm_fp8(float* y, const Bf16* x, const Weight& w, int n, int in, int out, bool accumulate);
  // Whether cuBLASLt multiplies the FP8 weights (probed in alloc_buffers:
  // Hopper and a cuBLASLt with block scaling), and the activations' codes
  // [R, widest input] and scales [widest input / 128, R] for it.
  bool fp8_weights_ = false, fp8_gemm_ready_ = false;
  uint8_t* fp8_x_ = nullptr;
  float* fp8_x_scales_ = nullptr;
  // The activations fp8_x_ already holds (the SwiGLU or a norm coded
  // buf_.h or buf_.xn in its pass, for the projection right after), which
  // that gemm_fp8 then does not quantize again, and resets. Host state
  // while a step is enqueued.
  const Bf16* fp8_x_holds_ = nullptr;
  std::string packed_format_;  // the first packed weight's, for describe(); "" when none
  bool quantized_ = false;     // some projection is packed: no norm-folding GEMV forms
  Bf16* expanded_ = nullptr;  // [largest projection] bf16, for quantized weights beyond the GEMV's rows
  void enqueue_attention(const Layer& L, int n, bool decode_step);
  // The layer's cache as the kernels take it (with its maxima while calibrating).
  models::KvView kv_view(const Layer& L) const;
  bool calibrating_ = false;
  // The fp8 cache's scales (models/ops/kv_fp8.h): one prefill of a
  // calibration prompt into slot 0, every head's largest value collected,
  // each scale made from it; the slot is given back. First in warm_up().
  void calibrate_kv_scales();
  std::vector<float> kv_scales_host_;  // [layers, 2, kv_heads], for the log and tests
  // A prefill's rows in runs of one slot at consecutive positions go
  // through the flash-style prefill attention (prefill_attention.h) where
  // the head size allows: tile_count_ tiles, listed at part 3 of the row
  // index, set by run() for every step that is not a decode step.
  bool prefill_tiles_ = false;
  int tile_count_ = 0;
  int tile_longest_ = 0;  // positions the last row of the longest tile sees
  models::cuda::PrefillAttentionScratch prefill_scratch_{};  // its split over the keys
  int decode_rows_ = 0;  // a mixed step's leading decode rows (step()); 0 otherwise
  std::vector<int32_t> tiles_;
  // Whether a decode step of n rows folds its RMSNorms into the tile
  // projections (one rank, every projection on the tiles), or into the
  // quantized GEMV's (one rank, up to 8 rows, every projection quantized on
  // its tensor-core form, no adapters); norm_chunk(): the columns of the
  // chain's sums.
  bool folds_norms(int n) const;
  bool quant_folds_norms(int n) const;
  int norm_chunk() const;
  // Folded decode steps of more rows than this run the LM head on cuBLASLt.
  static constexpr int kTileHeadMaxRows = 32;
  // The layers of such a step: no norm kernels (FoldedNorm, gemv.h).
  void enqueue_folded_layers(int n);
  // Decode steps up to this many rows prepare q/k/v inside attention
  // (decode_attention_fused): one kernel a layer fewer
  // (options.overrides.fused_attention_rows overrides it).
  int fused_attention_rows_ = 64;
  // The decode attention's kernel (options.overrides.attention) (default: the
  // tensor cores where the head size allows).
  models::cuda::DecodeAttentionForm attention_form_ = models::cuda::DecodeAttentionForm::kAuto;
  void all_reduce(float* data, size_t count);
  void all_gather(const float* send, float* recv, size_t count, const char* what);
  // Waits for everything on the stream, at tp > 1 no longer than
  // the group's timeout (then fatal, naming `what`).
  void wait_step(const char* what);
  // Host rows -> device, run (graph or eager), fetch results; synchronises.
  void run(int n, int head_count, int real_rows, bool use_graph, bool gathered, float* logits,
           int32_t* greedy);
  // run()'s first part: the table and rows uploaded (with `fed`, each
  // row's token source, then take_tokens), `after_staging` recorded once
  // the pinned staging buffers have been read, the step enqueued (a
  // graph's replay, eager, or its capture). `events`: begin, staged and
  // end for the timer.
  StepTiming enqueue_run(int n, int head_count, bool use_graph, bool gathered, bool fed, cudaEvent_t after_staging,
                         const std::array<cudaEvent_t, 3>& events);
  // Adds a finished step's times to step_times_ or eager_times_.
  void account(const StepTiming& t);
  // The staging of decode()/forward_rows(), for them and launch(): the
  // rows in host_rows_, KV blocks held, lengths grown, prefix keys noted
  // (a fed row's when its token is read). Returns the rows (decode: padded
  // to its bucket).
  int stage_decode(const int* slots, const int32_t* tokens, const int* token_from, int B);
  int stage_mixed(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
                  const std::vector<Chunk>& chunks, size_t begin, size_t end);
  void stage_decode_row(int b, int slot, const int32_t* tokens, const int* token_from);
  AheadSteps ahead_;
  Status alloc_ahead();
  // One packed prefill of prompts [begin, end) into their slots.
  void prefill_chunk(const int* slots, const std::vector<const std::vector<int32_t>*>& prompts,
                     size_t begin, size_t end, float* logits, int32_t* greedy);
  void fetch_logits(int head_count, int real_rows, float* logits);
  void upload_table(const KvBlockPool::Rows& rows);
  // Row indices (and a prefill's head rows) host -> device.
  void stage_rows(int n, int head_count, bool gathered);
  cudaGraphExec_t capture_step(int n, int head_count, bool gathered);
  void choose_projections(int n);
  // Whether projection() may pick the skinny GEMM (off while a decode
  // bucket that chose cuBLASLt is enqueued), and each bucket's choice.
  bool skinny_enabled_ = true;
  std::map<int, bool> bucket_skinny_;

  models::ModelConfig config_;
  models::LocalDims dims_;
  CudaEngineOptions options_;
  int tp_ = 1;
  std::vector<Layer> layers_;
  Bf16* embed_ = nullptr;
  Bf16* lm_head_ = nullptr;  // == embed_ when tied
  float* final_norm_ = nullptr;
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  Buffers buf_{};
  models::DecodeRows row_index_{};
  models::cuda::SkinnyScratch skinny_{};  // the tensor-core projections' split-K meeting place
  models::cuda::DecodeAttentionScratch attention_scratch_{};  // attention split over the context
  int32_t* host_rows_ = nullptr;    // pinned [kRowIndexParts, R]
  int32_t* host_tokens_ = nullptr;  // pinned [B]
  int32_t* host_head_rows_ = nullptr;  // pinned [B]
  int max_rows_ = 0, max_batch_ = 0;
  std::vector<int> buckets_;
  std::vector<int> lengths_;        // positions held per slot
  std::unique_ptr<KvBlockPool> pool_;  // which cache blocks each slot holds
  int32_t* host_table_ = nullptr;   // pinned copy of pool_->table()
  int32_t* block_table_ = nullptr;  // device [slots + 1, blocks per slot]
  // Makes `slot` hold blocks for `positions` (within its reservation).
  void hold(int slot, int positions);
  // With prefix caching: the tokens at each slot's positions, whose full
  // blocks note() keys in the pool as the slot grows (forget() on a fresh start).
  std::vector<std::vector<int32_t>> slot_tokens_;
  void note(int slot, const int32_t* tokens, int n);
  void forget(int slot);
  // options.overrides.time_steps: per padded decode size, steps timed, their GPU
  // time (row copies + graph, CUDA events; the graph's part from the event
  // after the copies), the host's time in cudaGraphLaunch and the wall time,
  // in seconds.
  struct StepTimes {
    int64_t steps = 0, rows = 0;
    double gpu_s = 0, graph_s = 0, launch_s = 0, wall_s = 0;  // launch_s: cudaGraphLaunch, or enqueuing an eager step
  };
  bool time_steps_ = false;
  cudaEvent_t step_begin_ = nullptr, step_staged_ = nullptr, step_end_ = nullptr;
  std::map<int, StepTimes> step_times_;   // decode steps replayed from a graph, by rows
  std::map<int, StepTimes> eager_times_;  // prompt and mixed steps, by rows rounded up to a power of two
  void log_step_times() const;
  std::map<int, int> bucket_runs_;  // eager runs so far per padded size
  std::map<int, cudaGraphExec_t> graphs_;
  std::vector<float> host_gathered_;
  std::vector<void*> allocations_;
  // At tp > 1 the tp group's collectives, whose stream the engine runs on:
  // they then need no cross-stream events, and a step's sums are captured
  // into the graphs with its kernels. Its timeout bounds a step's wait.
  models::EnqueuedTensorParallel tp_group_;
  cudaStream_t stream_ = nullptr;  // tp_group_'s stream at tp > 1, else the engine's own
  std::unique_ptr<TunedGemm> lt_;  // projections above the GEMV's rows
};

}  // namespace cohort::models::decode
