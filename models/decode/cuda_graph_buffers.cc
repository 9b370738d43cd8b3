// CudaGraphEngine's device buffers (alloc_buffers: the paged KV cache,
// the activations' rows, the scratch of the split kernels, the FP8
// projections' inputs) and the memory plan that sizes the cache by what the
// GPU has free (plan_kv_memory, cuda_graph_engine_fits).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"
#include "models/ops/fp8_rows.h"
#include "models/ops/rope.h"
#include "models/spec.h"

namespace cohort::models::decode {

Status CudaGraphEngine::alloc_buffers() {
  const size_t H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim();
  const size_t I = dims_.intermediate, V = dims_.vocab, D = config_.head_dim;
  buckets_ = decode_buckets(options_.slots);
  max_batch_ = buckets_.back();
  max_rows_ = std::max({options_.capacity, max_batch_, options_.step_rows});
  // The activations' buffers hold a multiple of 4 rows (Rp): the FP8
  // GEMM's padding.
  const size_t R = max_rows_, Rp = models::fp8_rows_padded(max_rows_), B = max_batch_;
  auto take = [&](size_t bytes) -> Result<void*> { return device_alloc(bytes); };
  // Paged: blocks of kKvBlockSize positions plus the spare block.
  const int per_slot = (options_.capacity + kKvBlockSize - 1) / kKvBlockSize;
  const int64_t blocks = options_.kv_blocks > 0 ? options_.kv_blocks : int64_t(options_.slots) * per_slot;
  if (blocks > INT32_MAX - 1) return invalid_argument("KV cache of " + std::to_string(blocks) + " blocks");
  pool_ = std::make_unique<KvBlockPool>(static_cast<int>(blocks), kKvBlockSize, options_.slots, per_slot);
  const size_t per_layer = static_cast<size_t>(blocks + 1) * dims_.kv_heads * kKvBlockSize * D;
  const size_t value_bytes = models::kv_value_bytes(options_.kv_dtype);
  const bool fp8 = options_.kv_dtype == models::KvDtype::kFp8;
  for (Layer& layer : layers_) {
    COHORT_ASSIGN_OR_RETURN(layer.k_cache, take(per_layer * value_bytes));
    COHORT_ASSIGN_OR_RETURN(layer.v_cache, take(per_layer * value_bytes));
    if (fp8) {
      // Scales of 1 until calibrate_kv_scales measures the heads.
      const size_t heads = 2 * size_t(dims_.kv_heads);
      COHORT_ASSIGN_OR_RETURN(void* scales, take(heads * 4));
      COHORT_ASSIGN_OR_RETURN(void* amax, take(heads * 4));
      layer.kv_scales = static_cast<float*>(scales), layer.kv_amax = static_cast<float*>(amax);
      COHORT_RETURN_IF_ERROR(upload_f32(layer.kv_scales, std::vector<float>(heads, 1.0f), stream_));
    }
  }
  COHORT_ASSIGN_OR_RETURN(void* x, take(Rp * H * 4));
  COHORT_ASSIGN_OR_RETURN(void* xn, take(Rp * H * 2));
  COHORT_ASSIGN_OR_RETURN(void* qkv, take(Rp * (Qd + 2 * KVd) * 4));
  COHORT_ASSIGN_OR_RETURN(void* q, take(Rp * Qd * 4));
  COHORT_ASSIGN_OR_RETURN(void* y, take(Rp * Qd * 2));
  COHORT_ASSIGN_OR_RETURN(void* tmp, take(Rp * H * 4));
  COHORT_ASSIGN_OR_RETURN(void* gu, take(Rp * 2 * I * 4));
  COHORT_ASSIGN_OR_RETURN(void* h, take(Rp * I * 2));
  if (fp8_weights_) {
    // The FP8 projections' inputs: probed once on a decode shape; without
    // cuBLASLt's block-scaled e4m3 GEMM (before Hopper) they keep the bf16
    // paths.
    fp8_gemm_ready_ = lt_->fp8_supported(int(models::fp8_rows_padded(std::min(max_rows_, 64))), int(H),
                                         int(Qd + 2 * KVd));
    if (fp8_gemm_ready_) {
      const size_t widest = std::max({H, Qd, I});
      COHORT_ASSIGN_OR_RETURN(void* codes, take(Rp * widest));
      COHORT_ASSIGN_OR_RETURN(void* scales, take(Rp * (widest / models::kFp8RowBlock) * 4));
      fp8_x_ = static_cast<uint8_t*>(codes), fp8_x_scales_ = static_cast<float*>(scales);
    } else {
      spdlog::warn("FP8 weights: cuBLASLt has no block-scaled e4m3 GEMM here; beyond {} rows they are read "
                   "as bf16", models::cuda::kQuantGemvMaxRows);
    }
  }
  COHORT_ASSIGN_OR_RETURN(void* logits, take(B * V * 4));
  COHORT_ASSIGN_OR_RETURN(void* gathered, take(tp_ * B * V * 4));
  COHORT_ASSIGN_OR_RETURN(void* pairs, take(B * 2 * 4));
  COHORT_ASSIGN_OR_RETURN(void* pairs_all, take(tp_ * B * 2 * 4));
  COHORT_ASSIGN_OR_RETURN(void* tokens, take(B * 4));
  COHORT_ASSIGN_OR_RETURN(void* rows, take(kRowIndexParts * R * 4));
  COHORT_ASSIGN_OR_RETURN(void* head_rows, take(B * 4));
  COHORT_ASSIGN_OR_RETURN(void* head_x, take(B * H * 2));
  COHORT_ASSIGN_OR_RETURN(void* sumsq, take(B * ((H + models::cuda::kQuantNormChunk - 1) / models::cuda::kQuantNormChunk) * 4));
  COHORT_ASSIGN_OR_RETURN(void* partials, take(models::cuda::kSkinnyScratchFloats * 4));
  COHORT_ASSIGN_OR_RETURN(void* arrivals, take(models::cuda::kSkinnyScratchTiles * 4));
  skinny_ = {static_cast<float*>(partials), static_cast<int*>(arrivals)};
  COHORT_ASSIGN_OR_RETURN(void* attn_partials, take(models::cuda::kDecodeAttnScratchFloats * 4));
  COHORT_ASSIGN_OR_RETURN(void* attn_arrivals, take(models::cuda::kDecodeAttnScratchBlocks * 4));
  attention_scratch_ = {static_cast<float*>(attn_partials), static_cast<int*>(attn_arrivals)};
  if (config_.is_moe()) {
    const size_t E = dims_.experts, k = config_.moe.experts_per_token, Ie = dims_.expert_intermediate;
    moe_rows_ = static_cast<int>(moe_chunk_rows(R, k));
    const size_t C = moe_rows_, pairs = C * k;
    COHORT_ASSIGN_OR_RETURN(void* logits, take(C * E * 4));
    COHORT_ASSIGN_OR_RETURN(void* experts, take(pairs * 4));
    COHORT_ASSIGN_OR_RETURN(void* weights, take(pairs * 4));
    COHORT_ASSIGN_OR_RETURN(void* offsets, take((E + 1) * 4));
    COHORT_ASSIGN_OR_RETURN(void* source_rows, take(pairs * 4));
    COHORT_ASSIGN_OR_RETURN(void* slots, take(pairs * 4));
    COHORT_ASSIGN_OR_RETURN(void* h, take(pairs * Ie * 2));
    COHORT_ASSIGN_OR_RETURN(void* ys, take(pairs * H * 4));
    moe_ = MoeBuffers{static_cast<float*>(logits),      static_cast<int32_t*>(experts),
                      static_cast<float*>(weights),     static_cast<int32_t*>(offsets),
                      static_cast<int32_t*>(source_rows), static_cast<int32_t*>(slots),
                      static_cast<Bf16*>(h),            static_cast<float*>(ys)};
  }
  if (prefill_tiles_) {
    COHORT_ASSIGN_OR_RETURN(void* prefill_partials, take(models::cuda::kPrefillScratchFloats * 4));
    prefill_scratch_.partials = static_cast<float*>(prefill_partials);
  }
  buf_ = Buffers{
      static_cast<float*>(x),        static_cast<Bf16*>(xn),      static_cast<float*>(qkv),
      static_cast<float*>(q),        static_cast<Bf16*>(y),       static_cast<float*>(tmp),
      static_cast<float*>(gu),       static_cast<Bf16*>(h),       static_cast<float*>(logits),
      static_cast<float*>(gathered), static_cast<float*>(pairs),  static_cast<float*>(pairs_all),
      static_cast<int32_t*>(tokens), static_cast<int32_t*>(rows), static_cast<int32_t*>(head_rows),
      static_cast<Bf16*>(head_x),    static_cast<float*>(sumsq)};
  const int32_t* r = buf_.rows;
  const size_t table_bytes = pool_->table().size() * 4;
  COHORT_ASSIGN_OR_RETURN(void* table, take(table_bytes));
  block_table_ = static_cast<int32_t*>(table);
  COHORT_CUDA_CHECK(cudaMallocHost(&host_table_, table_bytes));
  row_index_ = models::DecodeRows{r, r + R, r + 2 * R, block_table_};
  COHORT_CUDA_CHECK(cudaMallocHost(&host_rows_, kRowIndexParts * R * 4));
  COHORT_CUDA_CHECK(cudaMallocHost(&host_tokens_, B * 4));
  COHORT_CUDA_CHECK(cudaMallocHost(&host_head_rows_, B * 4));
  const models::RopeTable rope = models::make_rope_table(config_);
  COHORT_ASSIGN_OR_RETURN(void* cos, take(rope.cos.size() * 4));
  COHORT_ASSIGN_OR_RETURN(void* sin, take(rope.sin.size() * 4));
  rope_cos_ = static_cast<float*>(cos), rope_sin_ = static_cast<float*>(sin);
  COHORT_RETURN_IF_ERROR(upload_f32(rope_cos_, rope.cos, stream_));
  COHORT_RETURN_IF_ERROR(upload_f32(rope_sin_, rope.sin, stream_));
  lengths_.assign(options_.slots, 0);
  slot_tokens_.assign(options_.slots, {});
  COHORT_RETURN_IF_ERROR(alloc_ahead());
  return alloc_lora();
}

Result<KvMemoryPlan> plan_kv_memory(const models::ModelConfig& config, const CudaEngineOptions& options,
                                    double gpu_memory_fraction) {
  COHORT_ASSIGN_OR_RETURN(const models::LocalDims dims, models::local_dims(config, options.shard));
  const size_t H = config.hidden, Qd = dims.q_dim(), KVd = dims.kv_dim(), I = dims.intermediate, V = dims.vocab,
               D = config.head_dim, L = config.layers, tp = options.shard.tp_size;
  // What upload_weights and alloc_buffers allocate besides the cache (their
  // sizes, summed here; the workspace is init's).
  size_t weights = V * H * 2 * (config.tie_embeddings ? 1 : 2) + H * 4;
  const auto& format = options.projection_format ? options.projection_format : options.packed_bytes_like;
  // Dense layers hold an MLP of I, sparse ones a router and E experts of Ie
  // in bf16 (moe_experts.h), whatever the format.
  const size_t E = dims.experts, Ie = dims.expert_intermediate, k = config.moe.experts_per_token;
  size_t sparse = 0;
  for (int l = 0; l < config.layers; ++l) sparse += config.is_moe_layer(l) ? 1 : 0;
  weights += L * (projection_bytes(format, Qd + 2 * KVd, H) + projection_bytes(format, H, Qd));
  weights += (L - sparse) * (projection_bytes(format, 2 * I, H) + projection_bytes(format, H, I));
  weights += sparse * (E * H + E * 3 * Ie * H) * 2;
  if (format) weights += std::max({(Qd + 2 * KVd) * H, H * Qd, 2 * I * H}) * 2;  // expanded_
  weights += L * (2 * H + (config.qk_norm ? 2 * D : 0) + (config.attention_bias ? Qd + 2 * KVd : 0)) * 4;
  const size_t B = size_t(decode_buckets(options.slots).back());
  const size_t R = models::fp8_rows_padded(std::max({options.capacity, int(B), options.step_rows}));
  size_t buffers = R * (H * 4 + H * 2 + (Qd + 2 * KVd) * 4 + Qd * 4 + Qd * 2 + H * 4 + 2 * I * 4 + I * 2 + kRowIndexParts * 4);
  buffers += B * V * 4 * (1 + tp) + B * (2 * 4 * (1 + tp) + 4 + 4 + H * 2 + ((H + 63) / 64) * 4);
  buffers += (models::cuda::kSkinnyScratchFloats + models::cuda::kSkinnyScratchTiles + models::cuda::kDecodeAttnScratchFloats +
              models::cuda::kDecodeAttnScratchBlocks + models::cuda::kPrefillScratchFloats) * 4;
  if (config.is_moe()) {
    const size_t C = moe_chunk_rows(R, k), pairs = C * k;
    buffers += C * E * 4 + pairs * 4 * 4 + 2 * (E + 1) * 4 + pairs * Ie * 2 + pairs * H * 4;
  }
  if (format == models::quant::WeightFormat::kFp8Block) {
    // The FP8 GEMM's activation codes and scales, and the weights' block scales.
    const size_t widest = std::max({H, Qd, I});
    buffers += R * widest + R * (widest / 128) * 4;
    weights += L * ((Qd + 2 * KVd) * H + H * Qd + 2 * I * H + H * I) / (128 * 128) * 4 * 2;
  }
  buffers += size_t{32} << 20;  // cuBLASLt's workspace
  KvMemoryPlan plan;
  COHORT_CUDA_CHECK(cudaSetDevice(options.device));
  COHORT_CUDA_CHECK(cudaMemGetInfo(&plan.free_bytes, &plan.total_bytes));
  plan.block_bytes = L * 2 * size_t(dims.kv_heads) * kKvBlockSize * D * models::kv_value_bytes(options.kv_dtype);
  if (options.kv_dtype == models::KvDtype::kFp8) buffers += L * 2 * size_t(dims.kv_heads) * 2 * 4;  // scales, maxima
  plan.engine_bytes = weights + buffers;
  const double fraction = std::clamp(gpu_memory_fraction, 0.0, 1.0);
  plan.kept_bytes = size_t((1.0 - fraction) * double(plan.total_bytes)) + kEngineHeadroomBytes;
  const double left = double(plan.free_bytes) - double(plan.engine_bytes) - double(plan.kept_bytes);
  // One block of every layer is the spare the engine writes padding rows to.
  plan.blocks = int64_t(std::floor(left / double(plan.block_bytes))) - 1;
  return plan;
}

Status cuda_graph_engine_fits(const models::ModelConfig& config, const CudaEngineOptions& options) {
  if (config.head_dim % 16 != 0 || !models::cuda::decode_attention_supports(config.head_dim)) {
    return invalid_argument("the bf16 CUDA engine needs head_dim 16, 32, 64, 128 or 256, not " +
                            std::to_string(config.head_dim));
  }
  // Features the graph engine hands to the op-by-op path (models/spec.h)
  // are served by the models library's engine.
  COHORT_RETURN_IF_ERROR(check_executor(Executor::kCudaDecode, DecoderSpec::of(config)));
  COHORT_ASSIGN_OR_RETURN(models::LocalDims dims, models::local_dims(config, options.shard));
  if (config.is_moe() && !models::cuda::moe_experts_supported(config.hidden, dims.expert_intermediate)) {
    return invalid_argument("the bf16 CUDA engine's experts need hidden " + std::to_string(config.hidden) +
                            " and the per-rank expert intermediate " + std::to_string(dims.expert_intermediate) +
                            " to be multiples of 8");
  }
  if (config.is_moe() && dims.experts != config.moe.experts) {
    return invalid_argument("the bf16 CUDA engine holds every expert on each rank (no expert parallelism)");
  }
  if (options.lora && (config.hidden % 8 != 0 || dims.q_dim() % 8 != 0 || dims.intermediate % 8 != 0)) {
    return invalid_argument("the bf16 CUDA engine's served adapters need hidden, the rank's q width and its "
                            "intermediate size to be multiples of 8");
  }
  return Status::ok();
}

}  // namespace cohort::models::decode
