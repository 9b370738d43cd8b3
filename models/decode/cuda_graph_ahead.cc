// CudaGraphEngine's steps launched ahead (InferenceEngine::launch and
// collect): the server enqueues step t + 1 before it reads step t's picks,
// so the GPU starts it as soon as step t ends instead of waiting for the
// host to read, hand out, plan and upload between them.
//
// Each launch copies its picks into a pinned buffer of its own (two, as
// at most two launches are uncollected) and records an event after the
// copy; collect() waits for that event alone. The pinned staging buffers
// (rows, block table, adapters' rows) are shared: a launch first waits
// until the one before has read them, which it has done by the time the
// step before that ended. A decode row fed by the previous step gets its
// token on the device (take_tokens, before the step's graph), and its
// prefix-cache key once the host reads that token.
#include "base/check.h"
#include "base/cuda_check.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {

Status CudaGraphEngine::alloc_ahead() {
  for (int k = 0; k < 2; ++k) {
    COHORT_CUDA_CHECK(cudaMallocHost(&ahead_.tokens[k], static_cast<size_t>(max_batch_) * 4));
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&ahead_.done[k], cudaEventDisableTiming));
    if (time_steps_) {
      for (cudaEvent_t& e : ahead_.timer[k]) COHORT_CUDA_CHECK(cudaEventCreate(&e));
    }
  }
  COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&ahead_.staged, cudaEventDisableTiming));
  return Status::ok();
}

bool CudaGraphEngine::launch(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
                             const std::vector<Chunk>& chunks) {
  COHORT_CHECK_MSG(tp_ == 1, "a step launched ahead at tensor-parallel size {}", tp_);
  COHORT_CHECK_MSG(ahead_.launched.size() < 2, "a third launched step before the first is collected");
  COHORT_CUDA_CHECK_FATAL(cudaSetDevice(options_.device));
  if (ahead_.staging_pending) {
    COHORT_CUDA_CHECK_FATAL(cudaEventSynchronize(ahead_.staged));
    ahead_.staging_pending = false;
  }
  int rows = d;
  for (const Chunk& c : chunks) rows += c.n;
  const bool one_forward =
      chunks.empty() || (rows <= max_rows_ && d + static_cast<int>(chunks.size()) <= max_batch_);
  AheadSteps::Launched l;
  if (!one_forward) {
    // Several forwards: run now, the fed tokens read on the host first.
    std::vector<int32_t> tokens(decode_tokens, decode_tokens + d);
    for (int b = 0; b < d; ++b) {
      if (token_from[b] < 0) continue;
      COHORT_CHECK_MSG(!ahead_.launched.empty(), "decode row {} is fed by a step not in flight", b);
      const AheadSteps::Launched& previous = ahead_.launched.back();
      if (!previous.ran) COHORT_CUDA_CHECK_FATAL(cudaEventSynchronize(ahead_.done[previous.buffer]));
      tokens[b] = previous.ran ? previous.picks.at(token_from[b]) : ahead_.tokens[previous.buffer][token_from[b]];
    }
    l.ran = true;
    l.rows = d + static_cast<int>(chunks.size());
    l.picks.resize(l.rows);
    step(decode_slots, tokens.data(), d, chunks, nullptr, l.picks.data());
    ahead_.launched.push_back(std::move(l));
    return false;
  }
  bool fed = false;
  for (int b = 0; b < d; ++b) {
    if (token_from[b] < 0) continue;
    COHORT_CHECK_MSG(!ahead_.launched.empty(), "decode row {} is fed by a step not in flight", b);
    fed = true;
    l.fed.emplace_back(decode_slots[b], token_from[b]);
  }
  l.buffer = ahead_.next;
  ahead_.next ^= 1;
  const std::array<cudaEvent_t, 3> timer = {ahead_.timer[l.buffer][0], ahead_.timer[l.buffer][1],
                                            ahead_.timer[l.buffer][2]};
  if (chunks.empty()) {
    const int padded = stage_decode(decode_slots, decode_tokens, token_from, d);
    l.timing = enqueue_run(padded, padded, options_.cuda_graphs, false, fed, ahead_.staged, timer);
    l.rows = d;
  } else {
    const int n = stage_mixed(decode_slots, decode_tokens, token_from, d, chunks, 0, chunks.size());
    const int heads = d + static_cast<int>(chunks.size());
    decode_rows_ = d;
    l.timing = enqueue_run(n, heads, false, true, fed, ahead_.staged, timer);
    decode_rows_ = 0;
    l.rows = heads;
  }
  ahead_.staging_pending = true;
  COHORT_CUDA_CHECK_FATAL(cudaMemcpyAsync(ahead_.tokens[l.buffer], buf_.tokens, static_cast<size_t>(l.rows) * 4,
                                          cudaMemcpyDeviceToHost, stream_));
  COHORT_CUDA_CHECK_FATAL(cudaEventRecord(ahead_.done[l.buffer], stream_));
  ahead_.launched.push_back(std::move(l));
  return true;
}

void CudaGraphEngine::collect(int32_t* greedy) {
  COHORT_CHECK_MSG(!ahead_.launched.empty(), "collect() with no step launched");
  AheadSteps::Launched l = std::move(ahead_.launched.front());
  ahead_.launched.pop_front();
  if (l.ran) {
    std::copy(l.picks.begin(), l.picks.end(), greedy);
  } else {
    const cudaError_t e = cudaEventSynchronize(ahead_.done[l.buffer]);
    COHORT_CHECK_MSG(e == cudaSuccess, "a step launched ahead: {}", cudaGetErrorString(e));
    std::copy(ahead_.tokens[l.buffer], ahead_.tokens[l.buffer] + l.rows, greedy);
    account(l.timing);
  }
  // The step launched after this one fed some rows from these picks: now
  // their tokens are known, their positions get their prefix-cache keys.
  if (!ahead_.launched.empty()) {
    for (const auto& [slot, row] : ahead_.launched.front().fed) note(slot, greedy + row, 1);
  }
}

}  // namespace cohort::models::decode
