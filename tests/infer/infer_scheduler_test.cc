// Scheduler steps over models::decode::ModelEngine: chunked prefill gives the tokens of whole
// prefill, running streams get a token every step while a long prompt is
// prefilled, a cancelled request frees its slot at the next step, and the
// server's step input survives its flat encoding.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "infer/scheduler.h"
#include "models/decode/kv_blocks.h"
#include "infer/serve_step.h"
#include "infer/structured_output.h"
#include "tests/infer/paged_fake.h"
#include "tests/infer/tiny_engine.h"

namespace cohort::infer {
namespace {

using testing::tiny_engine;

using testing::request;

// Runs to completion; tokens by id.
std::map<int64_t, std::vector<int32_t>> drain(Scheduler& s) {
  std::map<int64_t, std::vector<int32_t>> out;
  for (int guard = 0; !s.idle() && guard < 10000; ++guard) {
    for (const TokenEvent& e : s.step()) {
      if (e.token >= 0) out[e.id].push_back(e.token);
    }
  }
  EXPECT_TRUE(s.idle());
  return out;
}

TEST(InferScheduler, ChunkedPrefillGivesTheTokensOfWholePrefill) {
  std::map<int64_t, std::vector<int32_t>> by_chunk[3];
  const int chunks[3] = {0, 5, 1};
  for (int c = 0; c < 3; ++c) {
    auto engine = tiny_engine(2);
    SchedulerOptions o;
    o.max_batched_tokens = chunks[c];
    Scheduler s(*engine, o);
    for (int id = 0; id < 5; ++id) ASSERT_TRUE(s.add(request(id, 3 + 6 * id, 8)).is_ok());
    by_chunk[c] = drain(s);
  }
  EXPECT_EQ(by_chunk[1], by_chunk[0]);
  EXPECT_EQ(by_chunk[2], by_chunk[0]);
  for (const auto& [id, tokens] : by_chunk[0]) EXPECT_EQ(tokens.size(), 8u) << id;
}

// A server's time budget (step_budget.h): a step with decode rows takes at
// most prompt_cap prompt tokens; one with none takes max_batched_tokens.
TEST(InferScheduler, APromptCapBoundsThePromptTokensOfStepsWithDecodeRows) {
  auto engine = tiny_engine(2);
  SchedulerOptions o;
  o.max_batched_tokens = 64;
  Scheduler s(*engine, o);
  ASSERT_TRUE(s.add(request(1, 30, 40)).is_ok());
  StepStats first;
  s.step(&first, 7);  // nothing decodes yet: the cap does not apply
  EXPECT_EQ(first.prefill_tokens, 30);
  ASSERT_TRUE(s.add(request(2, 40, 4)).is_ok());
  int steps = 0;
  int64_t prompt_tokens = 0;
  bool got_first = false;
  while (!got_first && steps < 20) {
    StepStats st;
    for (const auto& e : s.step(&st, 7)) got_first = got_first || e.id == 2;
    EXPECT_LE(st.prefill_tokens, 7);
    EXPECT_EQ(st.decode_rows, 1);
    prompt_tokens += st.prefill_tokens;
    ++steps;
  }
  EXPECT_TRUE(got_first);
  EXPECT_EQ(prompt_tokens, 40);
  EXPECT_EQ(steps, 6);  // ceil(40 / 7)
}

TEST(InferScheduler, RunningStreamsGetATokenEveryStepWhileALongPromptPrefills) {
  auto engine = tiny_engine(2);
  SchedulerOptions o;
  o.max_batched_tokens = 5;  // request 1's next token and 4 prompt tokens a step
  Scheduler s(*engine, o);
  ASSERT_TRUE(s.add(request(1, 2, 40)).is_ok());
  s.step();  // request 1 prefilled and decoding
  ASSERT_TRUE(s.add(request(2, 40, 4)).is_ok());  // 10 steps of prefill at 4 a step
  int steps_until_first_of_2 = 0;
  bool got_first = false;
  while (!got_first) {
    StepStats st;
    const auto events = s.step(&st);
    ++steps_until_first_of_2;
    EXPECT_LE(st.prefill_tokens, 4);
    int for_1 = 0;
    for (const auto& e : events) for_1 += e.id == 1, got_first = got_first || e.id == 2;
    EXPECT_EQ(for_1, 1) << "request 1 stalled at step " << steps_until_first_of_2;
    ASSERT_LT(steps_until_first_of_2, 20);
  }
  EXPECT_EQ(steps_until_first_of_2, 10);
}

// The CPU engine, recording each forward the scheduler asks for.
class StepRecorder final : public testing::ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  void step(const int* decode_slots, const int32_t* decode_tokens, int d, const std::vector<Chunk>& chunks,
            float* logits, int32_t* greedy) override {
    Forward f{d, static_cast<int>(chunks.size()), d};
    for (const Chunk& c : chunks) f.rows += c.n;
    forwards.push_back(f);
    InferenceEngine::step(decode_slots, decode_tokens, d, chunks, logits, greedy);
  }
  struct Forward {
    int decode_rows = 0, chunks = 0, rows = 0;
  };
  std::vector<Forward> forwards;
};

// A step is one forward of at most max_batched_tokens rows, decode rows and
// prompt chunks together, and the tokens are whole prefill's.
TEST(InferScheduler, EachStepIsOneForwardOfDecodeRowsAndPromptChunksWithinTheBudget) {
  std::map<int64_t, std::vector<int32_t>> whole;
  {
    auto engine = tiny_engine(4);
    Scheduler s(*engine, {});
    for (int id = 0; id < 6; ++id) ASSERT_TRUE(s.add(request(id, 3 + 5 * id, 6)).is_ok());
    whole = drain(s);
  }
  StepRecorder engine(tiny_engine(4));
  SchedulerOptions o;
  o.max_batched_tokens = 8;
  Scheduler s(engine, o);
  for (int id = 0; id < 6; ++id) ASSERT_TRUE(s.add(request(id, 3 + 5 * id, 6)).is_ok());
  std::map<int64_t, std::vector<int32_t>> mixed_tokens;
  for (int guard = 0; !s.idle() && guard < 1000; ++guard) {
    const size_t before = engine.forwards.size();
    for (const TokenEvent& e : s.step()) {
      if (e.token >= 0) mixed_tokens[e.id].push_back(e.token);
    }
    EXPECT_EQ(engine.forwards.size(), before + 1) << "step " << guard;
  }
  bool mixed = false;
  for (const auto& f : engine.forwards) {
    EXPECT_LE(f.rows, 8);
    mixed = mixed || (f.decode_rows > 0 && f.chunks > 0);
  }
  EXPECT_TRUE(mixed) << "no forward carried decode rows and prompt chunks together";
  EXPECT_EQ(mixed_tokens, whole);
}

// Three requests that share 40 prompt tokens (the n choices of one
// completion): the first computes them; the other two wait one step and
// start past the 40, computing one token each.
TEST(InferScheduler, PromptsThatStartAlikeWaitAStepAndComputeOnlyWhatDiffers) {
  // Each greedy token is the slot's length mod 100.
  testing::PagedFake engine({.slots = 4, .blocks = 64, .blocks_per_slot = 16, .vocab = 100, .prefix_caching = true},
                            [](const std::vector<int32_t>& t) { return static_cast<int32_t>(t.size() % 100); });
  SchedulerOptions o;
  o.max_batched_tokens = 64;
  Scheduler s(engine, o);
  for (int id = 0; id < 3; ++id) {
    SequenceRequest r;
    r.id = id;
    for (int t = 0; t < 40; ++t) r.prompt.push_back(t + 1);
    r.prompt.push_back(50 + id);
    r.max_new_tokens = 3;
    ASSERT_TRUE(s.add(std::move(r)).is_ok());
  }
  std::map<int64_t, std::vector<int32_t>> tokens;
  for (int guard = 0; !s.idle() && guard < 100; ++guard) {
    for (const TokenEvent& e : s.step()) {
      if (e.token >= 0) tokens[e.id].push_back(e.token);
    }
  }
  ASSERT_GE(engine.forwards.size(), 2u);
  EXPECT_EQ(engine.forwards[0], (std::vector<std::pair<int, int>>{{0, 41}}));
  EXPECT_EQ(engine.forwards[1], (std::vector<std::pair<int, int>>{{40, 1}, {40, 1}}));
  EXPECT_EQ(s.prefix_hit_tokens(), 80);
  for (int id = 0; id < 3; ++id) EXPECT_EQ(tokens[id], (std::vector<int32_t>{41, 42, 43})) << id;
}

TEST(InferScheduler, ACancelledRequestFreesItsSlotAtTheNextStep) {
  auto engine = tiny_engine(1);
  Scheduler s(*engine, {});
  ASSERT_TRUE(s.add(request(1, 3, 50)).is_ok());
  ASSERT_TRUE(s.add(request(2, 3, 5)).is_ok());
  s.step();
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 1);
  s.cancel(1);
  const auto events = s.step();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].id, 1);
  EXPECT_TRUE(events[0].finished);
  EXPECT_STREQ(events[0].finish_reason, "cancelled");
  bool two_started = false;
  for (const auto& e : events) two_started = two_started || (e.id == 2 && e.token >= 0);
  EXPECT_TRUE(two_started) << "the freed slot went to the waiting request in the same step";
  s.cancel(2);
  s.cancel(99);  // unknown: ignored
  s.step();
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.kv_used(), 0);
}

// A first token says how long its request waited for a slot (from its
// arrival) and how long its prefill took (from the step that started it,
// chunks included); later tokens and unknown arrivals say -1.
TEST(InferScheduler, AFirstTokenSaysHowLongItsRequestQueuedAndPrefilled) {
  auto engine = tiny_engine(1);
  SchedulerOptions o;
  o.max_batched_tokens = 5;
  Scheduler s(*engine, o);
  const auto arrived = std::chrono::steady_clock::now() - std::chrono::milliseconds(50);
  SequenceRequest a = request(1, 3, 4), b = request(2, 12, 2), c = request(3, 2, 1);
  a.arrived = b.arrived = arrived;  // c's arrival is not known
  ASSERT_TRUE(s.add(a).is_ok());
  ASSERT_TRUE(s.add(b).is_ok());
  ASSERT_TRUE(s.add(c).is_ok());
  std::map<int64_t, std::vector<TokenEvent>> by_id;
  for (int guard = 0; !s.idle() && guard < 100; ++guard) {
    for (const TokenEvent& e : s.step()) by_id[e.id].push_back(e);
  }
  ASSERT_EQ(by_id[1].size(), 4u);
  ASSERT_EQ(by_id[2].size(), 2u);
  ASSERT_EQ(by_id[3].size(), 1u);
  for (auto& [id, events] : by_id) {
    EXPECT_GE(events[0].prefill_s, 0) << id;
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_EQ(events[i].queued_s, -1) << id;
      EXPECT_EQ(events[i].prefill_s, -1) << id;
    }
  }
  EXPECT_GE(by_id[1][0].queued_s, 0.05);
  // The one slot: b waited for a's four tokens, then prefilled over three steps.
  EXPECT_GT(by_id[2][0].queued_s, by_id[1][0].queued_s);
  EXPECT_EQ(by_id[3][0].queued_s, -1);
}

// Penalties reach the choice: greedy decoding of the tiny model repeats
// tokens, and with a strong repetition penalty it never does; min_tokens
// keeps a stop token from being chosen (or ending the sequence) too early.
TEST(InferScheduler, PenaltiesAndMinTokensChangeWhatIsPicked) {
  auto run = [](SequenceRequest r) {
    auto engine = tiny_engine(1);
    Scheduler s(*engine, {});
    EXPECT_TRUE(s.add(std::move(r)).is_ok());
    return drain(s)[1];
  };
  const std::vector<int32_t> plain = run(request(1, 4, 40));
  ASSERT_EQ(plain.size(), 40u);
  const std::set<int32_t> distinct_plain(plain.begin(), plain.end());
  ASSERT_LT(distinct_plain.size(), plain.size()) << "greedy decoding never repeated: nothing to penalise";
  SequenceRequest penalised = request(1, 4, 40);
  penalised.sampling.repetition_penalty = 1e6f;
  penalised.sampling.presence_penalty = 2.0f;
  const std::vector<int32_t> fresh = run(penalised);
  ASSERT_EQ(fresh.size(), 40u);
  EXPECT_EQ(std::set<int32_t>(fresh.begin(), fresh.end()).size(), fresh.size()) << "a token repeated";
  // The plain run's first token as a stop id: it would end at once.
  SequenceRequest stopping = request(1, 4, 10);
  jobs::InferSection stops;
  stops.stop_tokens = {plain[0]};
  stopping.stop = std::make_shared<const StopCondition>(StopCondition::create(stops, nullptr).value());
  EXPECT_EQ(run(stopping).size(), 1u);
  stopping.sampling.min_tokens = 5;
  const std::vector<int32_t> held = run(stopping);
  ASSERT_GE(held.size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(held[i], plain[0]) << "token " << i;
}

// With top_logprobs each token event carries the k likeliest tokens, most
// likely first; greedy decoding chose the first of them.
TEST(InferScheduler, TopLogprobsComeWithEachToken) {
  auto engine = tiny_engine(1);
  Scheduler s(*engine, {});
  SequenceRequest r = request(1, 4, 6);
  r.logprobs = true;
  r.top_logprobs = 3;
  ASSERT_TRUE(s.add(std::move(r)).is_ok());
  int tokens = 0;
  for (int guard = 0; !s.idle() && guard < 100; ++guard) {
    for (const TokenEvent& e : s.step()) {
      if (e.token < 0) continue;
      ++tokens;
      ASSERT_EQ(e.top.size(), 3u);
      EXPECT_EQ(e.top[0].first, e.token);
      EXPECT_FLOAT_EQ(e.top[0].second, e.logprob);
      EXPECT_GE(e.top[0].second, e.top[1].second);
      EXPECT_GE(e.top[1].second, e.top[2].second);
      EXPECT_LE(e.top[0].second, 0.0f);
    }
  }
  EXPECT_EQ(tokens, 6);
}

// A sequence held to a schema: whatever the (random) model prefers, its
// tokens form a document of the schema, and it ends once that is whole;
// the same request on another rank (spec only, as serve_step sends it)
// picks the same tokens.
TEST(InferScheduler, AGuidedSequenceWritesJsonOfItsSchema) {
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
          "tag": {"enum": ["alpha", "beta"]}, "note": {"type": "string", "maxLength": 8}},
          "required": ["ok", "n", "tag", "note"]})");
  text::ByteTokenizer bytes;
  auto vocabulary = text::TokenVocabulary::build(bytes, {});
  auto grammar = compile_constraint(constraint_spec(schema));
  ASSERT_TRUE(grammar.is_ok()) << grammar.status().message();
  std::vector<std::string> texts;
  for (float temperature : {0.0f, 1.0f}) {
    for (int copy = 0; copy < 2; ++copy) {
      auto engine = tiny_engine(2, 512);
      Scheduler s(*engine, {});
      SequenceRequest r = request(1, 5, 400);
      r.sampling.temperature = temperature;
      r.constraint = constraint_spec(schema);
      if (copy == 0) r.guide = std::make_shared<text::TokenConstraint>(*grammar, vocabulary);
      std::vector<TokenEvent> rejected;
      StepInput in;
      in.arrivals.push_back(r);
      apply_step_input(in, s, &bytes, {}, &rejected, vocabulary);
      ASSERT_TRUE(rejected.empty());
      std::string text;
      const char* finish = "";
      while (!s.idle()) {
        for (const TokenEvent& e : s.step()) {
          if (e.token >= 0) text.push_back(static_cast<char>(e.token));
          if (e.finished) finish = e.finish_reason;
        }
      }
      EXPECT_STREQ(finish, "stop") << text;
      const auto doc = nlohmann::json::parse(text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << text;
      EXPECT_TRUE(doc["ok"].is_boolean() && doc["n"].is_number_integer()) << text;
      EXPECT_TRUE(doc["tag"] == "alpha" || doc["tag"] == "beta") << text;
      EXPECT_LE(doc["note"].get<std::string>().size(), 8u * 4) << text;
      texts.push_back(text);
    }
  }
  EXPECT_EQ(texts[0], texts[1]);  // greedy, guide built here or from the spec
  EXPECT_EQ(texts[2], texts[3]);  // sampled with the same seed
}

// Sequences held to grammars in one step are picked on several threads:
// four sampled at once write, each, what it writes alone.
TEST(InferScheduler, GuidedSequencesPickedTogetherWriteWhatTheyWriteAlone) {
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"n": {"type": "integer"}, "note": {"type": "string", "maxLength": 12}},
          "required": ["n", "note"]})");
  text::ByteTokenizer bytes;
  auto vocabulary = text::TokenVocabulary::build(bytes, {});
  auto grammar = compile_constraint(constraint_spec(schema));
  ASSERT_TRUE(grammar.is_ok()) << grammar.status().message();
  auto guided = [&](int id) {
    SequenceRequest r = request(id, 4 + id, 200);
    r.sampling.temperature = 1.0f;
    r.sampler_stream = static_cast<uint64_t>(id);
    r.guide = std::make_shared<text::TokenConstraint>(*grammar, vocabulary);
    return r;
  };
  auto run = [&](int slots, const std::vector<int>& ids) {
    auto engine = tiny_engine(slots, 512);
    Scheduler s(*engine, {});
    for (int id : ids) EXPECT_TRUE(s.add(guided(id)).is_ok());
    std::map<int64_t, std::string> texts;
    for (int guard = 0; !s.idle() && guard < 5000; ++guard) {
      for (const TokenEvent& e : s.step()) {
        if (e.token >= 0) texts[e.id].push_back(static_cast<char>(e.token));
      }
    }
    return texts;
  };
  const auto together = run(4, {1, 2, 3, 4});
  for (int id = 1; id <= 4; ++id) {
    const auto alone = run(1, {id});
    EXPECT_EQ(together.at(id), alone.at(id)) << "request " << id;
    EXPECT_FALSE(nlohmann::json::parse(alone.at(id), nullptr, false).is_discarded()) << alone.at(id);
  }
}

TEST(InferScheduler, RefusesRequestsThatDoNotFitASlot) {
  auto engine = tiny_engine(1, 16);
  Scheduler s(*engine, {});
  const Status st = s.add(request(1, 10, 7));
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("17 positions"), std::string::npos) << st.message();
  EXPECT_FALSE(s.add(request(2, 0, 1)).is_ok());
  auto bad = request(3, 2, 1);
  bad.prompt[0] = 256;
  EXPECT_FALSE(s.add(bad).is_ok());
}

TEST(ServeStep, StepInputSurvivesItsEncoding) {
  StepInput in;
  in.stop = true;
  in.cancels = {4, 9};
  SequenceRequest r = request(7, 3, 11);
  r.sampling = models::SamplingParams{0.7f, 5, 0.9f, 42};
  r.sampling.presence_penalty = 0.25f, r.sampling.frequency_penalty = -0.5f;
  r.sampling.repetition_penalty = 1.3f, r.sampling.min_tokens = 4;
  r.logprobs = true;
  r.stop_ids = {3};
  r.stop_strings = {"ab", ""};
  r.constraint = constraint_spec(nlohmann::ordered_json{{"type", "object"}});
  r.adapter = 2;
  in.arrivals.push_back(r);
  in.adapter_changes.push_back(AdapterChange{true, "sql", "/adapters/sql", -1, 5});
  in.adapter_changes.push_back(AdapterChange{false, "chat", "", 1, 6});
  in.prompt_cap = 577;
  text::ByteTokenizer bytes;
  auto out = decode_step_input(encode_step_input(in), &bytes, {1});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_TRUE(out->stop);
  EXPECT_EQ(out->prompt_cap, 577);
  EXPECT_EQ(out->cancels, in.cancels);
  ASSERT_EQ(out->arrivals.size(), 1u);
  const SequenceRequest& q = out->arrivals[0];
  EXPECT_EQ(q.id, 7);
  EXPECT_EQ(q.prompt, r.prompt);
  EXPECT_EQ(q.max_new_tokens, 11);
  EXPECT_FLOAT_EQ(q.sampling.temperature, 0.7f);
  EXPECT_EQ(q.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(q.sampling.top_p, 0.9f);
  EXPECT_EQ(q.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(q.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(q.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(q.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(q.sampling.min_tokens, 4);
  EXPECT_TRUE(q.logprobs);
  EXPECT_EQ(q.stop_strings, r.stop_strings);
  EXPECT_EQ(q.constraint, r.constraint);
  EXPECT_EQ(q.adapter, 2);
  ASSERT_EQ(out->adapter_changes.size(), 2u);
  EXPECT_TRUE(out->adapter_changes[0].load);
  EXPECT_EQ(out->adapter_changes[0].name, "sql");
  EXPECT_EQ(out->adapter_changes[0].folder, "/adapters/sql");
  EXPECT_EQ(out->adapter_changes[0].ticket, 5);
  EXPECT_FALSE(out->adapter_changes[1].load);
  EXPECT_EQ(out->adapter_changes[1].index, 1);
  ASSERT_TRUE(q.stop);
  EXPECT_TRUE(q.stop->is_stop_token(3));
  EXPECT_TRUE(q.stop->is_stop_token(1));  // the model's eos
  auto truncated = encode_step_input(in);
  truncated.pop_back();
  EXPECT_FALSE(decode_step_input(truncated, &bytes, {}).is_ok());
  EXPECT_FALSE(decode_step_input({0, 5}, &bytes, {}).is_ok());
  auto no_cap = encode_step_input(in);
  no_cap.back() = 0;  // a step may always take one prompt token
  EXPECT_FALSE(decode_step_input(no_cap, &bytes, {}).is_ok());
}

}  // namespace
}  // namespace cohort::infer
