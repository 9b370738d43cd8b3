// StepBudget: how many prompt tokens a serving step may carry beside its
// decode rows so that the step, and with it every running stream's
// inter-token latency, stays within a time target (serve.itl_target_ms).
//
// Why: a step is one forward over the running sequences' next tokens and
// prompt chunks (scheduler.h). max_batched_tokens bounds its rows, but not
// its time: 8,192 prompt tokens take a few milliseconds on a 0.6B model and
// a few hundred on an 8B one, and every stream waits for the whole step.
// The budget comes from measured steps: a decode-only step's time (what
// the decode rows cost) and the time each prompt token adds to a step
// beyond that, both moving averages; a step with decode rows takes the
// prompt tokens that fit the target (at least one KV block's worth, so
// prompts always move). Steps without decode rows keep their whole token
// budget: nobody's next token waits for them.
//
// Rank 0 measures and decides; the cap travels to the other ranks of a
// tensor-parallel group with the step's input (serve_step.h), so every
// rank plans the same step. Clock-free: the caller passes each step's
// seconds. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::infer {

class StepBudget {
 public:
  // No cap while nothing is measured, or with target_s 0.
  static constexpr int64_t kUncapped = INT64_MAX;
  // The fewest prompt tokens a capped step takes: one KV block.
  static constexpr int64_t kFloorTokens = 16;

  explicit StepBudget(double target_s) : target_s_(target_s) {}

  // The prompt tokens the next step may take beside its decode rows
  // (Scheduler::step applies it only when it has decode rows).
  int64_t prompt_cap() const;
  // A step that ran `decode_rows` next tokens and `prompt_tokens` prompt
  // tokens in `seconds`.
  void observe(int decode_rows, int64_t prompt_tokens, double seconds);

  double decode_step_s() const { return decode_s_; }
  double prompt_token_s() const { return token_s_; }

 private:
  double target_s_;
  double decode_s_ = 0;  // a decode-only step; 0: none seen
  double prompt_s_ = 0, prompt_tokens_ = 0;  // averages of a step's prompt time and tokens
  double token_s_ = 0;   // their ratio: a prompt token's share of a step; 0: none seen
};

// ServeLoopStats: what the serving loop says of its steps as it stops: the
// time a step spent in the engine and around it (requests in, scheduling,
// tokens out: a plain step's GPU waits through that part; a step launched
// ahead overlaps it, so there it is what the loop adds beyond the GPU's
// pace), and what the step budget
// worked from (how many steps took prompt tokens beside decode rows, and
// its last estimates). Thread-compatible; rank 0's loop owns one.
class ServeLoopStats {
 public:
  // A step that ran `decode_rows` next tokens and `prompt_tokens` prompt
  // tokens in `engine_s`, in a loop iteration of `iteration_s` (the wait
  // for requests while idle not included).
  void observe(int decode_rows, int64_t prompt_tokens, double engine_s, double iteration_s);
  // The lines to log (none before a step).
  std::vector<std::string> closing_lines(const StepBudget& budget) const;

 private:
  int64_t steps_ = 0, mixed_steps_ = 0, mixed_tokens_ = 0;
  double engine_s_ = 0, iteration_s_ = 0;
};

}  // namespace cohort::infer
