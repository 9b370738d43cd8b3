// CudaGraphEngine's step: one forward over the rows in the row buffers, the
// LM head on the rows that want a next token, and the greedy pick, all on
// one stream so a decode step can be captured as a CUDA graph and replayed.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <thread>

#include "base/check.h"
#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"
#include "models/ops/fp8_rows.h"

namespace cohort::models::decode {
namespace {

void check_tp(const Status& s, const char* what) {
  COHORT_CHECK_MSG(s.is_ok(), "tensor-parallel {}: {}", what, s.message());
}

}  // namespace

// Which kernel family a projection of n rows takes: the CUDA-core GEMV up
// to kGemvNormMaxRows rows (one; where the norm forms also apply), the
// tensor-core skinny GEMM up to kSkinnyMaxRows, cuBLASLt beyond (or for
// widths the first two do not take).
CudaGraphEngine::Projection CudaGraphEngine::projection(int n, int in) const {
  if (n <= models::cuda::kGemvNormMaxRows && models::cuda::gemv_supported(n, in)) return Projection::kGemv;
  if (skinny_enabled_ && models::cuda::skinny_gemm_supported(n, in)) return Projection::kSkinny;
  if (models::cuda::gemv_supported(n, in)) return Projection::kGemv;
  return Projection::kCublasLt;
}

bool CudaGraphEngine::quant_skinny(const Weight& w, int n, int in) const {
  return w.quantized() && projection(n, in) == Projection::kSkinny && models::cuda::quant_skinny_supported(w.packed, n);
}

// y [n, out] = x [n, in] · wᵀ with w [out, in] row-major (HF orientation),
// or y += that (kAccumulate; not on the cuBLASLt path). bf16 inputs, fp32
// accumulate and output. cuBLASLt runs with the algorithm tuned per decode
// bucket at warm-up (cuda_tuned_gemm.h).
void CudaGraphEngine::gemm(float* y, const Bf16* x, const Weight& w, int n, int in, int out,
                           models::cuda::GemvOutput output, const models::cuda::FoldedNorm& norm) {
  if (w.quantized() && models::cuda::quant_gemv_supported(w.packed, n)) {
    models::cuda::quant_gemv(y, x, w.packed, n, stream_, output, norm);
    return;
  }
  if (fp8_gemm(w, n)) {
    COHORT_CHECK(!norm.in_sumsq && !norm.out_x);
    gemm_fp8(y, x, w, n, in, out, output == models::cuda::GemvOutput::kAccumulate);
    return;
  }
  if (quant_skinny(w, n, in)) {
    COHORT_CHECK(!norm.in_sumsq && !norm.out_x);
    models::cuda::quant_skinny_gemm(y, x, w.packed, n, skinny_, stream_, output);
    return;
  }
  gemm_bf16(y, x, bf16_for(w), n, in, out, output, norm);
}

void CudaGraphEngine::gemm_bf16(float* y, const Bf16* x, const Bf16* w, int n, int in, int out,
                                models::cuda::GemvOutput output, const models::cuda::FoldedNorm& norm) {
  const Projection family = projection(n, in);
  COHORT_CHECK((!norm.in_sumsq && !norm.out_x) || family == Projection::kSkinny);
  switch (family) {
    case Projection::kGemv:
      models::cuda::gemv_bf16(y, x, w, n, in, out, stream_, output);
      return;
    case Projection::kSkinny:
      models::cuda::skinny_gemm_bf16(y, x, w, n, in, out, skinny_, stream_, output, norm);
      return;
    case Projection::kCublasLt:
      break;
  }
  COHORT_CHECK(output == models::cuda::GemvOutput::kStore);
  const Status s = lt_->run(y, x, w, n, in, out);
  COHORT_CHECK_MSG(s.is_ok(), "[{}x{}]x[{}x{}]: {}", n, in, out, in, s.message());
}

// h [n, I] = SwiGLU of the fused gate/up projection of x (bf16 out).
void CudaGraphEngine::gate_up_swiglu(const Bf16* x, const Weight& weight, int n, int in, int I,
                                     const models::cuda::FoldedNorm& norm) {
  if (weight.quantized() && models::cuda::quant_gemv_supported(weight.packed, n)) {
    models::cuda::quant_gemv_swiglu(buf_.h, x, weight.packed, n, stream_, norm);
    return;
  }
  if (fp8_gemm(weight, n)) {
    COHORT_CHECK(!norm.in_sumsq);
    gemm_fp8(buf_.gate_up, x, weight, n, in, 2 * I, /*accumulate=*/false);
    if (I % models::kFp8RowBlock != 0) {
      models::cuda::swiglu_bf16(buf_.gate_up, buf_.h, n, I, stream_);
      return;
    }
    // The down projection's e4m3 input in the same pass (fp8_rows.h).
    models::cuda::swiglu_rows_e4m3(buf_.h, fp8_x_, fp8_x_scales_, buf_.gate_up, n, models::fp8_rows_padded(n), I,
                                   stream_);
    fp8_x_holds_ = buf_.h;
    return;
  }
  if (quant_skinny(weight, n, in)) {
    COHORT_CHECK(!norm.in_sumsq);
    models::cuda::quant_skinny_swiglu(buf_.h, x, weight.packed, n, skinny_, stream_);
    return;
  }
  const Bf16* w = bf16_for(weight);
  const Projection family = projection(n, in);
  COHORT_CHECK(!norm.in_sumsq || family == Projection::kSkinny);
  switch (family) {
    case Projection::kGemv:
      models::cuda::gemv_swiglu_bf16(buf_.h, x, w, n, in, I, stream_);
      return;
    case Projection::kSkinny:
      models::cuda::skinny_gemm_swiglu_bf16(buf_.h, x, w, n, in, I, skinny_, stream_, norm);
      return;
    case Projection::kCublasLt:
      gemm_bf16(buf_.gate_up, x, w, n, in, 2 * I, models::cuda::GemvOutput::kStore, {});
      models::cuda::swiglu_bf16(buf_.gate_up, buf_.h, n, I, stream_);
      return;
  }
}

// At tp > 1 the stream holds NCCL calls, and a peer that never joins one
// (it died, hangs, or made a different call) would leave
// cudaStreamSynchronize blocked for ever; so this polls the stream and NCCL's
// asynchronous error, and past the group's collective timeout ends the rank
// (fatal, like every failure mid-step) so that whoever launched it ends the
// job. No abort first: the process is ending, and an abort can itself block
// on a stuck peer.
void CudaGraphEngine::wait_step(const char* what) {
  if (tp_ == 1) {
    const cudaError_t e = cudaStreamSynchronize(stream_);
    COHORT_CHECK_MSG(e == cudaSuccess, "{}: {}", what, cudaGetErrorString(e));
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + tp_group_.timeout;
  // Spin while a step may still be running (a decode step takes
  // milliseconds); sleep once it has taken long enough to be suspect.
  const auto spin_until = start + std::chrono::milliseconds(50);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) return;
    COHORT_CHECK_MSG(e == cudaErrorNotReady, "{}: {}", what, cudaGetErrorString(e));
    check_tp(tp_group_.async_error(), what);
    const auto now = Clock::now();
    COHORT_CHECK_MSG(now < deadline,
                     "tensor-parallel rank {} of {}: {} not done on the GPU within {} s "
                     "(COHORT_COLLECTIVE_TIMEOUT_S): a peer died, hangs, or made a different "
                     "call",
                     options_.shard.tp_rank, tp_, what,
                     std::chrono::duration_cast<std::chrono::seconds>(tp_group_.timeout).count());
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Collectives are issued on the communicator's own stream (== stream_) and
// never waited on the host: the stream orders them, so they can be
// captured. A launch failure aborts the communicator, which async_error()
// reports at once.
void CudaGraphEngine::all_reduce(float* data, size_t count) {
  if (tp_ == 1) return;
  tp_group_.all_reduce_sum(data, count);
  check_tp(tp_group_.async_error(), "all-reduce");
}

void CudaGraphEngine::all_gather(const float* send, float* recv, size_t count, const char* what) {
  tp_group_.all_gather(send, recv, count);
  check_tp(tp_group_.async_error(), what);
}

void CudaGraphEngine::enqueue_step(int n, int head_count, bool gathered) {
  const int H = config_.hidden, V = dims_.vocab;
  // Only prefills gather their head rows; a decode step has one row per slot.
  enqueue_layers(n, /*decode_step=*/!gathered);
  const Bf16* head_x = buf_.xn;
  if (gathered) {
    models::cuda::gather_rows_bf16(buf_.head_x, buf_.xn, buf_.head_rows, head_count, H, stream_);
    head_x = buf_.head_x;
  }
  // cuBLASLt streams a vocabulary-wide head faster past kTileHeadMaxRows
  // rows (the tiles' row blocks would each read it from HBM). After folded
  // layers xn holds the final norm's input unnormalised: the head's tiles
  // scale by the norm, or a norm kernel finishes it for cuBLASLt; after the
  // others (quantized projections, adapters) the last layer's norm did.
  models::cuda::FoldedNorm head_norm;
  bool head_on_lt = !gathered && n > kTileHeadMaxRows;
  if (!gathered && folds_norms(n)) {
    if (norm_chunk() == models::cuda::kNormChunk && n <= kTileHeadMaxRows &&
        models::cuda::folded_norm_supported(n, H, V)) {
      head_norm.in_sumsq = buf_.sumsq, head_norm.eps = config_.rms_eps;
    } else {
      models::cuda::add_rmsnorm_bf16(buf_.x, nullptr, final_norm_, buf_.xn, n, H, config_.rms_eps,
                                     stream_);
    }
  }
  if (head_on_lt) {
    const Status s = lt_->run(buf_.logits, head_x, lm_head_, head_count, H, V);
    COHORT_CHECK_MSG(s.is_ok(), "LM head [{}x{}]x[{}x{}]: {}", head_count, H, V, H, s.message());
  } else {
    gemm_bf16(buf_.logits, head_x, lm_head_, head_count, H, V, models::cuda::GemvOutput::kStore,
              head_norm);
  }
  // One rank holds the whole vocabulary: its picks are the tokens.
  models::cuda::row_argmax(buf_.pairs, buf_.logits, head_count, V, dims_.vocab_begin, stream_,
                           tp_ == 1 ? buf_.tokens : nullptr);
  if (tp_ > 1) {
    all_gather(buf_.pairs, buf_.pairs_all, 2 * static_cast<size_t>(head_count), "argmax gather");
    models::cuda::merge_argmax(buf_.tokens, buf_.pairs_all, tp_, head_count, stream_);
  }
}

void CudaGraphEngine::fetch_logits(int head_count, int real_rows, float* logits) {
  const size_t Vl = dims_.vocab, V = config_.vocab_size;
  // The copies below go to pageable memory, which blocks the host until the
  // stream gets there: wait (bounded) for the step and the gather first.
  if (tp_ == 1) {
    wait_step("step");
    COHORT_CUDA_CHECK_FATAL(
        cudaMemcpyAsync(logits, buf_.logits, real_rows * Vl * 4, cudaMemcpyDeviceToHost, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));
    return;
  }
  const size_t local = static_cast<size_t>(head_count) * Vl;
  all_gather(buf_.logits, buf_.gathered, local, "logits gather");
  wait_step("step and logits gather");
  host_gathered_.resize(local * tp_);
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(host_gathered_.data(), buf_.gathered,
                                          host_gathered_.size() * 4, cudaMemcpyDeviceToHost,
                                          stream_));
  COHORT_CUDA_CHECK_FATAL(cudaStreamSynchronize(stream_));
  for (int k = 0; k < tp_; ++k) {  // rank k holds vocab columns [k * Vl, (k + 1) * Vl)
    for (int r = 0; r < real_rows; ++r) {
      const float* src = host_gathered_.data() + k * local + r * Vl;
      std::copy(src, src + Vl, logits + r * V + k * Vl);
    }
  }
}

// The rows of the slots that changed since the last upload (a few a decode
// step, of up to max_running). The copy runs in stream order, after the
// steps enqueued before it have read the device's table; the pinned copy
// is rewritten only once the last upload from it has run (run() waits for
// its step, launch() for the last launch's staging).
void CudaGraphEngine::upload_table(const KvBlockPool::Rows& rows) {
  if (rows.empty()) return;
  const size_t per_slot = static_cast<size_t>(pool_->blocks_per_slot());
  const size_t begin = static_cast<size_t>(rows.first) * per_slot, end = static_cast<size_t>(rows.end) * per_slot;
  const std::vector<int32_t>& table = pool_->table();
  std::copy(table.begin() + static_cast<std::ptrdiff_t>(begin), table.begin() + static_cast<std::ptrdiff_t>(end),
            host_table_ + begin);
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(block_table_ + begin, host_table_ + begin, (end - begin) * 4,
                                          cudaMemcpyHostToDevice, stream_));
}

void CudaGraphEngine::stage_rows(int n, int head_count, bool gathered) {
  // A prefill's attention tiles (up to one a row) follow the positions.
  tile_count_ = 0;
  if (gathered && prefill_tiles_) {
    tiles_.clear();
    models::prefill_attention_tiles(host_rows_ + max_rows_, host_rows_ + 2 * max_rows_, decode_rows_, n,
                                    tiles_);
    std::copy(tiles_.begin(), tiles_.end(), host_rows_ + 3 * max_rows_);
    tile_count_ = static_cast<int>(tiles_.size() / 2);
    tile_longest_ = 0;
    for (size_t t = 0; t < tiles_.size(); t += 2) {
      tile_longest_ = std::max(tile_longest_, host_rows_[2 * max_rows_ + tiles_[t] + tiles_[t + 1] - 1] + 1);
    }
  }
  for (int part = 0; part < 3; ++part) {
    COHORT_CUDA_CHECK_FATAL(
        cudaMemcpyAsync(buf_.rows + part * max_rows_, host_rows_ + part * max_rows_,
                        static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
  }
  if (lora_.on) stage_lora_rows(n, gathered);
  if (tile_count_ > 0) {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(buf_.rows + 3 * max_rows_, host_rows_ + 3 * max_rows_,
                                            tiles_.size() * 4, cudaMemcpyHostToDevice, stream_));
  }
  if (gathered) {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(buf_.head_rows, host_head_rows_,
                                            static_cast<size_t>(head_count) * 4,
                                            cudaMemcpyHostToDevice, stream_));
  }
}

cudaGraphExec_t CudaGraphEngine::capture_step(int n, int head_count, bool gathered) {
  cudaGraph_t captured;
  COHORT_CUDA_CHECK_FATAL(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  enqueue_step(n, head_count, gathered);
  COHORT_CUDA_CHECK_FATAL(cudaStreamEndCapture(stream_, &captured));
  cudaGraphExec_t exec;
  COHORT_CUDA_CHECK_FATAL(cudaGraphInstantiate(&exec, captured, 0));
  COHORT_CUDA_CHECK_FATAL(cudaGraphDestroy(captured));
  return exec;
}

void CudaGraphEngine::run(int n, int head_count, int real_rows, bool use_graph, bool gathered,
                          float* logits, int32_t* greedy) {
  const StepTiming timing = enqueue_run(n, head_count, use_graph, gathered, false, nullptr,
                                        {step_begin_, step_staged_, step_end_});
  if (logits) {
    fetch_logits(head_count, real_rows, logits);
    return;
  }
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(host_tokens_, buf_.tokens,
                                          static_cast<size_t>(real_rows) * 4,
                                          cudaMemcpyDeviceToHost, stream_));
  wait_step("step");
  std::copy(host_tokens_, host_tokens_ + real_rows, greedy);
  account(timing);
}

StepTiming CudaGraphEngine::enqueue_run(int n, int head_count, bool use_graph, bool gathered,
                                                         bool fed, cudaEvent_t after_staging,
                                                         const std::array<cudaEvent_t, 3>& events) {
  COHORT_CUDA_CHECK_FATAL(cudaSetDevice(options_.device));
  // Timed: decode steps replayed from a graph (not the eager and capturing
  // runs of warm-up), and the eager prompt and mixed steps, with the host's
  // time enqueuing them (what a step waits for when launches outrun it).
  StepTiming t;
  t.graph_timed = time_steps_ && use_graph && graphs_.count(n) > 0;
  t.timed = t.graph_timed || (time_steps_ && !use_graph);
  t.n = n;
  t.begin = events[0], t.staged = events[1], t.end = events[2];
  t.wall_begin = std::chrono::steady_clock::now();
  if (t.timed) COHORT_CUDA_CHECK_FATAL(cudaEventRecord(t.begin, stream_));
  upload_table(pool_->take_changed());
  stage_rows(n, head_count, gathered);
  int32_t* const sources = buf_.rows + kTokenSourcePart * max_rows_;
  if (fed) {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(sources, host_rows_ + kTokenSourcePart * max_rows_,
                                            static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, stream_));
  }
  if (after_staging) COHORT_CUDA_CHECK_FATAL(cudaEventRecord(after_staging, stream_));
  if (fed) models::cuda::take_tokens(buf_.rows, buf_.tokens, sources, n, stream_);
  // Decode buckets keep the projection family warm-up chose for them.
  const auto choice = bucket_skinny_.find(n);
  skinny_enabled_ = gathered || choice == bucket_skinny_.end() || choice->second;
  auto graph = graphs_.find(n);
  if (!use_graph) {
    const auto enqueue_begin = std::chrono::steady_clock::now();
    enqueue_step(n, head_count, gathered);
    t.launch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue_begin).count();
  } else if (graph != graphs_.end()) {
    if (t.timed) COHORT_CUDA_CHECK_FATAL(cudaEventRecord(t.staged, stream_));
    const auto launch_begin = std::chrono::steady_clock::now();
    COHORT_CUDA_CHECK_FATAL(cudaGraphLaunch(graph->second, stream_));
    t.launch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_begin).count();
  } else if (bucket_runs_[n]++ == 0) {
    // The first step of a size runs eagerly: cuBLAS and NCCL settle their
    // algorithms and lazy state before anything is captured.
    enqueue_step(n, head_count, gathered);
  } else {
    graphs_[n] = capture_step(n, head_count, gathered);
    COHORT_CUDA_CHECK_FATAL(cudaGraphLaunch(graphs_[n], stream_));
  }
  if (t.timed) COHORT_CUDA_CHECK_FATAL(cudaEventRecord(t.end, stream_));
  return t;
}

void CudaGraphEngine::account(const StepTiming& t) {
  if (!t.timed) return;
  float ms = 0, graph_ms = 0;
  COHORT_CUDA_CHECK_FATAL(cudaEventElapsedTime(&ms, t.begin, t.end));
  if (t.graph_timed) COHORT_CUDA_CHECK_FATAL(cudaEventElapsedTime(&graph_ms, t.staged, t.end));
  const int bucket = static_cast<int>(std::bit_ceil(static_cast<unsigned>(t.n)));
  StepTimes& times = t.graph_timed ? step_times_[t.n] : eager_times_[bucket];
  ++times.steps;
  times.rows += t.n;
  times.gpu_s += ms / 1e3;
  times.graph_s += graph_ms / 1e3;
  times.launch_s += t.launch_s;
  times.wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t.wall_begin).count();
}

void CudaGraphEngine::log_step_times() const {
  for (const auto& [n, t] : step_times_) {
    spdlog::info("infer: decode steps of {} rows: {} timed, GPU {:.1f} us a step (row copies and "
                 "graph; the graph {:.1f}), host {:.1f} us in cudaGraphLaunch, wall {:.1f} us a step "
                 "(with the token copy back and the wait)",
                 n, t.steps, 1e6 * t.gpu_s / t.steps, 1e6 * t.graph_s / t.steps,
                 1e6 * t.launch_s / t.steps, 1e6 * t.wall_s / t.steps);
  }
  for (const auto& [bucket, t] : eager_times_) {
    spdlog::info("infer: eager steps of {} to {} rows: {} timed, {:.0f} rows on average, GPU {:.1f} us a step "
                 "({:.2f} us a row), host {:.1f} us enqueuing, wall {:.1f} us a step",
                 bucket / 2 + 1, bucket, t.steps, static_cast<double>(t.rows) / t.steps, 1e6 * t.gpu_s / t.steps,
                 1e6 * t.gpu_s / static_cast<double>(std::max<int64_t>(1, t.rows)), 1e6 * t.launch_s / t.steps,
                 1e6 * t.wall_s / t.steps);
  }
}

}  // namespace cohort::models::decode
