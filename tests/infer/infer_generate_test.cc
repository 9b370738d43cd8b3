// Continuous batching over models::decode::ModelEngine: a sequence's tokens do not depend on
// the batch size or its neighbours, and greedy decoding matches the argmax of
// the full forward pass.
#include <gtest/gtest.h>

#include <algorithm>

#include "infer/generate.h"
#include "tests/infer/tiny_engine.h"

namespace cohort::infer {
namespace {

// A cache of 64 positions per slot.
std::unique_ptr<models::decode::ModelEngine> engine_of(int slots) { return testing::tiny_engine(slots, 64); }

std::vector<Prompt> prompts() {
  std::vector<Prompt> out;
  const std::vector<std::vector<int32_t>> raw = {
      {1, 2, 3}, {40, 41}, {100, 7, 9, 200, 3}, {5}, {17, 18, 19, 20}};
  for (size_t i = 0; i < raw.size(); ++i) out.push_back(Prompt{static_cast<int>(i), raw[i], ""});
  return out;
}

std::vector<std::vector<int32_t>> run(int slots, const GenerateOptions& options,
                                      const StopCondition& stop) {
  auto engine = engine_of(slots);
  GenerateStats stats;
  auto out = generate_all(*engine, prompts(), stop, options, &stats);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  std::vector<std::vector<int32_t>> tokens;
  for (const auto& o : *out) tokens.push_back(o.tokens);
  EXPECT_EQ(stats.prompt_tokens, 15);
  return tokens;
}

TEST(InferGenerate, TokensDoNotDependOnBatchSize) {
  GenerateOptions options;
  options.max_new_tokens = 10;
  StopCondition none = *StopCondition::create({}, nullptr);
  const auto one = run(1, options, none);
  EXPECT_EQ(run(2, options, none), one);
  EXPECT_EQ(run(5, options, none), one);
  options.sampling.temperature = 1.0f;
  options.sampling.top_k = 50;
  options.sampling.seed = 3;
  const auto sampled = run(1, options, none);
  EXPECT_EQ(run(3, options, none), sampled);
  EXPECT_NE(sampled, one);
}

TEST(InferGenerate, GreedyMatchesFullForwardArgmax) {
  GenerateOptions options;
  options.max_new_tokens = 9;
  StopCondition none = *StopCondition::create({}, nullptr);
  const auto mine = run(3, options, none);
  // The reference decodes without a KV cache: the whole sequence through the
  // model's forward pass each step, argmax of the last position.
  auto config = models::preset_config("tiny");
  auto backend = models::make_cpu_backend();
  auto model = models::Model::create(*config, {0, 1}, backend.get());
  (*model)->init_weights(5, 0.2f);
  const int V = config->vocab_size;
  for (const Prompt& p : prompts()) {
    std::vector<int32_t> seq = p.tokens, want;
    for (int t = 0; t < options.max_new_tokens; ++t) {
      const int T = static_cast<int>(seq.size());
      (*model)->forward(seq.data(), nullptr, 1, T);
      const float* last = (*model)->logits() + static_cast<size_t>(T - 1) * V;
      const int32_t next = static_cast<int32_t>(std::max_element(last, last + V) - last);
      want.push_back(next);
      seq.push_back(next);
    }
    EXPECT_EQ(mine[p.index], want) << p.index;
  }
}

TEST(InferGenerate, FinishedSequencesFreeTheirSlotForTheNextPrompt) {
  GenerateOptions options;
  options.max_new_tokens = 6;
  StopCondition none = *StopCondition::create({}, nullptr);
  const auto ref = run(5, options, none);
  jobs::InferSection infer;
  infer.stop_tokens = {ref[0][1]};  // prompt 0 now ends after two tokens (or at once)
  auto stop = *StopCondition::create(infer, nullptr);
  auto engine = engine_of(2);
  auto out = generate_all(*engine, prompts(), stop, options, nullptr);
  ASSERT_TRUE(out.is_ok());
  for (const auto& o : *out) {
    const auto& r = ref[o.index];
    const size_t end = std::find(r.begin(), r.end(), infer.stop_tokens[0]) - r.begin();
    const size_t expect = std::min(end + 1, r.size());
    EXPECT_EQ(o.tokens, std::vector<int32_t>(r.begin(), r.begin() + expect)) << o.index;
    EXPECT_EQ(o.finish_reason, end < r.size() ? "stop" : "length") << o.index;
  }
}

TEST(InferGenerate, PromptThatDoesNotFitTheCacheIsAnError) {
  auto engine = engine_of(1);
  GenerateOptions options;
  options.max_new_tokens = 60;
  StopCondition none = *StopCondition::create({}, nullptr);
  auto out = generate_all(*engine, {Prompt{0, std::vector<int32_t>(10, 1), ""}}, none, options, nullptr);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("prompt 0"), std::string::npos);
}

// Counts the engine calls that asked for logits and those that did not.
class LogitsRecorder final : public models::decode::InferenceEngine {
 public:
  explicit LogitsRecorder(std::unique_ptr<models::decode::InferenceEngine> inner) : inner_(std::move(inner)) {}
  int vocab_size() const override { return inner_->vocab_size(); }
  int slots() const override { return inner_->slots(); }
  int capacity() const override { return inner_->capacity(); }
  std::string describe() const override { return inner_->describe(); }
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    ++(logits ? with_logits : without_logits);
    inner_->prefill(slot, tokens, n, logits, greedy);
  }
  void decode(const int* slots, const int32_t* tokens, int B, float* logits,
              int32_t* greedy) override {
    ++(logits ? with_logits : without_logits);
    inner_->decode(slots, tokens, B, logits, greedy);
  }
  int with_logits = 0, without_logits = 0;

 private:
  std::unique_ptr<models::decode::InferenceEngine> inner_;
};

// A tensor-parallel rank that does not keep the logits (no on_logits) must
// still ask the engine for them when its reporter does: the CUDA engine's
// logits gather is a collective, and a rank skipping it hung the group.
TEST(InferGenerate, ReturnLogitsAsksTheEngineForLogitsWithOrWithoutACallback) {
  StopCondition none = *StopCondition::create({}, nullptr);
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.return_logits = true;
  LogitsRecorder quiet(engine_of(2));
  ASSERT_TRUE(generate_all(quiet, prompts(), none, options, nullptr).is_ok());
  int seen = 0;
  options.on_logits = [&seen](int, const float*, int) { ++seen; };
  LogitsRecorder reporter(engine_of(2));
  auto out = generate_all(reporter, prompts(), none, options, nullptr);
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(quiet.without_logits, 0);
  EXPECT_EQ(reporter.without_logits, 0);
  EXPECT_EQ(quiet.with_logits, reporter.with_logits);
  EXPECT_EQ(seen, 5 * static_cast<int>(prompts().size()));
  // Greedy tokens from the returned logits are the engine's own greedy picks.
  GenerateOptions greedy;
  greedy.max_new_tokens = 5;
  for (const auto& o : *out) EXPECT_EQ(o.tokens, run(2, greedy, none)[o.index]) << o.index;
}

TEST(InferGenerate, OnLogitsWithoutReturnLogitsIsAnError) {
  auto engine = engine_of(1);
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.on_logits = [](int, const float*, int) {};
  StopCondition none = *StopCondition::create({}, nullptr);
  auto out = generate_all(*engine, prompts(), none, options, nullptr);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("return_logits"), std::string::npos);
}

}  // namespace
}  // namespace cohort::infer
