// What changes between two steps of the server's loop, and how rank 0 shares
// it: the requests that arrived (prompt, limits, sampling, the client's stop
// ids and strings), the ids cancelled, and whether to stop. Every rank
// applies the same StepInput to its Scheduler before the same step, which
// keeps a tensor-parallel group's engine calls in lockstep (scheduler.h).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "infer/scheduler.h"
#include "text/token_constraint.h"
#include "text/tokenizer.h"

namespace cohort::infer {

// A LoRA adapter loaded or unloaded at run time (serve_http.h's endpoints):
// every rank makes it before the step's arrivals.
struct AdapterChange {
  bool load = false;
  std::string name;
  std::string folder;  // load: the PEFT adapter folder
  int index = -1;      // unload: the engine's index, which rank 0 resolves from the name
  int64_t ticket = 0;  // rank 0's: whom to answer
};

struct StepInput {
  bool stop = false;
  std::vector<SequenceRequest> arrivals;
  std::vector<int64_t> cancels;
  std::vector<AdapterChange> adapter_changes;
  // The step's prompt tokens beside decode rows (rank 0's StepBudget,
  // step_budget.h): every rank plans the step with the same cap.
  int64_t prompt_cap = INT64_MAX;
};

// Flat int64 form, and back. decode rebuilds each arrival's StopCondition
// from its stop ids and strings plus `eos` (the server passes none: rank 0
// puts the model's end-of-sequence ids among each request's stop ids);
// errors on a malformed buffer.
std::vector<int64_t> encode_step_input(const StepInput& input);
Result<StepInput> decode_step_input(const std::vector<int64_t>& data, const text::Tokenizer* tokenizer,
                                    const std::vector<int32_t>& eos);

// Rank 0's *input goes to every rank of `comm` (two broadcasts: the length,
// then the data); on the others *input is replaced.
Status broadcast_step_input(collective::Communicator& comm, StepInput* input, const text::Tokenizer* tokenizer,
                            const std::vector<int32_t>& eos);

// Cancels, then adds the arrivals in order; an arrival with a structured-
// output spec and no guide (the other ranks') gets one over `vocabulary`.
// An arrival the scheduler refuses
// becomes a finished event with reason "error" in *rejected (the HTTP side
// checks the same limits first, so this is a bug guard).
void apply_step_input(StepInput& input, Scheduler& scheduler, const text::Tokenizer* tokenizer,
                      const std::vector<int32_t>& eos, std::vector<TokenEvent>* rejected,
                      const std::shared_ptr<const text::TokenVocabulary>& vocabulary = nullptr);

}  // namespace cohort::infer
