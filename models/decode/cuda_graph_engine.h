// CudaGraphEngine: a tensor-parallel rank's share of the model for
// generation on one GPU, bf16 weights, decode steps replayed as CUDA graphs.
//
// Weights are loaded through a models::Model on the CPU (so every source the
// job accepts works, each rank reading only its slices), then converted to
// bf16 and fused per layer (q|k|v rows, gate|up rows) on the device; norms
// and biases stay fp32. Projections are bf16 with fp32 accumulation and
// fp32 outputs: a CUDA-core GEMV at one row (which normalises the residual
// stream itself and adds the output projections into it), a tensor-core
// skinny GEMM or cuBLASLt from 2 to 64 rows (whichever ran a decode bucket's
// graph faster at warm-up), cuBLASLt beyond. The residual stream is fp32;
// the KV cache is bf16 (or fp8, CudaEngineOptions::kv_dtype) and paged (blocks of 16 positions handed to slots as
// their sequences grow, through a block table the kernels read), with a
// spare slot and block that padded graph rows write to. Decode steps of up
// to 8 rows prepare q/k/v inside the attention kernel. The kernels are the
// models library's decode ops (models/ops/: embedding, rmsnorm, rope,
// decode_attention, gemv, skinny_gemm, swiglu, argmax), each beside its CPU
// reference, launched with programmatic dependent launch so that each
// kernel's weight loads start while its predecessor finishes.
// Tensor-parallel sums and the logits gather go through the group the
// caller builds (models/tensor_parallel.h; worker/ makes it NCCL) on that
// group's stream, which the engine runs on, so they are captured into the
// graphs with everything else.
//
// Decode: the batch is padded up to the next captured size (1, 2, 4, 8, 16,
// 24, 32, 48, 64, then multiples of 32); a size is run eagerly the first time
// and captured for later steps. Prefill runs eagerly (its length varies),
// its projections on cuBLASLt and its attention flash-style over the cache,
// 128 rows of a prompt against 64 cached positions at a time
// (models/ops/prefill_attention.h).
// Greedy picks happen on the device (each rank's argmax, gathered and merged);
// only when the caller wants logits are they gathered and copied out.
// Errors at creation: head_dim not 16, 32, 64, 128 or 256, CUDA,
// cuBLAS or tensor-parallel group failures. Later failures are fatal (COHORT_CHECK): a rank
// cannot recover halfway through a collective step.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "models/decode/engine.h"
#include "models/config.h"
#include "models/model.h"
#include "models/ops/kv_fp8.h"
#include "models/quant/quantized_weight.h"
#include "models/quant/row_packed.h"
#include "models/tensor_parallel.h"

namespace cohort::models::decode {

struct CudaEngineOptions {
  int device = 0;
  int slots = 1;
  int capacity = 0;         // positions per slot
  bool cuda_graphs = true;  // false: every decode step runs eagerly
  models::ShardSpec shard;
  // The paged KV cache's blocks of kKvBlockSize positions, shared by the
  // slots by need (kv_blocks.h); 0: enough for every slot to reach capacity.
  int64_t kv_blocks = 0;
  // Rows one forward may take (a packed prefill, a mixed step); at least
  // capacity and the largest decode bucket.
  int step_rows = 0;
  // Full KV blocks stay cached by their token prefix for later sequences
  // (kv_blocks.h, reuse_prefix()).
  bool prefix_caching = false;
  // The loader fills the decoder blocks one at a time and calls
  // Model::group_filled after each, final (infer::model_streams_blocks):
  // the engine then holds one block in fp32 at a time on the host
  // (Buffers::kStreamedBlocks) and the rest as it uploads them. Without it
  // the whole model is loaded in fp32 first.
  bool stream_blocks = false;
  // Served LoRA adapters (InferenceEngine::add_adapter): up to
  // kGraphLoraSlots at once, rank at most kGraphLoraRank, on the attention
  // and MLP projections. The fused and folded forms of the layers give way
  // to the plain ones, so it is off unless adapters are served.
  bool lora = false;
  // The projections' storage on the GPU (q/k/v/o, gate/up/down; the
  // embedding, LM head and norms stay bf16/fp32): unset, bf16; kInt8, kInt4
  // or kFp8Block, quantized from the loaded weights as models::quant::
  // quantize() makes them, held in the row layout (models/quant/row_packed.h)
  // and read by the quantized GEMV (models/ops/quant_gemv.h).
  std::optional<models::quant::WeightFormat> projection_format;
  // A pre-quantized folder's projections as it stores them, in the row
  // layout and cut to this rank (hf/packed_projections.h): a weight it gives
  // is uploaded as it is; for the others (nullopt) projection_format
  // applies. Called from several threads at once. `packed_bytes_like`: the
  // format whose bytes they take, for plan_kv_memory.
  std::function<Result<std::optional<models::quant::RowPackedWeight>>(const models::ParamSpec&)> packed_projection;
  std::optional<models::quant::WeightFormat> packed_bytes_like;
  // The KV cache's values: bf16, or fp8 (models/ops/kv_fp8.h: e4m3 with a
  // power-of-two scale per layer, KV head and K or V, measured over a
  // calibration prefill at start), half the bytes a position.
  models::KvDtype kv_dtype = models::KvDtype::kBf16;
  // Choices warm-up otherwise makes, and timers, for diagnosis and A/B
  // runs: set only from the debugging switches (worker/debug_switches.h).
  struct Overrides {
    std::string attention;          // "": the tensor cores where the head size allows (decode_attention.h)
    int fused_attention_rows = -1;  // decode steps up to this many rows prepare q/k/v inside attention; -1: 64
    int lora_run_rows = -1;         // prompt rows of one adapter, this many in a row, take the run kernels; 0: never; -1: 1024
    std::optional<bool> lora_dense; // prompt steps' adapters as GEMMs over all loaded ones (default: while they fit)
    std::optional<bool> lora_dense_decode; // decode steps' adapters in that form too (default: hidden >= 4096; lora_dense_decode_rows)
    std::optional<bool> lora_side_stream;  // the dense form's shrink beside its projection (default: on)
    std::string projections;        // "": measured per decode bucket at warm-up; "skinny" or "cublaslt"
    bool time_steps = false;        // log each padded decode size's GPU, launch and wall time at the end
  } overrides;
};

inline constexpr int kGraphLoraSlots = 64;  // the server's bound on adapters loaded at once
inline constexpr int kGraphLoraRank = 64;
// The fewest rows a decode step has for its served adapters to take the
// dense form (models/ops/lora_rows.h, lora_dense_bf16) rather than the
// per-row kernel; INT_MAX: never. `forced`: overrides.lora_dense_decode.
// Unforced, where hidden >= 4096: every row count with the shrink beside
// its projection (`side_stream`), else 16. On the 8B shape (an H100,
// bench/RESULTS.md) the dense form adds 49, 26 and 25 µs a layer at 1, 16
// and 64 rows with the shrink beside, 64, 63 and 49 on one stream, where the
// per-row kernel adds 55, 73 and 66; on the 0.6B shape the dense form on
// one stream was slower at every row count.
int lora_dense_decode_rows(std::optional<bool> forced, int hidden, bool side_stream = true);
inline constexpr int kKvBlockShift = 4;
inline constexpr int kKvBlockSize = 1 << kKvBlockShift;

using EngineWeightLoader = std::function<Status(models::Model& model)>;

// Ok when the engine's kernels handle this model as `options` shard and
// serve it (head_dim 16, 32, 64, 128 or 256: a multiple of 16 whose 8-dim
// pieces divide a warp; experts and adapters whose widths are multiples of
// 8; every expert on each rank); else why not, for the caller to serve it
// on the models library's engine instead.
Status cuda_graph_engine_fits(const models::ModelConfig& config, const CudaEngineOptions& options);

// How much KV cache fits beside the engine on its GPU: what is free now,
// less the weights and buffers the engine will allocate for `options`
// (kv_blocks aside), less the share of the GPU the fraction leaves to
// others ((1 - fraction) × total) and a fixed headroom for CUDA graphs and
// libraries. vLLM's gpu_memory_utilization, measured before loading.
struct KvMemoryPlan {
  int64_t blocks = 0;          // of kKvBlockSize positions (may be 0 or less: nothing fits)
  size_t block_bytes = 0;      // one block's K and V over all layers
  size_t engine_bytes = 0;     // weights and buffers
  size_t free_bytes = 0, total_bytes = 0;
  size_t kept_bytes = 0;       // (1 - fraction) × total plus the headroom
};
inline constexpr size_t kEngineHeadroomBytes = size_t{768} << 20;
Result<KvMemoryPlan> plan_kv_memory(const models::ModelConfig& config, const CudaEngineOptions& options,
                                    double gpu_memory_fraction);

// `make_tp`: builds this rank's tensor-parallel group (size shard.tp_size)
// on the engine's runtime thread; unused at tp 1.
Result<std::unique_ptr<InferenceEngine>> make_cuda_graph_engine(const models::ModelConfig& config,
                                                                const CudaEngineOptions& options,
                                                                const models::EnqueuedTensorParallelFactory& make_tp,
                                                                const EngineWeightLoader& load);

}  // namespace cohort::models::decode
