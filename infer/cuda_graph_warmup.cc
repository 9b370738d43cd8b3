// CudaGraphEngine's warm-up (see warm_up() in cuda_graph_state.h): every
// step shape run once before the first request, cuBLASLt's plans tuned for
// the decode buckets, and each bucket's projection family chosen by
// measuring both.
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>

#include "base/check.h"
#include "base/cuda_check.h"
#include "base/env_knobs.h"
#include "infer/cuda_graph_state.h"

namespace cohort::infer {

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

void CudaGraphEngine::warm_up() {
  // Where warm-up's time goes, logged at the end: it is most of the load
  // time past the weights at large batch sizes.
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
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
  const auto tuning_start = Clock::now();
  int tuned = 0;
  // The projections of the buckets above the GEMV's rows, timed on the
  // engine's own buffers (their contents do not matter here).
  const int H = config_.hidden, Qd = dims_.q_dim(), KVd = dims_.kv_dim(), I = dims_.intermediate;
  std::vector<const Bf16*> qkv, o, gu, down;
  for (const Layer& L : layers_) {
    qkv.push_back(L.wqkv), o.push_back(L.wo), gu.push_back(L.wgu), down.push_back(L.wdown);
  }
  // cuBLASLt plans for every bucket shape it may serve, including those
  // the skinny GEMM may win (choose_projections measures both).
  skinny_enabled_ = false;
  for (int b : buckets_) {
    const struct { float* y; const Bf16* x; const std::vector<const Bf16*> w; int in, out; } shapes[] = {
        {buf_.qkv, buf_.xn, qkv, H, Qd + 2 * KVd}, {buf_.tmp, buf_.y, o, Qd, H},
        {buf_.gate_up, buf_.xn, gu, H, 2 * I},    {buf_.tmp, buf_.h, down, I, H},
        {buf_.logits, buf_.xn, {lm_head_}, H, dims_.vocab}};
    for (const auto& g : shapes) {
      if (projection(b, g.in) != Projection::kCublasLt) continue;
      // Past 64 rows the heuristic's first picks run enough blocks to keep
      // HBM busy, and timing all eight candidates of every bucket would be
      // most of the load time at 256 slots.
      const Status s = lt_->tune(g.y, g.x, g.w, b, g.in, g.out, b > 64 ? 3 : 8);
      COHORT_CHECK_MSG(s.is_ok(), "tuning [{}x{}]x[{}x{}]: {}", b, g.in, g.out, g.in, s.message());
      ++tuned;
    }
  }
  const double tuning_s = seconds_since(tuning_start);
  skinny_enabled_ = true;
  // COHORT_INFER_PROJECTIONS pins the family (eager runs cannot measure
  // graphs, and a pinned family makes them comparable with graph runs).
  const char* pinned = read_env_knob(EnvKnob::kInferProjections);
  const std::string family = pinned ? pinned : "";
  COHORT_CHECK_MSG(family.empty() || family == "skinny" || family == "cublaslt",
                   "COHORT_INFER_PROJECTIONS is '{}': expected skinny or cublaslt", family);
  double choice_s = 0;
  int chosen = 0;
  const auto buckets_start = Clock::now();
  for (int b : buckets_) {
    fill_rows(b, false);
    if (family == "cublaslt") bucket_skinny_[b] = false;
    const bool choice = family.empty() && options_.cuda_graphs && tp_ == 1 &&
                        b > models::cuda::kGemvNormMaxRows &&
                        models::cuda::skinny_gemm_supported(b, H);
    if (choice) {
      const auto choice_start = Clock::now();
      if (pool_->take_changed()) upload_table();
      stage_rows(b, b, false);
      choose_projections(b);
      choice_s += seconds_since(choice_start);
      ++chosen;
    }
    run(b, b, 0, options_.cuda_graphs, false, nullptr, &unused);
    // With graphs the first run of a size is eager and the second captures.
    if (options_.cuda_graphs) run(b, b, 0, true, false, nullptr, &unused);
  }
  spdlog::info("infer: warm-up {:.2f} s: prefill shapes {:.2f} s, {} cuBLASLt plans tuned in {:.2f} s, "
               "projections measured for {} buckets in {:.2f} s, {} decode buckets run{} in {:.2f} s",
               seconds_since(start), prefill_s, tuned, tuning_s, chosen, choice_s, buckets_.size(),
               options_.cuda_graphs ? " and captured" : "", seconds_since(buckets_start) - choice_s);
}

}  // namespace cohort::infer
