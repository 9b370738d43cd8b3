// Scheduler steps that run ahead (SchedulerOptions::run_ahead): each call
// launches the next step before reading the one in flight, whose tokens
// feed the new step's decode rows inside the engine. The tokens, finish
// reasons and cache use must be those of plain steps, through chunked
// prompts, stop tokens, lengths, sampling, cancellations and preemptions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "base/env_knobs.h"
#include "infer/scheduler.h"
#include "tests/infer/paged_fake.h"
#include "tests/infer/tiny_engine.h"

namespace cohort::infer {
namespace {

using testing::request;
using testing::tiny_engine;

struct Outcome {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::string> finish;
  int64_t preemptions = 0;
  bool operator==(const Outcome& o) const { return tokens == o.tokens && finish == o.finish; }
};

Outcome run_to_end(Scheduler& s, const std::function<void(int)>& between = {}) {
  Outcome out;
  for (int step = 0; !s.idle() && step < 10000; ++step) {
    for (const TokenEvent& e : s.step()) {
      if (e.token >= 0) out.tokens[e.id].push_back(e.token);
      if (e.finished) {
        EXPECT_EQ(out.finish.count(e.id), 0u) << "request " << e.id << " finished twice";
        out.finish[e.id] = e.finish_reason;
      }
    }
    if (between) between(step);
  }
  EXPECT_TRUE(s.idle());
  out.preemptions = s.preemptions();
  return out;
}

// The CPU engine, counting launches and what fed their decode rows.
class LaunchRecorder final : public testing::ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  bool can_run_ahead() const override { return true; }
  bool launch(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
              const std::vector<Chunk>& chunks) override {
    ++launches;
    for (int b = 0; b < d; ++b) fed_from_device += token_from[b] >= 0;
    ++uncollected;
    max_uncollected = std::max(max_uncollected, uncollected);
    return InferenceEngine::launch(decode_slots, decode_tokens, token_from, d, chunks);
  }
  void collect(int32_t* greedy) override {
    --uncollected;
    InferenceEngine::collect(greedy);
  }
  void step(const int* decode_slots, const int32_t* decode_tokens, int d, const std::vector<Chunk>& chunks,
            float* logits, int32_t* greedy) override {
    ++forwards;
    InferenceEngine::step(decode_slots, decode_tokens, d, chunks, logits, greedy);
  }
  int launches = 0, fed_from_device = 0, uncollected = 0, max_uncollected = 0, forwards = 0;
};

SchedulerOptions ahead_options(int max_batched_tokens) {
  SchedulerOptions o;
  o.run_ahead = true;
  o.max_batched_tokens = max_batched_tokens;
  return o;
}

// Requests of many lengths, with prompts cut into chunks beside the decode
// rows; with `stops`, every third ends by a stop token: the third token
// it generates alone.
std::vector<SequenceRequest> mixed_requests(bool stops) {
  std::vector<SequenceRequest> out;
  for (int id = 0; id < 9; ++id) {
    SequenceRequest r = request(id, 2 + 7 * id % 23, id == 4 ? 1 : 3 + 5 * id % 17);
    if (stops && id % 3 == 0) {
      auto engine = tiny_engine(1);
      Scheduler alone(*engine, {});
      SequenceRequest copy = r;
      copy.max_new_tokens = 3;
      EXPECT_TRUE(alone.add(copy).is_ok());
      jobs::InferSection section;
      section.stop_tokens = {run_to_end(alone).tokens.at(id).back()};
      r.stop = std::make_shared<const StopCondition>(StopCondition::create(section, nullptr).value());
    }
    out.push_back(std::move(r));
  }
  return out;
}

Outcome run(bool ahead, const std::vector<SequenceRequest>& requests, LaunchRecorder* recorder = nullptr) {
  auto engine = tiny_engine(3);
  SchedulerOptions o;
  o.max_batched_tokens = 12;
  o.run_ahead = ahead;
  Scheduler s(recorder ? static_cast<models::decode::InferenceEngine&>(*recorder) : *engine, o);
  for (const SequenceRequest& r : requests) EXPECT_TRUE(s.add(r).is_ok());
  return run_to_end(s);
}

TEST(InferRunAhead, GivesThePlainStepsTokensAndEndings) {
  const std::vector<SequenceRequest> requests = mixed_requests(true);
  const Outcome plain = run(false, requests);
  LaunchRecorder recorder(tiny_engine(3));
  const Outcome ahead = run(true, requests, &recorder);
  EXPECT_EQ(ahead.tokens, plain.tokens);
  EXPECT_EQ(ahead.finish, plain.finish);
  EXPECT_EQ(ahead.preemptions, 0) << "sequences finishing in the step in flight were preempted";
  int stopped = 0;
  for (const auto& [id, reason] : plain.finish) stopped += reason == "stop";
  EXPECT_GT(stopped, 0) << "no sequence ended by its stop token: the test covers less than it says";
  // Every step was launched ahead, most decode rows took their token from
  // the step before on the engine's side, and no more than two launched
  // steps were ever unread.
  EXPECT_EQ(recorder.launches, recorder.forwards);
  EXPECT_GT(recorder.fed_from_device, 20);
  EXPECT_EQ(recorder.max_uncollected, 2);
  EXPECT_EQ(recorder.uncollected, 0);
}

// Streams that end together by length: the step after their last one has
// no rows, and nothing is preempted for want of work.
TEST(InferRunAhead, StreamsEndingTogetherLeaveNothingToPreempt) {
  LaunchRecorder engine(tiny_engine(4));
  Scheduler s(engine, ahead_options(64));
  for (int id = 0; id < 4; ++id) ASSERT_TRUE(s.add(request(id, 6, 5)).is_ok());
  const Outcome out = run_to_end(s);
  EXPECT_EQ(s.preemptions(), 0);
  for (int id = 0; id < 4; ++id) EXPECT_EQ(out.tokens.at(id).size(), 5u) << id;
}

// A call returns the tokens of the step before the one it launched: the
// first call launches and returns nothing; a one-token request is answered
// by the second.
TEST(InferRunAhead, ACallReturnsTheStepBeforeTheOneItLaunched) {
  LaunchRecorder engine(tiny_engine(2));
  Scheduler s(engine, ahead_options(16));
  ASSERT_TRUE(s.add(request(1, 5, 3)).is_ok());
  EXPECT_TRUE(s.step().empty());
  EXPECT_EQ(engine.uncollected, 1);
  EXPECT_FALSE(s.idle()) << "a step in flight is work";
  const auto first = s.step();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, 1);
  EXPECT_FALSE(first[0].finished);
  const auto second = s.step();
  ASSERT_EQ(second.size(), 1u);
  const auto third = s.step();  // the last token is known ahead: no fourth row
  ASSERT_EQ(third.size(), 1u);
  EXPECT_TRUE(third[0].finished);
  EXPECT_STREQ(third[0].finish_reason, "length");
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(engine.launches, 3);
}

// A sampled request (logits on the host) makes steps plain while it runs;
// the greedy ones beside it get the tokens they get alone.
TEST(InferRunAhead, SampledRowsRunAsPlainStepsBesideGreedyOnes) {
  std::vector<SequenceRequest> requests = mixed_requests(false);
  requests[2].sampling.temperature = 0.8f;
  requests[2].sampling.seed = 11;
  requests[5].logprobs = true;
  const Outcome plain = run(false, requests);
  LaunchRecorder recorder(tiny_engine(3));
  const Outcome ahead = run(true, requests, &recorder);
  EXPECT_EQ(ahead.tokens, plain.tokens);
  EXPECT_EQ(ahead.finish, plain.finish);
  EXPECT_LT(recorder.launches, recorder.forwards) << "every step ran ahead, sampled rows included";
}

// Cancellations between calls, with a step in flight: the cancelled
// request ends once with "cancelled", the others as they would alone.
TEST(InferRunAhead, ACancellationWithAStepInFlightEndsItsRequestOnce) {
  LaunchRecorder engine(tiny_engine(2));
  Scheduler s(engine, ahead_options(16));
  ASSERT_TRUE(s.add(request(1, 4, 40)).is_ok());
  ASSERT_TRUE(s.add(request(2, 6, 8)).is_ok());
  ASSERT_TRUE(s.add(request(3, 3, 5)).is_ok());
  const Outcome out = run_to_end(s, [&](int step) {
    if (step == 4) s.cancel(1);
  });
  EXPECT_EQ(out.finish.at(1), "cancelled");
  EXPECT_LT(out.tokens.at(1).size(), 40u);
  EXPECT_EQ(out.finish.at(2), "length");
  EXPECT_EQ(out.tokens.at(2).size(), 8u);
  EXPECT_EQ(out.tokens.at(3).size(), 5u);
  auto alone = tiny_engine(1);
  Scheduler plain(*alone, {});
  ASSERT_TRUE(plain.add(request(2, 6, 8)).is_ok());
  EXPECT_EQ(run_to_end(plain).tokens.at(2), out.tokens.at(2));
  EXPECT_EQ(s.kv_used(), 0);
}

// A paged engine with too few blocks for every sequence at once, whose
// token depends on the row's input token and position: sequences are
// preempted and come back, and the tokens are those of plain steps.
TEST(InferRunAhead, PreemptedSequencesComeBackWithThePlainStepsTokens) {
  auto once = [](bool ahead) {
    testing::PagedFake engine({.slots = 4, .blocks = 10, .blocks_per_slot = 8, .vocab = 256, .run_ahead = true},
                              [](const std::vector<int32_t>& t) {
                                return static_cast<int32_t>((t.back() * 31 + static_cast<int>(t.size()) * 7) % 251);
                              });
    SchedulerOptions o;
    o.run_ahead = ahead;
    o.max_batched_tokens = 16;
    Scheduler s(engine, o);
    for (int id = 0; id < 6; ++id) EXPECT_TRUE(s.add(request(id, 6 + id, 24)).is_ok());
    return run_to_end(s);
  };
  const Outcome plain = once(false);
  const Outcome ahead = once(true);
  EXPECT_GT(plain.preemptions, 0) << "nothing was preempted: the test covers less than it says";
  EXPECT_GT(ahead.preemptions, 0);
  EXPECT_EQ(ahead.tokens, plain.tokens);
  EXPECT_EQ(ahead.finish, plain.finish);
  for (int id = 0; id < 6; ++id) EXPECT_EQ(ahead.tokens.at(id).size(), 24u) << id;
}

// The jobs' switch: on unless COHORT_INFER_RUN_AHEAD is 0; another value
// is refused by name.
TEST(InferRunAhead, TheSwitchIsOnUnlessSetToZero) {
  const char* name = env_knob_name(EnvKnob::kInferRunAhead);
  const char* before = std::getenv(name);
  const std::string saved = before ? before : "";
  unsetenv(name);
  EXPECT_TRUE(run_ahead_switch().value());
  setenv(name, "0", 1);
  EXPECT_FALSE(run_ahead_switch().value());
  setenv(name, "1", 1);
  EXPECT_TRUE(run_ahead_switch().value());
  setenv(name, "off", 1);
  const auto refused = run_ahead_switch();
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("COHORT_INFER_RUN_AHEAD is 'off'"), std::string::npos)
      << refused.status().message();
  if (before) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
}

}  // namespace
}  // namespace cohort::infer
