// check_lockstep (see lockstep.h).
#include "infer/lockstep.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <vector>

#include "base/check.h"

namespace cohort::infer {
namespace {

using models::decode::InferenceEngine;

class LockstepCheckedEngine final : public InferenceEngine {
 public:
  LockstepCheckedEngine(std::unique_ptr<InferenceEngine> inner, collective::Communicator* tp)
      : inner_(std::move(inner)), tp_(tp) {}
  int vocab_size() const override { return inner_->vocab_size(); }
  int slots() const override { return inner_->slots(); }
  int capacity() const override { return inner_->capacity(); }
  std::string describe() const override { return inner_->describe(); }

  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    check("prefill", 1, n, logits, [&](uint64_t& h) {
      mix(h, slot);
      for (int i = 0; i < n; ++i) mix(h, tokens[i]);
    });
    inner_->prefill(slot, tokens, n, logits, greedy);
  }
  void prefill_many(const int* slots, const std::vector<const std::vector<int32_t>*>& prompts,
                    float* logits, int32_t* greedy) override {
    check("prefill_many", 2, static_cast<int64_t>(prompts.size()), logits, [&](uint64_t& h) {
      for (size_t j = 0; j < prompts.size(); ++j) {
        mix(h, slots[j]);
        for (int32_t t : *prompts[j]) mix(h, t);
      }
    });
    inner_->prefill_many(slots, prompts, logits, greedy);
  }
  void decode(const int* slots, const int32_t* tokens, int B, float* logits,
              int32_t* greedy) override {
    check("decode", 3, B, logits, [&](uint64_t& h) {
      for (int b = 0; b < B; ++b) mix(h, slots[b]), mix(h, tokens[b]);
    });
    inner_->decode(slots, tokens, B, logits, greedy);
  }
  bool can_extend() const override { return inner_->can_extend(); }
  int kv_block_size() const override { return inner_->kv_block_size(); }
  int64_t kv_blocks() const override { return inner_->kv_blocks(); }
  void release(int slot) override { inner_->release(slot); }
  int adapters() const override { return inner_->adapters(); }
  void set_adapter(int slot, int index) override { inner_->set_adapter(slot, index); }
  models::Model* adapter_base() override { return inner_->adapter_base(); }
  int add_adapter(std::unique_ptr<models::LoraAdapters> adapters) override {
    return inner_->add_adapter(std::move(adapters));
  }
  void remove_adapter(int index) override { inner_->remove_adapter(index); }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    check("extend", 4, n, logits, [&](uint64_t& h) {
      mix(h, slot);
      for (int i = 0; i < n; ++i) mix(h, tokens[i]);
    });
    inner_->extend(slot, tokens, n, logits, greedy);
  }

 private:
  // FNV-1a over the call's inputs.
  static void mix(uint64_t& h, int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ULL; }

  template <typename Fill>
  void check(const char* kind, int64_t code, int64_t count, const float* logits, Fill fill) {
    ++calls_;
    uint64_t hash = 14695981039346656037ULL;
    fill(hash);
    const std::array<int64_t, 5> mine = {calls_, code, count, logits != nullptr,
                                         static_cast<int64_t>(hash >> 1)};
    std::vector<int64_t> all(mine.size() * tp_->size());
    const Status s = tp_->all_gather(mine.data(), all.data(), mine.size(), collective::DType::kI64);
    COHORT_CHECK_MSG(s.is_ok(), "lockstep check of {} #{} on {}: {}", kind, calls_, tp_->name(),
                     s.message());
    for (int r = 0; r < tp_->size(); ++r) {
      const int64_t* theirs = all.data() + r * mine.size();
      COHORT_CHECK_MSG(std::equal(mine.begin(), mine.end(), theirs),
                       "tensor-parallel ranks make different engine calls: rank {} of {} calls "
                       "{} [call, kind, count, logits, inputs hash] = [{}], rank {} [{}]",
                       tp_->rank(), tp_->name(), kind, fmt::join(mine, ", "), r,
                       fmt::join(theirs, theirs + mine.size(), ", "));
    }
  }

  std::unique_ptr<InferenceEngine> inner_;
  collective::Communicator* tp_;
  int64_t calls_ = 0;
};

}  // namespace

std::unique_ptr<InferenceEngine> check_lockstep(std::unique_ptr<InferenceEngine> engine,
                                                collective::Communicator* tp) {
  return std::make_unique<LockstepCheckedEngine>(std::move(engine), tp);
}

}  // namespace cohort::infer
