// The offline loop: every prompt queued up front, then Scheduler steps until
// all are done (see generate.h, scheduler.h).
#include "infer/generate.h"

#include <chrono>
#include <memory>

#include "infer/scheduler.h"


namespace cohort::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Result<std::vector<SequenceOutput>> generate_all(models::decode::InferenceEngine& engine,
                                                 const std::vector<Prompt>& prompts,
                                                 const StopCondition& stop,
                                                 const GenerateOptions& options,
                                                 GenerateStats* stats) {
  for (const Prompt& p : prompts) {
    if (static_cast<int>(p.tokens.size()) + options.max_new_tokens > engine.capacity()) {
      return invalid_argument("prompt " + std::to_string(p.index) + " has " +
                              std::to_string(p.tokens.size()) + " tokens; with max_new_tokens " +
                              std::to_string(options.max_new_tokens) + " it needs " +
                              std::to_string(p.tokens.size() + options.max_new_tokens) +
                              " positions but the model holds " + std::to_string(engine.capacity()) +
                              " (raise [model] max_seq or lower infer.max_new_tokens)");
    }
  }
  if (options.max_new_tokens < 1) return invalid_argument("infer.max_new_tokens must be at least 1");
  if (options.on_logits && !options.return_logits) {
    return invalid_argument(
        "GenerateOptions.on_logits needs return_logits (set it on every rank of the "
        "tensor-parallel group)");
  }
  // Whole-prompt prefill: the engine sees the calls it always saw. Whether
  // logits are gathered follows from what every rank shares (the sampling
  // and return_logits), never from on_logits.
  SchedulerOptions so;
  so.return_logits = options.return_logits;
  so.run_ahead = options.run_ahead;
  if (options.on_logits) {
    so.on_logits = [&](int64_t id, const float* logits, int vocab) {
      options.on_logits(prompts[id].index, logits, vocab);
    };
  }
  Scheduler scheduler(engine, so);
  // Not owned: `stop` outlives the loop.
  const std::shared_ptr<const StopCondition> shared_stop(std::shared_ptr<void>(), &stop);
  for (size_t i = 0; i < prompts.size(); ++i) {
    SequenceRequest r;
    r.id = static_cast<int64_t>(i);
    r.prompt = prompts[i].tokens;
    r.max_new_tokens = options.max_new_tokens;
    r.sampling = options.sampling;
    r.sampler_stream = static_cast<uint64_t>(prompts[i].index);
    r.stop = shared_stop;
    COHORT_RETURN_IF_ERROR(scheduler.add(std::move(r)));
  }
  std::vector<SequenceOutput> out(prompts.size());
  std::vector<Clock::time_point> first_token(prompts.size());
  GenerateStats st;
  const auto start = Clock::now();
  while (!scheduler.idle()) {
    StepStats step;
    const std::vector<TokenEvent> events = scheduler.step(&step);
    const auto now = Clock::now();
    st.prefill_s += step.prefill_s;
    st.decode_s += step.decode_s;
    st.prompt_tokens += step.prefill_tokens;
    if (step.decode_batch > 0) st.decode_steps += 1, st.decode_tokens += step.decode_batch;
    for (const TokenEvent& e : events) {
      SequenceOutput& o = out[e.id];
      if (o.tokens.empty()) {
        o.index = prompts[e.id].index;
        o.prompt_tokens = static_cast<int>(prompts[e.id].tokens.size());
        o.ttft_s = seconds(start, now);
        o.prefill_s = step.prefill_s;
        first_token[e.id] = now;
      }
      o.tokens.push_back(e.token);
      if (e.finished) {
        o.finish_reason = e.finish_reason;
        o.decode_s = seconds(first_token[e.id], now);
      }
    }
  }
  for (const SequenceOutput& o : out) st.output_tokens += static_cast<int64_t>(o.tokens.size());
  st.wall_s = seconds(start, Clock::now());
  if (stats) *stats = st;
  return out;
}

}  // namespace cohort::infer
