// CudaGraphEngine's warm-up (see warm_up() in cuda_graph_state.h): cuBLASLt's
// plans tuned for the decode buckets (tune_projections, while the weights
// are read), then every step shape run once before the first request, and
// each bucket's projection family chosen by measuring both.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "base/check.h"
#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"
#include "models/ops/fp8_rows.h"

namespace cohort::models::decode {

// A decode bucket both the skinny GEMM and cuBLASLt can serve is captured
// both ways and each graph replayed a few times; the faster one is kept.
// Which wins depends on the shape and the rows (bench/RESULTS.md), and a
// measurement at load beats a table of guesses. The rows must be staged.
void CudaGraphEngine::choose_projections(int n) {
  cudaEvent_t begin, end;
  COHORT_CUDA_CHECK_FATAL(cudaEventCreate(&begin));
  COHORT_CUDA_CHECK_FATAL(cudaEventCreate(&end));
  constexpr int kReplays = 5;
  float best = 0, other = 0;
  cudaGraphExec_t keep = nullptr;
  bool keep_skinny = true;
  for (bool skinny : {true, false}) {
    skinny_enabled_ = skinny;
    enqueue_step(n, n, false);  // lazy kernel loading and cuBLAS state, outside the capture
    const cudaGraphExec_t exec = capture_step(n, n, false);
    COHORT_CUDA_CHECK_FATAL(cudaGraphLaunch(exec, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaEventRecord(begin, stream_));
    for (int i = 0; i < kReplays; ++i) COHORT_CUDA_CHECK_FATAL(cudaGraphLaunch(exec, stream_));
    COHORT_CUDA_CHECK_FATAL(cudaEventRecord(end, stream_));
    wait_step("choosing the projections");
    float ms = 0;
    COHORT_CUDA_CHECK_FATAL(cudaEventElapsedTime(&ms, begin, end));
    if (keep == nullptr || ms < best) {
      if (keep) COHORT_CUDA_CHECK_FATAL(cudaGraphExecDestroy(keep));
      other = best, best = ms, keep = exec, keep_skinny = skinny;
    } else {
      other = ms;
      COHORT_CUDA_CHECK_FATAL(cudaGraphExecDestroy(exec));
    }
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  graphs_[n] = keep;
  bucket_skinny_[n] = keep_skinny;
  bucket_runs_[n] = 2;
  skinny_enabled_ = true;
  spdlog::info("infer: decode steps of {} rows: {} projections, {:.1f} us a step against {:.1f}",
               n, keep_skinny ? "tensor-core skinny" : "cuBLASLt", 1e3 * best / kReplays,
               1e3 * other / kReplays);
}

// cuBLASLt plans for every decode bucket shape it may serve, including
// those the skinny GEMM may win (choose_projections measures both), timed
// on scratch memory rather than the model's weights: a GEMM's time does not
// depend on the values, so this runs while the weights are still being read
// from disk (make_cuda_graph_engine). The scratch spans more than L2 holds,
// so that each timed run reads its weights from HBM as a real step does.
Status CudaGraphEngine::tune_projections() {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const size_t H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const size_t V = dims_.vocab;
  const std::vector<int> buckets = decode_buckets(options_.slots);
  const size_t B = buckets.back();
  const struct { size_t in, out; } shapes[] = {{H, Qd + 2 * KVd}, {Qd, H}, {H, 2 * I}, {I, H}, {H, V}};
  size_t widest_in = 0, widest_out = 0, largest = 0;
  for (const auto& g : shapes) {
    widest_in = std::max(widest_in, g.in), widest_out = std::max(widest_out, g.out);
    largest = std::max(largest, g.in * g.out * 2);
  }
  const size_t weight_bytes = std::max(largest, size_t{256} << 20);
  // Freed on every way out, errors included: the scratch is most of a
  // gigabyte at the 8B shape.
  void *w = nullptr, *x = nullptr, *y = nullptr;
  const auto free_scratch = [](void** p) { cudaFree(*p); };
  const std::unique_ptr<void*, decltype(free_scratch)> w_owner(&w, free_scratch),
      x_owner(&x, free_scratch), y_owner(&y, free_scratch);
  COHORT_CUDA_CHECK(cudaMalloc(&w, weight_bytes));
  // Rows for the FP8 form's padding too (tune_fp8_projections).
  const size_t rows = models::fp8_rows_padded(int(B));
  COHORT_CUDA_CHECK(cudaMalloc(&x, rows * widest_in * 2));
  COHORT_CUDA_CHECK(cudaMalloc(&y, rows * widest_out * 4));
  COHORT_CUDA_CHECK(cudaMemsetAsync(w, 0, weight_bytes, stream_));
  COHORT_CUDA_CHECK(cudaMemsetAsync(x, 0, rows * widest_in * 2, stream_));
  int tuned = 0;
  Status status;
  skinny_enabled_ = false;
  for (int b : buckets) {
    for (const auto& g : shapes) {
      if (projection(b, static_cast<int>(g.in)) != Projection::kCublasLt) continue;
      // As many distinct copies as the scratch holds, up to one a layer.
      const size_t bytes = g.in * g.out * 2;
      const size_t copies = std::clamp<size_t>(weight_bytes / bytes, 1, config_.layers);
      std::vector<const Bf16*> views;
      for (size_t c = 0; c < copies; ++c) views.push_back(static_cast<const Bf16*>(w) + c * bytes / 2);
      // Past 64 rows the heuristic's first picks run enough blocks to keep
      // HBM busy, and timing all eight candidates of every bucket would be
      // most of the load time at 256 slots.
      status = lt_->tune(static_cast<float*>(y), static_cast<const Bf16*>(x), views, b,
                         static_cast<int>(g.in), static_cast<int>(g.out), b > 64 ? 3 : 8);
      if (!status.is_ok()) {
        status = status.with_context("tuning [" + std::to_string(b) + "x" + std::to_string(g.in) +
                                     "]x[" + std::to_string(g.in) + "x" + std::to_string(g.out) + "]");
        break;
      }
      ++tuned;
    }
    if (!status.is_ok()) break;
  }
  skinny_enabled_ = true;
  if (status.is_ok()) status = tune_fp8_projections(buckets, w, weight_bytes, x, y, &tuned);
  cudaStreamSynchronize(stream_);  // the scratch is freed on return
  spdlog::info("infer: {} cuBLASLt plans tuned in {:.2f} s (beside the weights' read)", tuned,
               std::chrono::duration<double>(Clock::now() - start).count());
  return status;
}

// The FP8 form's plans (cuda_tuned_gemm.h) for the decode buckets past the
// quantized GEMV's rows, when the projections will be FP8 in 128 x 128
// blocks, timed like tune_projections' on its scratch: codes, zero scales
// (a GEMM's time does not depend on them). The output projections are
// tuned both to store and to add (which one a step takes depends on the
// bucket's projection family). Where cuBLASLt has no such GEMM nothing is
// tuned: alloc_buffers' probe then keeps the weights on the other paths.
Status CudaGraphEngine::tune_fp8_projections(const std::vector<int>& buckets, void* w, size_t weight_bytes, void* x,
                                             void* y, int* tuned) {
  const auto& format = options_.projection_format ? options_.projection_format : options_.packed_bytes_like;
  if (format != models::quant::WeightFormat::kFp8Block) return Status::ok();
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  const struct { int in, out; bool accumulate; } shapes[] = {
      {H, Qd + 2 * KVd, false}, {Qd, H, false}, {Qd, H, true}, {H, 2 * I, false}, {I, H, false}, {I, H, true}};
  const int widest = std::max({H, Qd, I}), B = buckets.back();
  float* scales = nullptr;
  const size_t scale_floats = size_t(models::fp8_rows_padded(B)) * (widest / 128) +
                              size_t(std::max({Qd + 2 * KVd, H, 2 * I}) / 128) * TunedGemm::fp8_scale_stride(widest);
  COHORT_CUDA_CHECK(cudaMalloc(&scales, scale_floats * 4));
  const auto free_scales = [](float** p) { cudaFree(*p); };
  const std::unique_ptr<float*, decltype(free_scales)> scales_owner(&scales, free_scales);
  COHORT_CUDA_CHECK(cudaMemsetAsync(scales, 0, scale_floats * 4, stream_));
  for (int b : buckets) {
    if (b <= models::cuda::kQuantGemvMaxRows) continue;
    const int n = models::fp8_rows_padded(b);
    for (const auto& g : shapes) {
      if (g.in % 128 != 0 || g.out % 128 != 0) continue;
      const size_t bytes = size_t(g.in) * g.out;
      const size_t copies = std::clamp<size_t>(weight_bytes / bytes, 1, config_.layers);
      std::vector<TunedGemm::Fp8Operands> operands(copies);
      for (size_t c = 0; c < copies; ++c) {
        operands[c].x = static_cast<const uint8_t*>(x);
        operands[c].x_scales = scales;
        operands[c].w = static_cast<const uint8_t*>(w) + c * bytes;
        operands[c].w_scales = scales + size_t(n) * (widest / 128);
      }
      const Status s = lt_->tune_fp8(static_cast<float*>(y), operands, n, g.in, g.out, g.accumulate, b > 64 ? 3 : 8);
      if (!s.is_ok()) {
        spdlog::info("infer: no FP8 GEMM plans tuned ({})", s.message());
        return Status::ok();
      }
      ++*tuned;
    }
  }
  return Status::ok();
}

// The calibration prompt: tokens spread over the vocabulary (a fixed
// sequence, so every rank of a tensor-parallel group and every start of
// the same model measures the same values), as long as the cache and the
// row buffers allow, up to 512 positions.
void CudaGraphEngine::calibrate_kv_scales() {
  const int n = static_cast<int>(std::min<int64_t>(
      {options_.capacity, max_rows_, 512, int64_t{pool_->total()} * kKvBlockSize}));
  const size_t heads = 2 * size_t(dims_.kv_heads);
  for (const Layer& L : layers_) COHORT_CUDA_CHECK_FATAL(cudaMemsetAsync(L.kv_amax, 0, heads * 4, stream_));
  release(0);
  hold(0, n);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    host_rows_[i] = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(config_.vocab_size));
    host_rows_[max_rows_ + i] = 0;
    host_rows_[2 * max_rows_ + i] = i;
  }
  host_head_rows_[0] = n - 1;
  int32_t unused = 0;
  calibrating_ = true;
  run(n, 1, 0, false, true, nullptr, &unused);
  calibrating_ = false;
  release(0);
  std::vector<float> amax(heads);
  kv_scales_host_.clear();
  float widest = 0, narrowest = 0;
  for (const Layer& L : layers_) {
    COHORT_CUDA_CHECK_FATAL(cudaMemcpy(amax.data(), L.kv_amax, heads * 4, cudaMemcpyDeviceToHost));
    std::vector<float> scales(heads);
    for (size_t h = 0; h < heads; ++h) scales[h] = models::kv_fp8_scale(amax[h]);
    COHORT_CUDA_CHECK_FATAL(cudaMemcpy(L.kv_scales, scales.data(), heads * 4, cudaMemcpyHostToDevice));
    for (float s : scales) {
      widest = kv_scales_host_.empty() ? s : std::max(widest, s);
      narrowest = kv_scales_host_.empty() ? s : std::min(narrowest, s);
      kv_scales_host_.push_back(s);
    }
  }
  spdlog::info("infer: fp8 KV cache scales from a {}-token calibration prefill: 2^{} to 2^{} over {} heads",
               n, static_cast<int>(std::log2(narrowest)), static_cast<int>(std::log2(widest)),
               kv_scales_host_.size());
}

void CudaGraphEngine::warm_up() {
  // Where warm-up's time goes, logged at the end: it is most of the load
  // time past the weights at large batch sizes.
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
  if (options_.kv_dtype == models::KvDtype::kFp8) calibrate_kv_scales();
  const int spare = options_.slots;  // the KV slot padding rows write to
  int32_t unused = 0;
  auto fill_rows = [&](int n, bool positions) {
    for (int i = 0; i < n; ++i) {
      host_rows_[i] = 0;
      host_rows_[max_rows_ + i] = spare;
      host_rows_[2 * max_rows_ + i] = positions ? i : 0;
    }
  };
  for (int n : {1, 32, 128, 512}) {
    if (n > std::min(max_rows_, options_.capacity)) break;
    fill_rows(n, true);
    host_head_rows_[0] = n - 1;
    run(n, 1, 0, false, true, nullptr, &unused);
  }
  const double prefill_s = seconds_since(start);
  // A pinned family (eager runs cannot measure graphs, and a pinned family
  // makes them comparable with graph runs); make_cuda_graph_engine checked it.
  const std::string& family = options_.overrides.projections;
  double choice_s = 0;
  int chosen = 0;
  const auto buckets_start = Clock::now();
  for (int b : buckets_) {
    fill_rows(b, false);
    if (family == "cublaslt") bucket_skinny_[b] = false;
    const bool choice = family.empty() && options_.cuda_graphs && tp_ == 1 &&
                        b > models::cuda::kGemvNormMaxRows &&
                        models::cuda::skinny_gemm_supported(b, config_.hidden);
    if (choice) {
      const auto choice_start = Clock::now();
      upload_table(pool_->take_changed());
      stage_rows(b, b, false);
      choose_projections(b);
      choice_s += seconds_since(choice_start);
      ++chosen;
    }
    run(b, b, 0, options_.cuda_graphs, false, nullptr, &unused);
    // With graphs the first run of a size is eager and the second captures.
    if (options_.cuda_graphs) run(b, b, 0, true, false, nullptr, &unused);
  }
  spdlog::info("infer: warm-up {:.2f} s: prefill shapes {:.2f} s, "
               "projections measured for {} buckets in {:.2f} s, {} decode buckets run{} in {:.2f} s",
               seconds_since(start), prefill_s, chosen, choice_s, buckets_.size(),
               options_.cuda_graphs ? " and captured" : "", seconds_since(buckets_start) - choice_s);
}

}  // namespace cohort::models::decode
