// CudaGraphEngine (see cuda_graph_engine.h): creation, weights, buffers.
// The step itself (forward, head, graphs) is in cuda_graph_step.cc.
#include "models/decode/cuda_graph_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/half_float.h"
#include "base/parallel_for.h"
#include "models/cuda/cublas_api.h"
#include "models/decode/cuda_graph_state.h"
#include "models/backend.h"
#include "models/spec.h"

namespace cohort::models::decode {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Host fp32 -> device, converted to bf16 or copied as fp32, through two
// pinned staging buffers on the engine's stream: one fills (on the
// machine's cores, in 1M-element pieces) while the other's copy runs, and
// no fresh pageable memory is touched (faulting in a new 1 GB vector costs
// more than copying it; a 0.6B model is 600M conversions).
class PinnedUpload {
 public:
  explicit PinnedUpload(cudaStream_t stream) : stream_(stream) {}
  ~PinnedUpload() {
    cudaStreamSynchronize(stream_);
    for (int b = 0; b < 2; ++b) {
      if (staging_[b]) cudaFreeHost(staging_[b]);
      if (done_[b]) cudaEventDestroy(done_[b]);
    }
  }
  PinnedUpload(const PinnedUpload&) = delete;
  PinnedUpload& operator=(const PinnedUpload&) = delete;

  Status init() {
    for (int b = 0; b < 2; ++b) {
      COHORT_CUDA_CHECK(cudaMallocHost(&staging_[b], kStagingBytes));
      COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&done_[b], cudaEventDisableTiming));
    }
    return Status::ok();
  }

  // dst = the parts one after the other, in bf16 (as_bf16) or fp32.
  Status put(void* dst, bool as_bf16, const std::vector<const float*>& parts,
             const std::vector<size_t>& counts) {
    const size_t es = as_bf16 ? 2 : 4, capacity = kStagingBytes / es;
    char* out = static_cast<char*>(dst);
    for (size_t p = 0; p < parts.size(); ++p) {
      for (size_t done = 0; done < counts[p];) {
        const size_t n = std::min(capacity, counts[p] - done);
        COHORT_CUDA_CHECK(cudaEventSynchronize(done_[next_]));  // its previous copy
        fill(staging_[next_], as_bf16, parts[p] + done, n);
        COHORT_CUDA_CHECK(cudaMemcpyAsync(out, staging_[next_], n * es, cudaMemcpyHostToDevice, stream_));
        COHORT_CUDA_CHECK(cudaEventRecord(done_[next_], stream_));
        next_ ^= 1;
        out += n * es, done += n;
      }
    }
    return Status::ok();
  }

  // dst = `bytes` of host memory as they are (the source may be freed on return).
  Status put_bytes(void* dst, const void* src, size_t bytes) {
    char* out = static_cast<char*>(dst);
    const char* in = static_cast<const char*>(src);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kStagingBytes, bytes - done);
      COHORT_CUDA_CHECK(cudaEventSynchronize(done_[next_]));
      std::memcpy(staging_[next_], in + done, n);
      COHORT_CUDA_CHECK(cudaMemcpyAsync(out + done, staging_[next_], n, cudaMemcpyHostToDevice, stream_));
      COHORT_CUDA_CHECK(cudaEventRecord(done_[next_], stream_));
      next_ ^= 1;
      done += n;
    }
    return Status::ok();
  }

  Status finish() {
    COHORT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Status::ok();
  }

 private:
  static constexpr size_t kStagingBytes = size_t{64} << 20;

  static void fill(void* staging, bool as_bf16, const float* src, size_t n) {
    constexpr size_t kPiece = size_t{1} << 20;
    parallel_for((n + kPiece - 1) / kPiece, [&](size_t piece) {
      const size_t begin = piece * kPiece, end = std::min(n, begin + kPiece);
      if (as_bf16) {
        uint16_t* out = static_cast<uint16_t*>(staging);
        for (size_t i = begin; i < end; ++i) out[i] = float_to_bf16_bits(src[i]);
      } else {
        std::copy(src + begin, src + end, static_cast<float*>(staging) + begin);
      }
    });
  }

  cudaStream_t stream_;
  void* staging_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
};

}  // namespace

Status upload_f32(float* dst, const std::vector<float>& host, cudaStream_t stream) {
  COHORT_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size() * 4, cudaMemcpyHostToDevice, stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::ok();
}

std::vector<int> decode_buckets(int slots) {
  std::vector<int> sizes = {1, 2, 4, 8, 16, 24, 32, 48, 64};
  while (sizes.back() < slots) sizes.push_back(sizes.back() + 32);
  while (sizes.size() > 1 && sizes[sizes.size() - 2] >= slots) sizes.pop_back();
  return sizes;
}

Result<void*> CudaGraphEngine::device_alloc(size_t bytes) {
  void* p = nullptr;
  COHORT_CUDA_CHECK(cudaMalloc(&p, bytes));
  // On the engine's stream, so that the uploads after it (same stream) land
  // after the zeros.
  COHORT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  allocations_.push_back(p);
  return p;
}

CudaGraphEngine::~CudaGraphEngine() {
  cudaSetDevice(options_.device);
  if (stream_) cudaStreamSynchronize(stream_);
  if (time_steps_) {
    log_step_times();
    cudaEventDestroy(step_begin_);
    cudaEventDestroy(step_staged_);
    cudaEventDestroy(step_end_);
  }
  for (auto& [size, exec] : graphs_) cudaGraphExecDestroy(exec);
  for (void* p : allocations_) cudaFree(p);
  if (host_rows_) cudaFreeHost(host_rows_);
  if (host_tokens_) cudaFreeHost(host_tokens_);
  if (host_head_rows_) cudaFreeHost(host_head_rows_);
  if (host_table_) cudaFreeHost(host_table_);
  for (int k = 0; k < 2; ++k) {
    if (ahead_.tokens[k]) cudaFreeHost(ahead_.tokens[k]);
    if (ahead_.done[k]) cudaEventDestroy(ahead_.done[k]);
    for (cudaEvent_t e : ahead_.timer[k])
      if (e) cudaEventDestroy(e);
  }
  if (ahead_.staged) cudaEventDestroy(ahead_.staged);
  if (lora_.host_rows) cudaFreeHost(lora_.host_rows);
  if (lora_.host_run_tiles) cudaFreeHost(lora_.host_run_tiles);
  for (auto& memory : lora_.memory)
    for (void* p : memory) cudaFree(p);
  if (lora_.dense.memory) cudaFree(lora_.dense.memory);
  if (lora_.dense.blas) models::cuda::blas::loaded().destroy(lora_.dense.blas);
  if (lora_.dense.fork) cudaEventDestroy(lora_.dense.fork);
  if (lora_.dense.join) cudaEventDestroy(lora_.dense.join);
  if (lora_.dense.side) cudaStreamDestroy(lora_.dense.side);
  lt_.reset();
  if (tp_group_.owner) {
    tp_group_ = {};  // its stream was the engine's
  } else if (stream_) {
    cudaStreamDestroy(stream_);
  }
}

std::string CudaGraphEngine::describe() const {
  const std::string projections =
      quantized_ ? packed_format_ + " projections (row layout, quantized GEMV" +
                       (fp8_gemm_ready_ ? std::string("; FP8 tensor cores beyond ") +
                                              std::to_string(models::cuda::kQuantGemvMaxRows) + " rows)"
                                        : std::string(")"))
                 : std::string("bf16");
  const std::string experts = config_.is_moe() ? ", " + std::to_string(dims_.experts) + " bf16 experts (top " +
                                                      std::to_string(config_.moe.experts_per_token) + ") a sparse layer"
                                                : std::string();
  return "cuda " + projections + experts + ", " +
         (options_.cuda_graphs ? "decode in CUDA graphs" : "eager decode (cuda_graphs = false)") +
         ", paged " + (options_.kv_dtype == models::KvDtype::kFp8 ? "fp8 (e4m3, a scale per KV head)" : "bf16") +
         " KV cache of " + std::to_string(kv_blocks()) + " blocks of " + std::to_string(kKvBlockSize);
}

Status CudaGraphEngine::init_runtime(const models::EnqueuedTensorParallelFactory& make_tp) {
  COHORT_CUDA_CHECK(cudaSetDevice(options_.device));
  if (tp_ > 1) {
    // The tp group's GPU collectives; the engine runs on their stream.
    if (!make_tp) return invalid_argument("the bf16 CUDA engine at tp > 1 needs its tensor-parallel group");
    COHORT_ASSIGN_OR_RETURN(tp_group_, make_tp());
    if (tp_group_.size != tp_ || tp_group_.rank != options_.shard.tp_rank || !tp_group_.stream) {
      return invalid_argument("the tensor-parallel group given to the bf16 CUDA engine is rank " +
                              std::to_string(tp_group_.rank) + " of " + std::to_string(tp_group_.size) +
                              ", not the shard's " + std::to_string(options_.shard.tp_rank) + " of " +
                              std::to_string(tp_));
    }
    stream_ = static_cast<cudaStream_t>(tp_group_.stream);
  } else {
    COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  const CudaEngineOptions::Overrides& overrides = options_.overrides;
  if (overrides.time_steps) {
    COHORT_CUDA_CHECK(cudaEventCreate(&step_begin_));
    COHORT_CUDA_CHECK(cudaEventCreate(&step_staged_));
    COHORT_CUDA_CHECK(cudaEventCreate(&step_end_));
    time_steps_ = true;
  }
  if (overrides.fused_attention_rows >= 0) fused_attention_rows_ = overrides.fused_attention_rows;
  prefill_tiles_ = models::cuda::prefill_attention_supports(config_.head_dim);
  if (!overrides.attention.empty()) {
    COHORT_ASSIGN_OR_RETURN(attention_form_, models::cuda::parse_decode_attention_form(overrides.attention));
  }
  // Graph capture needs cuBLASLt to use a workspace it was given, not one it
  // allocates on the fly.
  constexpr size_t kWorkspace = size_t{32} << 20;
  COHORT_ASSIGN_OR_RETURN(void* workspace, device_alloc(kWorkspace));
  COHORT_ASSIGN_OR_RETURN(lt_, TunedGemm::create(stream_, workspace, kWorkspace));
  return Status::ok();
}

Status CudaGraphEngine::upload_weights(models::Model& model, std::vector<HostLayer>& layers) {
  if (layers.size() != static_cast<size_t>(config_.layers)) return internal_error("upload_weights: layers missing");
  const models::ParamLayout& layout = model.layout();
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim();
  const size_t I = dims_.intermediate;
  const size_t vocab_rows = static_cast<size_t>(dims_.vocab) * H;
  PinnedUpload upload(stream_);
  COHORT_RETURN_IF_ERROR(upload.init());
  auto upload_bf16 = [&](Bf16* dst, const std::vector<const float*>& parts,
                         const std::vector<size_t>& counts) {
    return upload.put(dst, true, parts, counts);
  };
  COHORT_ASSIGN_OR_RETURN(void* embed, device_alloc(vocab_rows * 2));
  embed_ = static_cast<Bf16*>(embed);
  const float* embed_host = model.params(models::ParamLayout::kEmbedGroup);
  COHORT_RETURN_IF_ERROR(upload_bf16(embed_, {embed_host}, {vocab_rows}));
  const float* head = model.params(layout.head_group());
  const auto& head_group = layout.groups[layout.head_group()];
  COHORT_ASSIGN_OR_RETURN(void* norm, device_alloc(H * 4));
  final_norm_ = static_cast<float*>(norm);
  COHORT_RETURN_IF_ERROR(upload.put(final_norm_, false,
                                    {head + head_group.find("model.norm.weight")->offset},
                                    {static_cast<size_t>(H)}));
  lm_head_ = embed_;
  if (!config_.tie_embeddings) {
    COHORT_ASSIGN_OR_RETURN(void* lm, device_alloc(vocab_rows * 2));
    lm_head_ = static_cast<Bf16*>(lm);
    COHORT_RETURN_IF_ERROR(
        upload_bf16(lm_head_, {head + head_group.find("lm_head.weight")->offset}, {vocab_rows}));
  }
  bool any_packed = false;
  // A host vector on the device (freed on the host once copied).
  auto put = [&](auto** dst, auto& host) -> Status {
    const size_t bytes = host.size() * sizeof(host[0]);
    if (bytes == 0) return Status::ok();
    COHORT_ASSIGN_OR_RETURN(void* p, device_alloc(bytes));
    *dst = static_cast<std::remove_reference_t<decltype(**dst)>*>(p);
    COHORT_RETURN_IF_ERROR(upload.put_bytes(p, host.data(), bytes));
    std::remove_reference_t<decltype(host)>().swap(host);
    return Status::ok();
  };
  for (int l = 0; l < config_.layers; ++l) {
    HostLayer& h = layers[static_cast<size_t>(l)];
    Layer& d = layers_[l];
    d.sparse = h.sparse;
    Weight* fused[4] = {&d.wqkv, &d.wo, &d.wgu, &d.wdown};
    for (int i = 0; i < 4; ++i) {
      if (h.packed[i]) {
        COHORT_RETURN_IF_ERROR(upload_packed(*fused[i], *h.packed[i]));
        if (packed_format_.empty()) packed_format_ = h.packed[i]->format;
        h.packed[i].reset();
        any_packed = true;
      } else {
        COHORT_RETURN_IF_ERROR(put(&fused[i]->bf16, h.bf16[i]));  // nothing for a sparse layer's MLP
      }
    }
    COHORT_RETURN_IF_ERROR(put(&d.router, h.router));
    COHORT_RETURN_IF_ERROR(put(&d.experts_gu, h.experts_gu));
    COHORT_RETURN_IF_ERROR(put(&d.experts_down, h.experts_down));
    COHORT_RETURN_IF_ERROR(put(&d.attn_norm, h.attn_norm));
    COHORT_RETURN_IF_ERROR(put(&d.mlp_norm, h.mlp_norm));
    COHORT_RETURN_IF_ERROR(put(&d.q_norm, h.q_norm));
    COHORT_RETURN_IF_ERROR(put(&d.k_norm, h.k_norm));
    COHORT_RETURN_IF_ERROR(put(&d.qkv_bias, h.qkv_bias));
  }
  COHORT_RETURN_IF_ERROR(upload.finish());
  if (any_packed) {
    // What a packed projection expands into beyond the quantized GEMV's rows.
    const size_t largest = std::max({static_cast<size_t>(Qd + 2 * KVd) * H, static_cast<size_t>(H) * Qd, 2 * I * H});
    COHORT_ASSIGN_OR_RETURN(void* expanded, device_alloc(largest * 2));
    expanded_ = static_cast<Bf16*>(expanded);
  }
  quantized_ = any_packed;
  return Status::ok();
}

Result<std::unique_ptr<InferenceEngine>> make_cuda_graph_engine(const models::ModelConfig& config,
                                                                const CudaEngineOptions& options,
                                                                const models::EnqueuedTensorParallelFactory& make_tp,
                                                                const EngineWeightLoader& load) {
  COHORT_RETURN_IF_ERROR(cuda_graph_engine_fits(config, options));
  const std::string& projections = options.overrides.projections;
  if (!projections.empty() && projections != "skinny" && projections != "cublaslt") {
    return invalid_argument("decode projections '" + projections + "': expected skinny or cublaslt");
  }
  if (options.capacity > config.max_seq) {
    return invalid_argument("KV cache capacity " + std::to_string(options.capacity) +
                            " exceeds the model's max_seq " + std::to_string(config.max_seq));
  }
  COHORT_ASSIGN_OR_RETURN(models::LocalDims dims, models::local_dims(config, options.shard));
  std::unique_ptr<CudaGraphEngine> engine(new CudaGraphEngine(config, dims, options));
  using Clock = std::chrono::steady_clock;
  auto phase = Clock::now();
  // The CUDA context, the stream and cuBLASLt (and at tp > 1 the NCCL
  // group) come up, and cuBLASLt's plans are tuned, on another thread while
  // this one reads the weights from disk: neither needs the other until the
  // upload.
  double runtime_s = 0;
  std::future<Status> runtime = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    Status s = engine->init_runtime(make_tp);
    runtime_s = seconds_since(start);
    if (s.is_ok()) s = engine->tune_projections();
    return s;
  });
  double read_s = 0, upload_s = 0;
  std::unique_ptr<models::Backend> base_backend;
  std::unique_ptr<models::Model> base;
  {
    // This rank's slices in fp32 on the host, from whatever the job names.
    // It only holds weights; it never runs, so its tensor-parallel callbacks
    // (required for tp > 1) must never be called.
    models::TensorParallelComm never;
    never.all_reduce_sum = [](float*, size_t) {
      COHORT_CHECK_MSG(false, "weights-only model ran");
    };
    never.all_reduce_max = never.all_reduce_sum;
    never.all_gather = [](const float*, float*, size_t) {
      COHORT_CHECK_MSG(false, "weights-only model ran");
    };
    // Each layer is taken into its host copy (bf16 or packed, host_layer.h)
    // as the loader fills it when the loader streams blocks, so the model is
    // never whole in fp32; else after the load.
    auto cpu = models::make_cpu_backend();
    COHORT_ASSIGN_OR_RETURN(auto model,
                            models::Model::create(config, options.shard, cpu.get(), never,
                                                  options.stream_blocks ? models::Model::Buffers::kStreamedBlocks
                                                                        : models::Model::Buffers::kParamsOnly));
    const HostLayerFormats formats{options.projection_format, options.packed_projection};
    std::vector<HostLayer> layers(static_cast<size_t>(config.layers));
    std::vector<char> taken(layers.size(), 0);
    Status taking;
    auto take = [&](int layer) {
      if (!taking.is_ok()) return;
      auto made = make_host_layer(*model, layer, formats);
      if (!made.is_ok()) return void(taking = made.status().with_context("layer " + std::to_string(layer)));
      layers[static_cast<size_t>(layer)] = std::move(*made);
      taken[static_cast<size_t>(layer)] = 1;
    };
    if (options.stream_blocks) {
      model->set_group_filled_listener([&](int group, const float*) {
        const int layer = group - model->layout().block_group(0);
        if (layer >= 0 && layer < config.layers) take(layer);
      });
    }
    COHORT_RETURN_IF_ERROR(load(*model));
    if (!options.stream_blocks) {
      for (int l = 0; l < config.layers; ++l) take(l);
    }
    COHORT_RETURN_IF_ERROR(taking);
    for (int l = 0; l < config.layers; ++l) {
      if (!taken[static_cast<size_t>(l)]) {
        return internal_error("the weight loader never filled layer " + std::to_string(l) +
                              " (a streamed load calls group_filled for every block)");
      }
    }
    read_s = seconds_since(phase);
    COHORT_RETURN_IF_ERROR(runtime.get());
    // The current device is per thread: this one's must be the engine's too.
    COHORT_CUDA_CHECK(cudaSetDevice(options.device));
    phase = Clock::now();
    COHORT_RETURN_IF_ERROR(engine->upload_weights(*model, layers));
    upload_s = seconds_since(phase);
    if (options.lora) base_backend = std::move(cpu), base = std::move(model);
  }
  if (base) engine->keep_base(std::move(base_backend), std::move(base));
  phase = Clock::now();
  COHORT_RETURN_IF_ERROR(engine->alloc_buffers());
  const double buffers_s = seconds_since(phase);
  phase = Clock::now();
  engine->warm_up();
  spdlog::info("infer: engine load: CUDA runtime {:.2f} s (beside the read), weights read {:.2f} s, "
               "upload {:.2f} s, "
               "buffers {:.2f} s, warm-up {:.2f} s", runtime_s, read_s, upload_s, buffers_s,
               seconds_since(phase));
  return std::unique_ptr<InferenceEngine>(std::move(engine));
}

}  // namespace cohort::models::decode
