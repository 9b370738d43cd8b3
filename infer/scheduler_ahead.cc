// Scheduler steps that run ahead (SchedulerOptions::run_ahead): each call
// launches the next step before reading the tokens of the one in flight.
//
// Why: a plain step leaves the device idle from the end of its forward
// until the next is enqueued: the token copy and wait, the picks and stop
// checks, the tokens handed to the server's threads, the next plan and the
// row uploads. Launched first, the next step queues behind the one running
// and the host's part overlaps it (vLLM's asynchronous scheduling does the
// same). The price: a sequence that ends at step t (an end-of-sequence
// token, a stop string) still has a row in step t + 1, whose token is
// dropped; an ending by length is known ahead and has none.
#include "infer/scheduler.h"

#include <string>

#include "base/check.h"
#include "base/env_knobs.h"

namespace cohort::infer {

Result<bool> run_ahead_switch() {
  const char* v = read_env_knob(EnvKnob::kInferRunAhead);
  if (v == nullptr || std::string(v) == "1") return true;
  if (std::string(v) == "0") return false;
  return invalid_argument(std::string(env_knob_name(EnvKnob::kInferRunAhead)) + " is '" + v +
                          "': 0 makes every step plain, 1 (the default) runs greedy steps ahead");
}

bool Scheduler::any_wants_logits() const {
  for (const Slot& s : slots_) {
    if (s.busy && wants_logits(s.req)) return true;
  }
  for (const Slot& s : preempted_) {
    if (wants_logits(s.req)) return true;
  }
  for (const SequenceRequest& r : waiting_) {
    if (wants_logits(r)) return true;
  }
  return false;
}

void Scheduler::collect(InFlight f, bool newest, std::vector<TokenEvent>& events, StepStats& st) {
  engine_.collect(greedy_.data());
  const auto now = std::chrono::steady_clock::now();
  // The step's time on the device: from its launch, or from the end of the
  // one before where it queued behind that one.
  const double seconds = std::chrono::duration<double>(now - std::max(f.launched, last_collect_)).count();
  last_collect_ = now;
  // Slots mark their rows in the newest launch; with none newer, nothing
  // is in flight any more.
  if (newest) {
    for (Slot& slot : slots_) slot.in_flight_row = -1;
  }
  finish(f.plan, events);
  record(f.plan, seconds, st);
}

std::vector<TokenEvent> Scheduler::step_ahead(StepStats* stats, int64_t prompt_cap) {
  std::vector<TokenEvent> events;
  StepStats planned, collected;
  auto collect_newest = [&] {
    InFlight f = std::move(*in_flight_);
    in_flight_.reset();
    collect(std::move(f), true, events, collected);
  };
  // The step in flight is read first where the next step's plan needs its
  // outcome: rows that pick from logits take their inputs from the host,
  // cancellations and preemptions free slots, and an engine that ran it as
  // several forwards cannot feed the next from its outputs.
  const bool plain = any_wants_logits();
  if (in_flight_ &&
      (plain || !in_flight_->feeds_next || !cancels_.empty() || (free_after({}) < 0 && running_ > 1))) {
    collect_newest();
  }
  Plan p;
  if (!plan_step(p, planned, prompt_cap, events)) {
    if (in_flight_) collect_newest();
  } else if (p.logits || plain) {
    COHORT_CHECK(!in_flight_);
    collected = StepStats{};  // a step read first is described by this one
    run_plain(p, events, collected);
  } else {
    advance(p);
    const auto launched = std::chrono::steady_clock::now();
    const bool feeds_next = engine_.launch(p.decode_slots.data(), p.decode_tokens.data(), p.token_from.data(),
                                           static_cast<int>(p.decode_slots.size()), p.chunks);
    std::optional<InFlight> older = std::move(in_flight_);
    // The new step's rows are the ones in flight now.
    for (Slot& slot : slots_) slot.in_flight_row = -1;
    for (size_t j = 0; j < p.out_slots.size(); ++j) {
      if (p.used[j]) slots_[p.out_slots[j]].in_flight_row = static_cast<int>(j);
    }
    in_flight_ = InFlight{std::move(p), feeds_next, launched};
    if (older) collect(std::move(*older), false, events, collected);
  }
  // The stats describe the step whose tokens this call returns; admissions,
  // prefix hits and preemptions are the plan's.
  collected.admitted = planned.admitted;
  collected.prefix_hit_tokens = planned.prefix_hit_tokens;
  collected.preempted = planned.preempted;
  if (stats) *stats = collected;
  return events;
}

}  // namespace cohort::infer
