// Continuous batching, one step at a time (see scheduler.h).
#include "infer/scheduler.h"

#include "base/check.h"
#include "base/parallel_for.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>

namespace cohort::infer {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// log softmax(row)[t], in double so that long vocabularies do not lose it.
// log-softmax(row)[i] = row[i] - normalizer.
double log_normalizer(const float* row, int vocab) {
  const float top = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - top);
  return double(top) + std::log(sum);
}

// The k likeliest ids of `row` with their log-probabilities, likeliest
// first (lower id on ties).
std::vector<std::pair<int32_t, float>> top_logprobs(const float* row, int vocab, int k, double normalizer) {
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = i;
  k = std::min(k, vocab);
  auto likelier = [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), likelier);
  std::vector<std::pair<int32_t, float>> out;
  for (int i = 0; i < k; ++i) out.emplace_back(ids[i], static_cast<float>(double(row[ids[i]]) - normalizer));
  return out;
}

}  // namespace

Scheduler::Scheduler(models::decode::InferenceEngine& engine, SchedulerOptions options)
    : engine_(engine), options_(std::move(options)), slots_(engine.slots()) {
  run_ahead_ = options_.run_ahead && engine.can_run_ahead();
  logits_.resize(static_cast<size_t>(engine.slots()) * engine.vocab_size());
  greedy_.resize(engine.slots());
}

Status Scheduler::add(SequenceRequest request) {
  if (request.prompt.empty()) return invalid_argument("the prompt has no tokens");
  if (request.max_new_tokens < 1) return invalid_argument("max_new_tokens must be at least 1");
  if (request.adapter < -1 || request.adapter >= engine_.adapters()) {
    return invalid_argument("adapter " + std::to_string(request.adapter) + " is not one of the engine's " +
                            std::to_string(engine_.adapters()));
  }
  const int64_t need = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  if (need > engine_.capacity()) {
    return invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; with max_new_tokens " +
                            std::to_string(request.max_new_tokens) + " it needs " +
                            std::to_string(need) + " positions but a sequence holds " +
                            std::to_string(engine_.capacity()));
  }
  if (blocks_needed(request) > engine_.kv_blocks()) {
    return invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; with max_new_tokens " + std::to_string(request.max_new_tokens) +
                            " it needs " + std::to_string(need) + " positions but the KV cache holds " +
                            std::to_string(kv_total()));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= engine_.vocab_size()) {
      return invalid_argument("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(engine_.vocab_size()) + ")");
    }
  }
  waiting_.push_back(std::move(request));
  return Status::ok();
}

int64_t Scheduler::blocks_needed(const SequenceRequest& r) const {
  const int64_t positions = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  const int64_t block = engine_.kv_block_size();
  return (positions + block - 1) / block;
}

void Scheduler::cancel(int64_t id) { cancels_.push_back(id); }

int64_t Scheduler::kv_used() const {
  int64_t used = 0;
  for (const Slot& s : slots_) {
    if (s.busy) used += s.cached;
  }
  return used;
}

int64_t Scheduler::blocks_for(int64_t positions) const {
  const int64_t block = engine_.kv_block_size();
  return (positions + block - 1) / block;
}

int64_t Scheduler::kv_held_blocks() const {
  int64_t held = 0;
  for (const Slot& s : slots_) {
    if (s.busy) held += blocks_for(s.cached);
  }
  return held;
}

int64_t Scheduler::free_blocks() const {
  const int64_t counted = engine_.kv_free_blocks();
  return counted >= 0 ? counted : engine_.kv_blocks() - kv_held_blocks();
}

void Scheduler::preempt_newest() {
  int newest = -1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].busy && (newest < 0 || slots_[s].order > slots_[newest].order)) newest = static_cast<int>(s);
  }
  Slot saved = std::move(slots_[newest]);
  saved.busy = false;
  if (!saved.generated.empty()) {
    saved.resume = saved.req.prompt;
    saved.resume.insert(saved.resume.end(), saved.generated.begin(), saved.generated.end());
  } else {
    saved.resume.clear();  // preempted during its prompt: the prompt again
  }
  saved.prefilled = 0, saved.cached = 0, saved.in_flight_row = -1;
  slots_[newest] = Slot{};
  --running_;
  ++preemptions_;
  engine_.release(newest);
  auto at = std::find_if(preempted_.begin(), preempted_.end(),
                         [&](const Slot& p) { return p.order > saved.order; });
  preempted_.insert(at, std::move(saved));
}

bool Scheduler::wants_logits(const SequenceRequest& r) const {
  const models::SamplingParams& p = r.sampling;
  return options_.return_logits || p.temperature > 0 || r.logprobs || p.has_penalties() || p.min_tokens > 0 ||
         r.guide != nullptr || !r.constraint.empty();
}

void Scheduler::release(int s) {
  slots_[s] = Slot{};
  --running_;
  engine_.release(s);
}

int32_t Scheduler::pick(Slot& slot, const float* row, int32_t device_greedy, bool have_logits,
                        std::vector<float>& penalized) {
  if (!have_logits) return device_greedy;
  const int V = engine_.vocab_size();
  if (options_.on_logits) options_.on_logits(slot.req.id, row, V);
  const models::SamplingParams& p = slot.req.sampling;
  if (!p.has_penalties() && static_cast<int>(slot.generated.size()) >= p.min_tokens && !slot.req.guide) {
    return slot.sampler.sample(row, V);
  }
  // Penalties and grammars change a copy: logprobs report the model's own
  // distribution.
  penalized.assign(row, row + V);
  static const std::vector<int32_t> kNoStops;
  const StopCondition* stop = slot.req.stop.get();
  models::apply_penalties(penalized.data(), V, p, slot.req.prompt, slot.generated,
                          stop ? stop->stop_tokens() : kNoStops);
  if (slot.req.guide && !slot.req.guide->mask_logits(penalized.data(), V)) return -1;  // the grammar allows nothing
  return slot.sampler.sample(penalized.data(), V);
}

bool Scheduler::emit(int s, int32_t t, const float* row, std::vector<TokenEvent>& events) {
  Slot& slot = slots_[s];
  text::TokenConstraint* guide = slot.req.guide.get();
  if (guide && (t < 0 || !guide->advance(t))) {
    // Nothing the grammar allows (its bounds ran out): the reply ends here.
    events.push_back(TokenEvent{slot.req.id, -1, 0, true, "stop", {}});
    release(s);
    return false;
  }
  slot.generated.push_back(t);
  TokenEvent e;
  e.id = slot.req.id;
  e.token = t;
  if (slot.generated.size() == 1) {
    e.prefill_s = seconds_since(slot.admitted);
    if (slot.req.arrived != Clock::time_point{}) {
      e.queued_s = std::max(0.0, std::chrono::duration<double>(slot.admitted - slot.req.arrived).count());
    }
  }
  if (slot.req.logprobs && row) {
    const int V = engine_.vocab_size();
    const double normalizer = log_normalizer(row, V);
    e.logprob = static_cast<float>(double(row[t]) - normalizer);
    if (slot.req.top_logprobs > 0) e.top = top_logprobs(row, V, slot.req.top_logprobs, normalizer);
  }
  const StopCondition* stop = slot.req.stop.get();
  const bool may_stop = static_cast<int>(slot.generated.size()) >= slot.req.sampling.min_tokens;
  if ((stop && may_stop && (stop->is_stop_token(t) || stop->hits_stop_string(slot.generated))) ||
      (guide && guide->complete())) {
    e.finished = true, e.finish_reason = "stop";
  } else if (static_cast<int>(slot.generated.size()) >= slot.req.max_new_tokens) {
    e.finished = true, e.finish_reason = "length";
  }
  events.push_back(e);
  if (e.finished) release(s);
  return !e.finished;
}

void Scheduler::drop_cancelled(std::vector<TokenEvent>& events) {
  for (int64_t id : cancels_) {
    bool found = false;
    for (size_t s = 0; s < slots_.size() && !found; ++s) {
      if (slots_[s].busy && slots_[s].req.id == id) release(static_cast<int>(s)), found = true;
    }
    for (auto it = waiting_.begin(); it != waiting_.end() && !found; ++it) {
      if (it->id == id) waiting_.erase(it), found = true;
    }
    for (auto it = preempted_.begin(); it != preempted_.end() && !found; ++it) {
      if (it->req.id == id) preempted_.erase(it), found = true;
    }
    if (found) events.push_back(TokenEvent{id, -1, 0, true, "cancelled", {}});
  }
  cancels_.clear();
}

bool Scheduler::uses_adapter(int index) const {
  for (const Slot& s : slots_) {
    if (s.busy && s.req.adapter == index) return true;
  }
  for (const Slot& s : preempted_) {
    if (s.req.adapter == index) return true;
  }
  for (const SequenceRequest& r : waiting_) {
    if (r.adapter == index) return true;
  }
  return false;
}

int Scheduler::admit_next(int chunk, int64_t free) {
  int s = 0;
  while (s < static_cast<int>(slots_.size()) && slots_[s].busy) ++s;
  if (s == static_cast<int>(slots_.size())) return -1;
  if (blocks_for(chunk) > free) return -1;
  Slot& slot = slots_[s];
  if (!preempted_.empty()) {
    slot = std::move(preempted_.front());
    preempted_.pop_front();
  } else {
    slot = Slot{};
    slot.req = std::move(waiting_.front());
    waiting_.pop_front();
    slot.sampler = models::TokenSampler(slot.req.sampling, slot.req.sampler_stream);
    slot.order = next_order_++;
    slot.admitted = Clock::now();
  }
  slot.busy = true;
  ++running_;
  engine_.set_adapter(s, slot.req.adapter);
  return s;
}

bool Scheduler::starts_like_an_admission(const std::vector<int32_t>& prompt, const std::vector<Chunk>& chunks) const {
  const size_t block = static_cast<size_t>(engine_.kv_block_size());
  if (prompt.size() <= block) return false;  // nothing whole to share
  for (const Chunk& c : chunks) {
    const std::vector<int32_t>& other = prefill_of(slots_[c.slot]);
    if (c.fresh && other.size() > block && std::equal(prompt.begin(), prompt.begin() + block, other.begin())) {
      return true;
    }
  }
  return false;
}

int64_t Scheduler::growth(int64_t cached, int64_t n) const { return blocks_for(cached + n) - blocks_for(cached); }

int64_t Scheduler::free_after(const std::vector<Chunk>& chunks) const {
  int64_t free = free_blocks();
  for (const Slot& s : slots_) {
    if (s.busy && s.prefilled == prefill_of(s).size()) free -= growth(s.cached, 1);
  }
  for (const Chunk& c : chunks) free -= growth(slots_[c.slot].cached, c.n);
  return free;
}

void Scheduler::plan_prompts(std::vector<Chunk>& chunks, StepStats& st, int budget, bool empty_step) {
  const bool cut = options_.max_batched_tokens > 0 && engine_.can_extend();
  const int64_t block = engine_.kv_block_size();
  // How many of n more positions fit a slot at `cached` in what the decode
  // rows and the chunks so far leave.
  auto fitting = [&](int64_t cached, int n) {
    const int64_t room = (blocks_for(cached) + std::max<int64_t>(free_after(chunks), 0)) * block - cached;
    return static_cast<int>(std::min<int64_t>(n, room));
  };
  // Sequences part-way through their prompt hold a slot: they go first.
  for (size_t s = 0; s < slots_.size() && budget > 0; ++s) {
    Slot& slot = slots_[s];
    if (!slot.busy || slot.prefilled >= prefill_of(slot).size()) continue;
    const int n = fitting(slot.cached, static_cast<int>(std::min<size_t>(prefill_of(slot).size() - slot.prefilled, budget)));
    if (n <= 0) continue;
    chunks.push_back(Chunk{static_cast<int>(s), prefill_of(slot).data() + slot.prefilled, n, false});
    budget -= n;
  }
  const bool shares = engine_.caches_prefixes();
  while (budget > 0 && (!preempted_.empty() || !waiting_.empty())) {
    const std::vector<int32_t>& next = preempted_.empty() ? waiting_.front().prompt : prefill_of(preempted_.front());
    const int size = static_cast<int>(next.size());
    // A prompt whose first KV block a prompt admitted in this step starts
    // with (the n choices of one request, a system prompt many requests
    // share) waits one step: by then that block and those after it are in
    // the prefix cache, and it computes only what differs.
    if (shares && starts_like_an_admission(next, chunks)) break;
    // An engine that cannot extend takes a long prompt whole, but only in a
    // step that holds nothing else, so one step stays near the budget.
    const bool whole_past_budget = !cut && size > budget;
    if (whole_past_budget && !(empty_step && chunks.empty())) break;
    const int first = whole_past_budget || !cut ? size : std::min(size, budget);
    const int s = admit_next(first, free_after(chunks));
    if (s < 0) break;
    ++st.admitted;
    Slot& slot = slots_[s];
    const std::vector<int32_t>& tokens = prefill_of(slot);
    const int cached = engine_.reuse_prefix(s, tokens.data(), size);
    slot.prefilled = static_cast<size_t>(cached), slot.cached = cached;
    st.prefix_hit_tokens += cached, prefix_hit_tokens_ += cached, prompt_tokens_admitted_ += size;
    const int rest = size - cached;
    // fitting() counts what the prefix took from the free blocks too.
    const int n = fitting(cached, whole_past_budget || !cut ? rest : std::min(rest, budget));
    // admit_next saw room for `first` positions; the prefix only took blocks
    // those positions would have needed.
    COHORT_CHECK_MSG(n >= 1 && (cut || n == rest), "a chunk of {} of {} prompt tokens fits the KV cache", n, rest);
    chunks.push_back(Chunk{s, tokens.data() + cached, n, cached == 0});
    budget = n >= budget ? 0 : budget - n;
  }
}

bool Scheduler::plan_step(Plan& p, StepStats& st, int64_t prompt_cap, std::vector<TokenEvent>& events) {
  drop_cancelled(events);
  // Every decoding sequence's next position must find a block: while not,
  // the newest sequence makes room.
  while (free_after({}) < 0 && running_ > 1) {
    preempt_newest();
    ++st.preempted;
  }
  bool ending_in_flight = false;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (!slot.busy || slot.prefilled < prefill_of(slot).size()) continue;
    if (slot.in_flight_row >= 0) {
      // Its next input is the step in flight's token, unless that is its
      // last by length.
      if (static_cast<int>(slot.generated.size()) + 1 >= slot.req.max_new_tokens) {
        ending_in_flight = true;
        continue;
      }
      p.decode_tokens.push_back(-1);
      p.token_from.push_back(slot.in_flight_row);
    } else {
      p.decode_tokens.push_back(slot.generated.back());
      p.token_from.push_back(-1);
    }
    p.decode_slots.push_back(static_cast<int>(s));
  }
  const int d = static_cast<int>(p.decode_slots.size());
  // A bounded step is one forward; an unbounded one (the offline job)
  // takes every prompt the slots hold, in as many forwards as the engine needs.
  int budget = options_.max_batched_tokens > 0
                   ? std::min(std::max(options_.max_batched_tokens - d, 1),
                              std::max(engine_.max_step_rows() - d, 0))
                   : INT_MAX;
  if (d > 0 && prompt_cap < budget) budget = static_cast<int>(std::max<int64_t>(prompt_cap, 1));
  plan_prompts(p.chunks, st, budget, d == 0);
  // Sequences part-way through their prompts with no block left for any of
  // them: the newest makes room (one sequence alone always fits). Not when
  // the step has no decode rows because sequences end in the step in flight
  // (running ahead): their slots come back once it is read.
  while (d == 0 && p.chunks.empty() && running_ > 1 && !ending_in_flight) {
    preempt_newest();
    ++st.preempted;
    plan_prompts(p.chunks, st, budget, true);
  }
  if (d == 0 && p.chunks.empty()) return false;
  // Outputs: the decode rows, then each chunk's last position, which only
  // a chunk that ends its prompt uses.
  p.out_slots = p.decode_slots;
  p.used.assign(d, true);
  for (int s : p.decode_slots) p.logits = p.logits || wants_logits(slots_[s].req);
  for (const Chunk& c : p.chunks) {
    const Slot& slot = slots_[c.slot];
    const bool last = slot.prefilled + c.n == prefill_of(slot).size();
    p.out_slots.push_back(c.slot);
    p.used.push_back(last);
    p.logits = p.logits || (last && wants_logits(slot.req));
    p.prefill_tokens += c.n;
  }
  for (int s : p.out_slots) p.out_ids.push_back(slots_[s].req.id);
  return true;
}

void Scheduler::advance(const Plan& p) {
  for (const Chunk& c : p.chunks) slots_[c.slot].prefilled += c.n, slots_[c.slot].cached += c.n;
  for (int s : p.decode_slots) ++slots_[s].cached;
}

void Scheduler::finish(const Plan& p, std::vector<TokenEvent>& events) {
  const size_t V = static_cast<size_t>(engine_.vocab_size());
  const std::vector<int>& out_slots = p.out_slots;
  auto holds = [&](size_t j) {
    const Slot& slot = slots_[out_slots[j]];
    return p.used[j] && slot.busy && slot.req.id == p.out_ids[j];
  };
  std::vector<int32_t> next(out_slots.size(), -1);
  // A row held to a grammar costs a walk of the vocabulary tree for its
  // mask: such rows are picked on several threads (each sequence's sampler
  // and grammar state are its own; the mask cache locks). Without logits
  // every pick is the device's greedy token.
  std::vector<size_t> guided;
  for (size_t j = 0; j < out_slots.size(); ++j) {
    if (!holds(j)) continue;
    if (p.logits && slots_[out_slots[j]].req.guide && !options_.on_logits) {
      guided.push_back(j);
    } else {
      next[j] = pick(slots_[out_slots[j]], logits_.data() + j * V, greedy_[j], p.logits, penalized_);
    }
  }
  // One row buffer a thread, so that memory stays kPickThreads rows
  // whatever the number of guided sequences.
  parallel_for(
      guided.size(),
      [&](size_t i) {
        thread_local std::vector<float> buffer;
        const size_t j = guided[i];
        next[j] = pick(slots_[out_slots[j]], logits_.data() + j * V, greedy_[j], true, buffer);
      },
      std::min<size_t>(guided.size(), kPickThreads));
  for (size_t j = 0; j < out_slots.size(); ++j) {
    if (holds(j)) emit(out_slots[j], next[j], p.logits ? logits_.data() + j * V : nullptr, events);
  }
}

void Scheduler::record(const Plan& p, double seconds, StepStats& st) {
  st.decode_rows = static_cast<int>(p.decode_slots.size());
  st.prefill_tokens = p.prefill_tokens;
  if (p.chunks.empty()) {
    st.decode_s = seconds, st.decode_batch = st.decode_rows;
  } else {
    st.prefill_s = seconds;
  }
}

void Scheduler::run_plain(const Plan& p, std::vector<TokenEvent>& events, StepStats& st) {
  const auto t0 = Clock::now();
  engine_.step(p.decode_slots.data(), p.decode_tokens.data(), static_cast<int>(p.decode_slots.size()), p.chunks,
               p.logits ? logits_.data() : nullptr, greedy_.data());
  advance(p);
  finish(p, events);
  last_collect_ = Clock::now();
  record(p, std::chrono::duration<double>(last_collect_ - t0).count(), st);
}

std::vector<TokenEvent> Scheduler::step(StepStats* stats, int64_t prompt_cap) {
  if (run_ahead_) return step_ahead(stats, prompt_cap);
  std::vector<TokenEvent> events;
  StepStats st;
  Plan p;
  if (plan_step(p, st, prompt_cap, events)) run_plain(p, events, st);
  if (stats) *stats = st;
  return events;
}

}  // namespace cohort::infer
