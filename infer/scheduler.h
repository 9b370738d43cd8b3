// Scheduler: continuous batching over a decode engine's slots (models/decode/engine.h), one step
// at a time. The offline job (generate_all) and the server (serve_job) both
// drive it; there is no other generation loop.
//
// A step is one forward (InferenceEngine::step), filled in order:
//   1. cancelled requests leave (a waiting one is dropped, a running one frees
//      its slot), each reported once with finish_reason "cancelled";
//   2. every sequence past its prefill gets its next token's row. When the
//      KV cache has no block for a row that needs one, the sequence admitted
//      last is preempted (vLLM's recompute): its blocks go back, and it
//      waits, ahead of new requests, with its sampler, its tokens so far and
//      its grammar state, to be prefilled again over its prompt and the
//      tokens it had generated (mostly from the prefix cache, where the
//      engine keeps one), after which it goes on where it stopped;
//   3. the rest of the step's token budget (max_batched_tokens) goes to
//      prompts: sequences part-way through theirs continue, then preempted
//      and waiting requests are admitted into free slots, oldest first,
//      while the cache's free blocks (after this step's decode rows) hold
//      their next chunk. Memory is taken as sequences grow, not reserved
//      for their whole length. A prompt longer than what is
//      left is cut, and the rest goes on in later steps, so running streams
//      keep getting a token every step.
// A sequence whose prompt ends in a step gets its first token from it. An
// admitted prompt starts past the part the engine's prefix cache holds
// (InferenceEngine::reuse_prefix), so a shared prefix is computed once; a
// prompt that starts like one admitted in the same step waits a step for
// that one's blocks (n choices of a request, a burst with one system prompt).
// With max_batched_tokens 0 (the offline job) prompts are prefilled whole,
// every one the free slots take, in as many forwards as the engine needs.
//
// Determinism: a sequence samples with its own generator (sampling.seed,
// stream), so its tokens do not depend on what it is batched with; decisions
// depend only on what was added and cancelled and in which order. Ranks of a
// tensor-parallel group that add and cancel the same requests before the same
// steps therefore make identical engine calls and pick identical tokens
// (serve_job.cc relies on this to keep followers in lockstep).
//
// Threading: one thread owns a Scheduler and its engine; a step picks the
// rows held to a grammar on up to kPickThreads short-lived threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/decode/engine.h"
#include "infer/prompts.h"
#include "models/token_sampler.h"
#include "text/token_constraint.h"

namespace cohort::infer {

struct SequenceRequest {
  int64_t id = 0;                 // unique among live requests; the caller's key
  std::vector<int32_t> prompt;    // never empty
  int max_new_tokens = 16;        // >= 1
  models::SamplingParams sampling;
  uint64_t sampler_stream = 0;    // the generator's stream (the offline job: the prompt index)
  std::shared_ptr<const StopCondition> stop;  // null: only max_new_tokens ends it
  // What a server's client asked for, behind `stop` (with the model's
  // end-of-sequence ids): the server sends these to its other ranks.
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  // Structured output: the grammar's spec as text (what the server sends
  // its other ranks; infer/structured_output.h), and the sequence's own
  // state in it, which holds each token to the grammar. The sequence ends
  // ("stop") once its text is a whole value.
  std::string constraint;
  std::shared_ptr<text::TokenConstraint> guide;
  int adapter = -1;               // serve.adapters: the LoRA adapter it runs with (engine index; -1: the base)
  bool logprobs = false;          // report each chosen token's log-probability
  int top_logprobs = 0;           // and the k likeliest tokens' (with logprobs; 0: none)
  // When the server accepted it (its first token's event then says how long
  // it waited for a slot); the default: not known.
  std::chrono::steady_clock::time_point arrived{};
};

struct TokenEvent {
  int64_t id = 0;
  int32_t token = -1;             // -1 for a cancellation
  float logprob = 0;              // when the request asked for logprobs
  bool finished = false;
  const char* finish_reason = ""; // "stop", "length" or "cancelled" when finished
  std::vector<std::pair<int32_t, float>> top;  // its top_logprobs likeliest (id, logprob), likeliest first
  // A request's first token: seconds from its arrival (SequenceRequest::
  // arrived) to the step that started its prompt, and from that step's
  // planning to this token's pick (its prefill, over one step or several);
  // -1 on later tokens, and queued_s where the arrival is not known.
  double queued_s = -1, prefill_s = -1;
};

// A step's time is prefill_s when it carried prompt tokens, else decode_s
// (decode-only steps, whose rate is the engine's decode speed).
struct StepStats {
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tokens = 0;     // prompt tokens that went through the engine
  int decode_batch = 0;           // sequences in a decode-only step (0: none, or the step had prompts)
  int decode_rows = 0;            // sequences that got a next token beside any prompts
  int admitted = 0;               // requests that took a slot this step
  int64_t prefix_hit_tokens = 0;  // of their prompts, positions found in the engine's prefix cache
  int preempted = 0;              // running sequences sent back to wait for KV blocks
};

struct SchedulerOptions {
  // Tokens one step's forward takes, decode rows first (at least one prompt
  // token a step beyond them, so prompts always move); 0: no bound but the
  // engine's rows, and prompts go whole.
  int max_batched_tokens = 0;
  // Full logits for every call even when all sequences decode greedily (for
  // on_logits); must be alike on every rank of a tensor-parallel group.
  bool return_logits = false;
  std::function<void(int64_t id, const float* logits, int vocab)> on_logits;
  // Launch each step of greedy rows before reading the tokens of the one
  // before (InferenceEngine::launch), where the engine can run ahead: its
  // next step is queued while the host hands out the last one's tokens
  // and plans, so the device does not wait for the host between steps.
  // step() then returns the tokens of the step before the one it
  // launched (a sequence that ended there had a row in the new step, whose
  // token is dropped). Steps whose rows want logits (sampling, logprobs,
  // penalties, grammars) run as plain steps; they, cancellations,
  // preemptions and steps the engine ran as several forwards wait for the
  // step in flight first. The server and the offline job turn it on
  // (run_ahead_switch()).
  bool run_ahead = false;
};

// SchedulerOptions::run_ahead as the jobs set it: on, unless
// COHORT_INFER_RUN_AHEAD=0; another value is an error naming it. Every rank
// of a job reads the same environment, so a tensor-parallel group agrees.
Result<bool> run_ahead_switch();

class Scheduler {
 public:
  Scheduler(models::decode::InferenceEngine& engine, SchedulerOptions options);

  // Queues a request (unbounded: the caller bounds its queue). Errors when
  // the prompt plus max_new_tokens does not fit a slot or the whole KV
  // cache, naming the numbers.
  Status add(SequenceRequest request);
  // The request leaves at the next step; unknown ids are ignored.
  void cancel(int64_t id);
  // One step; the tokens it produced, in slot order. `prompt_cap` bounds
  // the prompt tokens of a step that has decode rows (a server's time
  // budget, step_budget.h); at least one token still goes, so prompts move.
  std::vector<TokenEvent> step(StepStats* stats = nullptr, int64_t prompt_cap = INT64_MAX);

  bool idle() const {
    return waiting_.empty() && preempted_.empty() && running_ == 0 && cancels_.empty() && !in_flight_;
  }
  // Whether a sequence running, preempted or waiting uses adapter `index`.
  bool uses_adapter(int index) const;
  int running() const { return running_; }
  // Waiting requests, preempted ones included.
  int waiting() const { return static_cast<int>(waiting_.size() + preempted_.size()); }
  int slots() const { return engine_.slots(); }
  // KV positions held by running sequences, and the cache's total.
  int64_t kv_used() const;
  int64_t kv_total() const { return engine_.kv_blocks() * engine_.kv_block_size(); }
  // KV blocks the running sequences hold (a block two share counted twice).
  int64_t kv_held_blocks() const;
  // Sequences preempted since the start.
  int64_t preemptions() const { return preemptions_; }
  int capacity() const { return engine_.capacity(); }
  // Since the start: prompt tokens of admitted requests, and how many of
  // them the engine's prefix cache already held.
  int64_t prompt_tokens_admitted() const { return prompt_tokens_admitted_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  struct Slot {
    bool busy = false;
    SequenceRequest req;
    models::TokenSampler sampler{models::SamplingParams{}, 0};
    // A preempted sequence's prompt and the tokens it had generated: what
    // it prefills when it comes back (empty: it prefills its prompt).
    std::vector<int32_t> resume;
    size_t prefilled = 0;          // tokens of its prefill in the cache
    int64_t cached = 0;            // positions in the KV cache
    std::vector<int32_t> generated;
    int64_t order = 0;             // admission order: the newest is preempted first
    std::chrono::steady_clock::time_point admitted{};  // when its first step was planned
    // Running ahead: its output row in the newest launched step, whose token
    // the host has not read yet (-1: none; its next input is generated.back()).
    int in_flight_row = -1;
  };
  // A step's rows in the engine's order: decode rows, then prompt chunks,
  // one output row each.
  using Chunk = models::decode::InferenceEngine::Chunk;
  struct Plan {
    std::vector<int> decode_slots;
    std::vector<int32_t> decode_tokens;
    std::vector<int> token_from;   // running ahead: the step in flight's output row giving the token, or -1
    std::vector<Chunk> chunks;
    std::vector<int> out_slots;    // each output row's slot
    std::vector<int64_t> out_ids;  // and its request then
    std::vector<bool> used;        // whether it is the sequence's next token (a chunk must end its prompt)
    bool logits = false;           // some used row picks from logits on the host
    int64_t prefill_tokens = 0;
  };
  // Cancellations out, preemptions for blocks, then the step's rows; false
  // when there is nothing to run.
  bool plan_step(Plan& p, StepStats& st, int64_t prompt_cap, std::vector<TokenEvent>& events);
  // The slots' positions once the step's rows are in the engine.
  void advance(const Plan& p);
  // The step's rows and time (`seconds`) into `st`.
  static void record(const Plan& p, double seconds, StepStats& st);
  // Runs the step at once (engine_.step) and emits its tokens; its time
  // is from the call to the last token emitted.
  void run_plain(const Plan& p, std::vector<TokenEvent>& events, StepStats& st);
  // Picks each used row's token (from logits_ where p.logits, else greedy_)
  // and emits it; rows whose slot no longer holds the request are skipped.
  void finish(const Plan& p, std::vector<TokenEvent>& events);
  // Scheduler steps with a step in flight (scheduler_ahead.cc).
  std::vector<TokenEvent> step_ahead(StepStats* stats, int64_t prompt_cap);
  struct InFlight {
    Plan plan;
    bool feeds_next = false;  // the next launch may take tokens from its outputs
    std::chrono::steady_clock::time_point launched;
  };
  // Reads launched step f's tokens (the oldest uncollected) and emits them,
  // its rows and time into `st`; `newest`: no step is launched after it.
  void collect(InFlight f, bool newest, std::vector<TokenEvent>& events, StepStats& st);
  // Whether any sequence running, preempted or waiting picks from logits.
  bool any_wants_logits() const;
  static const std::vector<int32_t>& prefill_of(const Slot& s) { return s.resume.empty() ? s.req.prompt : s.resume; }
  int64_t blocks_needed(const SequenceRequest& r) const;

  void drop_cancelled(std::vector<TokenEvent>& events);
  // The step's prompt chunks: sequences part-way through their prompt, then
  // admissions, within `budget` prompt tokens; `empty_step`: no decode row,
  // so a prompt an engine cannot cut may go whole past the budget.
  void plan_prompts(std::vector<Chunk>& chunks, StepStats& st, int budget, bool empty_step);
  int64_t blocks_for(int64_t positions) const;
  // Blocks n more positions take a sequence at `cached`.
  int64_t growth(int64_t cached, int64_t n) const;
  // Blocks free for this step: the engine's count where it keeps one (a
  // prefix cache shares blocks), else the cache less what slots hold.
  int64_t free_blocks() const;
  // The newest running sequence leaves for preempted_; its slot is freed.
  void preempt_newest();
  // Takes a free slot for the oldest preempted sequence, else the queue's
  // head, when `free` blocks (what this step's decode rows and earlier
  // chunks leave) hold its first `chunk` positions; -1 otherwise.
  int admit_next(int chunk, int64_t free);
  // Whether `prompt`'s first KV block is that of a prompt whose first chunk
  // is among `chunks` (admitted this step).
  // Free blocks once this step's decode rows and `chunks` have grown.
  int64_t free_after(const std::vector<Chunk>& chunks) const;
  bool starts_like_an_admission(const std::vector<int32_t>& prompt, const std::vector<Chunk>& chunks) const;
  // Whether the request's tokens are picked from logits on the host.
  bool wants_logits(const SequenceRequest& r) const;
  // Records token t for slot s; false when the sequence ended (slot freed).
  bool emit(int s, int32_t t, const float* row, std::vector<TokenEvent>& events);
  // `penalized`: the caller's buffer for a row that penalties or a grammar change.
  int32_t pick(Slot& slot, const float* row, int32_t device_greedy, bool have_logits, std::vector<float>& penalized);
  // Threads that pick rows held to a grammar at once.
  static constexpr size_t kPickThreads = 8;
  void release(int s);

  models::decode::InferenceEngine& engine_;
  SchedulerOptions options_;
  std::vector<Slot> slots_;
  std::deque<SequenceRequest> waiting_;
  std::deque<Slot> preempted_;   // oldest admitted first; they come back before waiting_
  std::vector<int64_t> cancels_;
  int running_ = 0;
  int64_t next_order_ = 0, preemptions_ = 0;
  int64_t prompt_tokens_admitted_ = 0, prefix_hit_tokens_ = 0;
  std::vector<float> logits_;
  std::vector<float> penalized_;  // a row with its sequence's penalties applied
  std::vector<int32_t> greedy_;
  bool run_ahead_ = false;  // options_.run_ahead and the engine can
  std::optional<InFlight> in_flight_;
  std::chrono::steady_clock::time_point last_collect_{};  // when the host last read a step's tokens
};

}  // namespace cohort::infer
