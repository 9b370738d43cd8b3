// Continuous batching over an InferenceEngine (see infer_generate.h).
#include "infer/generate.h"

#include <chrono>
#include <deque>


namespace cohort::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Running {
  int prompt = -1;  // index into prompts / outputs; -1: slot free
  int32_t next = 0; // the last sampled token, fed to the next decode step
  Clock::time_point first_token;
};

}  // namespace

Result<std::vector<SequenceOutput>> generate_all(InferenceEngine& engine,
                                                 const std::vector<Prompt>& prompts,
                                                 const StopCondition& stop,
                                                 const GenerateOptions& options,
                                                 GenerateStats* stats) {
  const int V = engine.vocab_size();
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
  // Decided from what every rank of the group shares, never from on_logits,
  // so that all ranks make the same engine calls (the CUDA engine's logits
  // gather is a collective).
  const bool greedy_only = options.sampling.temperature <= 0 && !options.return_logits;
  std::vector<SequenceOutput> out(prompts.size());
  std::vector<models::TokenSampler> samplers;
  for (const Prompt& p : prompts) {
    samplers.emplace_back(options.sampling, static_cast<uint64_t>(p.index));
  }
  std::vector<Running> slots(engine.slots());
  std::deque<int> queue;
  for (size_t i = 0; i < prompts.size(); ++i) queue.push_back(static_cast<int>(i));
  std::vector<float> logits(static_cast<size_t>(engine.slots()) * V);
  std::vector<int32_t> greedy(engine.slots());
  GenerateStats st;
  const auto start = Clock::now();

  // Records token `t` for prompt i; false when the sequence is finished.
  auto emit = [&](int i, int32_t t) {
    SequenceOutput& o = out[i];
    o.tokens.push_back(t);
    if (stop.is_stop_token(t) || stop.hits_stop_string(o.tokens)) {
      o.finish_reason = "stop";
      return false;
    }
    if (static_cast<int>(o.tokens.size()) >= options.max_new_tokens) {
      o.finish_reason = "length";
      return false;
    }
    return true;
  };
  auto pick = [&](int i, const float* row, int32_t device_greedy) {
    if (greedy_only) return device_greedy;
    if (options.on_logits) options.on_logits(prompts[i].index, row, V);
    return samplers[i].sample(row, V);
  };

  std::vector<int> step_slots, admit_slots, admit_prompts;
  std::vector<int32_t> step_tokens;
  std::vector<const std::vector<int32_t>*> admit_tokens;
  while (true) {
    // Admit waiting prompts into free slots, all in one prefill; a sequence
    // that finishes on its first token frees its slot for another round.
    while (true) {
      admit_slots.clear();
      admit_prompts.clear();
      admit_tokens.clear();
      for (int s = 0; s < engine.slots() && !queue.empty(); ++s) {
        if (slots[s].prompt >= 0) continue;
        admit_slots.push_back(s);
        admit_prompts.push_back(queue.front());
        admit_tokens.push_back(&prompts[queue.front()].tokens);
        queue.pop_front();
      }
      if (admit_slots.empty()) break;
      const auto t0 = Clock::now();
      engine.prefill_many(admit_slots.data(), admit_tokens, greedy_only ? nullptr : logits.data(),
                          greedy.data());
      std::vector<int32_t> first(admit_slots.size());
      for (size_t j = 0; j < admit_slots.size(); ++j) {
        first[j] = pick(admit_prompts[j], logits.data() + j * V, greedy[j]);
      }
      const auto t1 = Clock::now();
      st.prefill_s += seconds(t0, t1);
      for (size_t j = 0; j < admit_slots.size(); ++j) {
        const int i = admit_prompts[j];
        out[i].index = prompts[i].index;
        out[i].prompt_tokens = static_cast<int>(prompts[i].tokens.size());
        out[i].ttft_s = seconds(start, t1);
        out[i].prefill_s = seconds(t0, t1);
        st.prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
        if (emit(i, first[j])) slots[admit_slots[j]] = Running{i, first[j], t1};
      }
    }
    step_slots.clear();
    step_tokens.clear();
    for (int s = 0; s < engine.slots(); ++s) {
      if (slots[s].prompt < 0) continue;
      step_slots.push_back(s);
      step_tokens.push_back(slots[s].next);
    }
    if (step_slots.empty()) break;
    const int B = static_cast<int>(step_slots.size());
    const auto t0 = Clock::now();
    engine.decode(step_slots.data(), step_tokens.data(), B, greedy_only ? nullptr : logits.data(),
                  greedy.data());
    for (int b = 0; b < B; ++b) {
      Running& r = slots[step_slots[b]];
      r.next = pick(r.prompt, logits.data() + static_cast<size_t>(b) * V, greedy[b]);
    }
    const auto t1 = Clock::now();
    st.decode_s += seconds(t0, t1);
    st.decode_steps += 1;
    st.decode_tokens += B;
    for (int b = 0; b < B; ++b) {
      Running& r = slots[step_slots[b]];
      if (!emit(r.prompt, r.next)) {
        out[r.prompt].decode_s = seconds(r.first_token, t1);
        r.prompt = -1;
      }
    }
  }
  for (const SequenceOutput& o : out) st.output_tokens += static_cast<int64_t>(o.tokens.size());
  st.wall_s = seconds(start, Clock::now());
  if (stats) *stats = st;
  return out;
}

}  // namespace cohort::infer
