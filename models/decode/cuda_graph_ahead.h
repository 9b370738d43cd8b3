// The graph engine's record of its launched steps (cuda_graph_ahead.cc):
// each step's timing for the step timer, and the steps launched ahead of
// the host reading them, with the pinned buffers and events each uses.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace cohort::models::decode {

// A step's timing (CudaEngineOptions::Overrides::time_steps), from its
// enqueue to the host's read of its picks.
struct StepTiming {
  bool timed = false, graph_timed = false;
  int n = 0;
  double launch_s = 0;
  std::chrono::steady_clock::time_point wall_begin;
  cudaEvent_t begin = nullptr, staged = nullptr, end = nullptr;
};

// Steps launched and not yet collected, oldest first (at most two), and
// the two sets of pinned picks and events they take in turn.
struct AheadSteps {
  struct Launched {
    int buffer = 0;                 // its pinned picks and events: tokens[buffer], done[buffer], timer[buffer]
    int rows = 0;                   // picks (real rows)
    bool ran = false;               // run at once (several forwards): its picks below
    std::vector<int32_t> picks;
    std::vector<std::pair<int, int>> fed;  // (slot, the previous step's row) of its fed decode rows
    StepTiming timing;
  };
  int32_t* tokens[2] = {};        // pinned [B] each
  cudaEvent_t done[2] = {};       // after each one's copy of the picks
  cudaEvent_t timer[2][3] = {};   // begin, staged, end (time_steps)
  cudaEvent_t staged = nullptr;   // the newest launch has read the pinned staging
  bool staging_pending = false;
  std::deque<Launched> launched;
  int next = 0;
};

}  // namespace cohort::models::decode
