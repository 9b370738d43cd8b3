// InferenceEngine: what infer/'s scheduler and generation loop drive, one
// tensor-parallel rank's share of a model plus its KV cache.
//
// Two implementations: ModelEngine (below) runs models::Model on any models
// backend (the fp32 CPU reference on CPU hosts); CudaGraphEngine
// (cuda_graph_engine.h, CUDA builds only) keeps bf16 weights and replays decode
// steps as CUDA graphs. Every rank of a tensor-parallel group makes the same
// calls in the same order; they synchronise inside.
//
// Slots are sequences: prefill(slot, ...) starts one afresh, decode() appends
// one token to each listed slot. Logits are full-vocabulary fp32 on the host.
// When the caller passes no logits buffer it wants greedy tokens only, which an
// engine may pick on the device without copying the logits out. Whether a
// call passes logits must be the same on every rank of the group: gathering
// them is a collective.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/backend.h"
#include "models/kv_cache.h"
#include "models/lora.h"
#include "models/model.h"

namespace cohort::models::decode {

class InferenceEngine {
 public:
  virtual ~InferenceEngine() = default;
  virtual int vocab_size() const = 0;
  virtual int slots() const = 0;
  virtual int capacity() const = 0;  // positions per slot
  // "cpu fp32", "cuda bf16, decode in CUDA graphs", for logs and the summary.
  virtual std::string describe() const = 0;

  // Starts `slot` with n prompt tokens. Writes the last position's logits
  // [vocab] to `logits` when non-null, else its greedy token to *greedy.
  virtual void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) = 0;
  // Starts k distinct slots at once: logits [k, vocab] or greedy [k]. The
  // default prefills one by one; an engine that can packs them into one pass.
  virtual void prefill_many(const int* slots, const std::vector<const std::vector<int32_t>*>& prompts,
                            float* logits, int32_t* greedy);
  // One token for each of B distinct slots: logits [B, vocab], or greedy [B].
  virtual void decode(const int* slots, const int32_t* tokens, int B, float* logits,
                      int32_t* greedy) = 0;
  // Chunked prefill (scheduler.h): extend() appends n more prompt tokens to a
  // slot that prefill() started, with the last position's logits or greedy
  // token as prefill gives them. Engines that cannot return false from
  // can_extend(), and their prompts are prefilled whole.
  virtual bool can_extend() const { return false; }
  virtual void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy);

  // One forward over mixed work: `d` decode rows (one token for each of the
  // distinct slots decode_slots, as decode() takes them) and prompt chunks
  // (each n tokens for a slot no decode row names: a fresh chunk starts the
  // slot as prefill() does, a later one appends as extend() does). Outputs
  // are rows [0, d) for the decode rows, then one per chunk (its last
  // position's), as logits [d + chunks, vocab] or greedy tokens. The default
  // makes the calls above one by one; an engine that can runs the rows as
  // one forward when they are at most max_step_rows(), else as several.
  struct Chunk {
    int slot = 0;
    const int32_t* tokens = nullptr;
    int n = 0;
    bool fresh = false;
  };
  virtual void step(const int* decode_slots, const int32_t* decode_tokens, int d,
                    const std::vector<Chunk>& chunks, float* logits, int32_t* greedy);
  virtual int max_step_rows() const { return 1 << 30; }

  // Running ahead (a server's steps overlapping its host work): launch()
  // starts a step of greedy rows as step() takes them and may return
  // before it is done; collect() waits for the oldest launched step and
  // writes its tokens [d + chunks]. A decode row b with token_from[b] >= 0
  // takes as its token output row token_from[b] of the step launched just
  // before, which nobody has read yet (decode_tokens[b] is then ignored):
  // the host launches step t + 1 before it reads step t. At most two
  // launched steps are uncollected at once. launch() returns whether the
  // next launch may take tokens from this one (false: collect it first).
  // can_run_ahead() says whether launches overlap the caller's work: an
  // engine that computes on the calling thread gains nothing (its step is
  // done before launch() returns, and its tokens would reach the caller a
  // step later), so the default is false and callers make plain steps;
  // the default launch() runs the step at once (what tests of a caller's
  // run-ahead path drive).
  virtual bool can_run_ahead() const { return false; }
  virtual bool launch(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
                      const std::vector<Chunk>& chunks);
  virtual void collect(int32_t* greedy);
  // Prefix caching: starts `slot` afresh holding the cached KV of the
  // longest prefix of tokens[0, n) that an earlier sequence computed (whole
  // KV blocks, fewer than n positions) and returns how many positions that
  // is; the caller extends the slot from there. 0, with nothing done, where
  // the engine caches no prefixes.
  virtual int reuse_prefix(int slot, const int32_t* tokens, int n) {
    (void)slot, (void)tokens, (void)n;
    return 0;
  }
  // Whether reuse_prefix can find anything (a prompt's full blocks are
  // cached from the forward that computes them).
  virtual bool caches_prefixes() const { return false; }

  // The KV cache in blocks of kv_block_size() positions: a sequence of p
  // positions holds ceil(p / kv_block_size()) of the kv_blocks(). A paged
  // engine shares its blocks among slots by need (kv_blocks.h); one whose
  // slots own their rows has a block of capacity() per slot, the defaults.
  virtual int kv_block_size() const { return capacity(); }
  virtual int64_t kv_blocks() const { return slots(); }
  // Blocks no slot holds, where the engine counts them itself (blocks
  // shared by slots or kept for a prefix cache); -1: the caller counts.
  virtual int64_t kv_free_blocks() const { return -1; }
  // The scheduler is done with `slot` (its sequence ended or left): a paged
  // engine takes its blocks back. prefill() on a slot also starts it afresh.
  virtual void release(int slot) { (void)slot; }

  // Serving several LoRA adapters over one base (serve.adapters): the engine
  // holds adapters() of them, and `slot`'s sequence computes with adapter
  // `index` (-1: the base alone) from its next prefill on. Sequences of
  // different adapters share every batch. Engines without adapters hold 0.
  virtual int adapters() const { return 0; }
  virtual void set_adapter(int slot, int index) { (void)slot, (void)index; }
  // Adapters at run time (the server's load and unload endpoints): the
  // model they attach to (null: this engine takes none), add_adapter's new
  // index (indices are never reused), and remove_adapter, which the caller
  // makes only when no sequence uses the adapter.
  virtual models::Model* adapter_base() { return nullptr; }
  virtual int add_adapter(std::unique_ptr<models::LoraAdapters> adapters) {
    (void)adapters;
    return -1;
  }
  virtual void remove_adapter(int index) { (void)index; }

 private:
  // The default launch()'s outputs, oldest first, until collected.
  std::deque<std::vector<int32_t>> launched_;
};

// models::Model with a models::KvCache.
class ModelEngine final : public InferenceEngine {
 public:
  static Result<std::unique_ptr<ModelEngine>> create(std::unique_ptr<models::Backend> backend,
                                                     std::unique_ptr<models::Model> model,
                                                     int slots, int capacity);
  // Generation over a model someone else owns (the trainer's, for samples):
  // `model` must outlive the engine; the cache is the engine's own.
  static Result<std::unique_ptr<ModelEngine>> borrow(models::Model& model, int slots, int capacity);
  ~ModelEngine() override;
  int vocab_size() const override { return model_->config().vocab_size; }
  int slots() const override { return cache_->slots(); }
  int capacity() const override { return cache_->capacity(); }
  std::string describe() const override;
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override;
  void decode(const int* slots, const int32_t* tokens, int B, float* logits,
              int32_t* greedy) override;
  bool can_extend() const override { return true; }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override;
  // Adapters on the model's base (the engine keeps them; each a LoRA of the
  // model's shard, models/lora.h), added in index order.
  int add_adapter(std::unique_ptr<models::LoraAdapters> adapters) override;
  int adapters() const override { return static_cast<int>(adapters_.size()); }
  void set_adapter(int slot, int index) override;
  models::Model* adapter_base() override { return model_; }
  void remove_adapter(int index) override;

 private:
  ModelEngine() = default;
  // Declared in destruction order's reverse: the cache and model free into the backend.
  std::unique_ptr<models::Backend> owned_backend_;  // empty when borrowed
  std::unique_ptr<models::Model> owned_model_;
  models::Model* model_ = nullptr;
  std::unique_ptr<models::KvCache> cache_;
  std::vector<float> scratch_;  // logits when the caller wants greedy tokens only
  std::vector<std::unique_ptr<models::LoraAdapters>> adapters_;
  std::vector<int> slot_adapter_;  // per slot: an index into adapters_, or -1
  // The model's adapter runs for a pass over these slots' rows (each slot
  // `rows` rows, in order); nothing without adapters.
  void route_adapters(const int* slots, int count, int rows_each);
};

}  // namespace cohort::models::decode
