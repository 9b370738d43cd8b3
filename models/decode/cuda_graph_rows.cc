// CudaGraphEngine's rows: what each call (prefill, extend, a mixed step, a
// decode step) puts in the row buffers, which slots' KV blocks grow, and
// the prefix cache's bookkeeping; cuda_graph_step.cc runs the rows.
#include <algorithm>

#include "base/check.h"
#include "models/decode/cuda_graph_state.h"

namespace cohort::models::decode {

void CudaGraphEngine::prefill(int slot, const int32_t* tokens, int n, float* logits,
                              int32_t* greedy) {
  const std::vector<int32_t> prompt(tokens, tokens + n);
  prefill_many(&slot, {&prompt}, logits, greedy);
}

void CudaGraphEngine::prefill_many(const int* slots,
                                   const std::vector<const std::vector<int32_t>*>& prompts,
                                   float* logits, int32_t* greedy) {
  // Chunks of whole prompts that fit the row buffers (one prompt always
  // does: the buffers hold `capacity` rows).
  size_t begin = 0;
  while (begin < prompts.size()) {
    size_t end = begin, rows = 0;
    while (end < prompts.size() && rows + prompts[end]->size() <= static_cast<size_t>(max_rows_)) {
      rows += prompts[end++]->size();
    }
    COHORT_CHECK_MSG(end > begin, "prompt of {} tokens exceeds the row buffers ({})",
                     prompts[begin]->size(), max_rows_);
    prefill_chunk(slots, prompts, begin, end, logits, greedy);
    begin = end;
  }
}

void CudaGraphEngine::prefill_chunk(const int* slots,
                                    const std::vector<const std::vector<int32_t>*>& prompts,
                                    size_t begin, size_t end, float* logits, int32_t* greedy) {
  int row = 0;
  const int k = static_cast<int>(end - begin);
  COHORT_CHECK(k <= max_batch_);
  for (size_t j = begin; j < end; ++j) {
    const std::vector<int32_t>& p = *prompts[j];
    const int n = static_cast<int>(p.size());
    COHORT_CHECK_MSG(n >= 1 && n <= options_.capacity, "prefill of {} tokens, capacity {}", n,
                     options_.capacity);
    for (int i = 0; i < n; ++i, ++row) {
      host_rows_[row] = p[i];
      host_rows_[max_rows_ + row] = slots[j];
      host_rows_[2 * max_rows_ + row] = i;
    }
    host_head_rows_[j - begin] = row - 1;
    pool_->release(slots[j]);  // a prefill starts the slot afresh
    forget(slots[j]);
    hold(slots[j], n);
    lengths_.at(slots[j]) = n;
    note(slots[j], p.data(), n);
  }
  const size_t V = static_cast<size_t>(config_.vocab_size);
  run(row, k, k, false, true, logits ? logits + begin * V : nullptr, greedy + begin);
}

void CudaGraphEngine::extend(int slot, const int32_t* tokens, int n, float* logits,
                             int32_t* greedy) {
  const int start = lengths_.at(slot);
  COHORT_CHECK_MSG(n >= 1 && n <= max_rows_ && start + n <= options_.capacity,
                   "extend of slot {} by {} tokens at {} (capacity {}, rows {})", slot, n, start,
                   options_.capacity, max_rows_);
  for (int i = 0; i < n; ++i) {
    host_rows_[i] = tokens[i];
    host_rows_[max_rows_ + i] = slot;
    host_rows_[2 * max_rows_ + i] = start + i;
  }
  host_head_rows_[0] = n - 1;
  hold(slot, start + n);
  lengths_[slot] = start + n;
  note(slot, tokens, n);
  int32_t unused = 0;
  run(n, 1, 1, false, true, logits, greedy ? greedy : &unused);
}

void CudaGraphEngine::step(const int* decode_slots, const int32_t* decode_tokens, int d,
                           const std::vector<Chunk>& chunks, float* logits, int32_t* greedy) {
  if (chunks.empty()) {
    if (d > 0) decode(decode_slots, decode_tokens, d, logits, greedy);
    return;
  }
  // Forwards of whole chunks that fit the row buffers, the decode rows in
  // the first (a chunk fits alone: it is at most a context).
  const size_t V = static_cast<size_t>(config_.vocab_size);
  size_t begin = 0;
  int out = 0;
  while (begin < chunks.size()) {
    const int lead = begin == 0 ? d : 0;
    size_t end = begin;
    int rows = lead;
    while (end < chunks.size() && rows + chunks[end].n <= max_rows_ &&
           lead + static_cast<int>(end - begin) < max_batch_) {
      rows += chunks[end++].n;
    }
    COHORT_CHECK_MSG(end > begin, "a chunk of {} tokens beside {} decode rows exceeds the row buffers ({})",
                     chunks[begin].n, lead, max_rows_);
    forward_rows(decode_slots, decode_tokens, lead, chunks, begin, end, logits ? logits + out * V : nullptr,
                 greedy + out);
    out += lead + static_cast<int>(end - begin);
    begin = end;
  }
}

void CudaGraphEngine::forward_rows(const int* decode_slots, const int32_t* decode_tokens, int d,
                                   const std::vector<Chunk>& chunks, size_t begin, size_t end, float* logits,
                                   int32_t* greedy) {
  const int rows = stage_mixed(decode_slots, decode_tokens, nullptr, d, chunks, begin, end);
  const int heads = d + static_cast<int>(end - begin);
  decode_rows_ = d;
  run(rows, heads, heads, false, true, logits, greedy);
  decode_rows_ = 0;
}

// A decode row's token: staged, or (token_from[b] >= 0) the previous
// step's pick, which take_tokens puts in place on the device; its key for
// the prefix cache waits until the host reads that pick (collect()).
void CudaGraphEngine::stage_decode_row(int b, int slot, const int32_t* tokens, const int* token_from) {
  const bool fed = token_from != nullptr && token_from[b] >= 0;
  host_rows_[b] = fed ? 0 : tokens[b];
  host_rows_[kTokenSourcePart * max_rows_ + b] = fed ? token_from[b] : -1;
  if (!fed) note(slot, tokens + b, 1);
}

int CudaGraphEngine::stage_mixed(const int* decode_slots, const int32_t* decode_tokens, const int* token_from, int d,
                                 const std::vector<Chunk>& chunks, size_t begin, size_t end) {
  for (int b = 0; b < d; ++b) {
    const int slot = decode_slots[b], pos = lengths_.at(slot);
    COHORT_CHECK_MSG(pos < options_.capacity, "slot {} is full ({} positions)", slot, pos);
    hold(slot, pos + 1);
    lengths_[slot] = pos + 1;
    stage_decode_row(b, slot, decode_tokens, token_from);
    host_rows_[max_rows_ + b] = slot;
    host_rows_[2 * max_rows_ + b] = pos;
    host_head_rows_[b] = b;
  }
  int row = d;
  for (size_t j = begin; j < end; ++j) {
    const Chunk& c = chunks[j];
    if (c.fresh) {
      pool_->release(c.slot);
      forget(c.slot);
      lengths_.at(c.slot) = 0;
    }
    const int start = lengths_.at(c.slot);
    COHORT_CHECK_MSG(c.n >= 1 && start + c.n <= options_.capacity,
                     "a chunk of {} tokens for slot {} at {} (capacity {})", c.n, c.slot, start, options_.capacity);
    for (int i = 0; i < c.n; ++i, ++row) {
      host_rows_[row] = c.tokens[i];
      host_rows_[max_rows_ + row] = c.slot;
      host_rows_[2 * max_rows_ + row] = start + i;
      host_rows_[kTokenSourcePart * max_rows_ + row] = -1;
    }
    host_head_rows_[d + (j - begin)] = row - 1;
    hold(c.slot, start + c.n);
    lengths_[c.slot] = start + c.n;
    note(c.slot, c.tokens, c.n);
  }
  return row;
}

void CudaGraphEngine::hold(int slot, int positions) {
  COHORT_CHECK_MSG(pool_->grow(slot, positions),
                   "slot {} needs {} KV blocks for {} positions but {} are free: the caller admitted "
                   "more than the cache holds (Scheduler reserves whole lengths)",
                   slot, pool_->blocks_for(positions) - pool_->held(slot), positions, pool_->free());
}

void CudaGraphEngine::release(int slot) {
  pool_->release(slot);
  forget(slot);
  lengths_.at(slot) = 0;
}

int CudaGraphEngine::reuse_prefix(int slot, const int32_t* tokens, int n) {
  if (!options_.prefix_caching) return 0;
  release(slot);
  const int cached = pool_->match_prefix(slot, tokens, n);
  lengths_.at(slot) = cached;
  slot_tokens_.at(slot).assign(tokens, tokens + cached);
  return cached;
}

// Keys are made as the positions are enqueued; a match is only looked for
// between steps, when every enqueued position has been written.
void CudaGraphEngine::note(int slot, const int32_t* tokens, int n) {
  if (!options_.prefix_caching || slot >= options_.slots) return;
  std::vector<int32_t>& t = slot_tokens_.at(slot);
  t.insert(t.end(), tokens, tokens + n);
  pool_->commit(slot, t.data(), static_cast<int>(t.size()));
}

void CudaGraphEngine::forget(int slot) {
  if (options_.prefix_caching && slot < options_.slots) slot_tokens_.at(slot).clear();
}

void CudaGraphEngine::decode(const int* slots, const int32_t* tokens, int B, float* logits,
                             int32_t* greedy) {
  const int padded = stage_decode(slots, tokens, nullptr, B);
  run(padded, padded, B, options_.cuda_graphs, false, logits, greedy);
}

int CudaGraphEngine::stage_decode(const int* slots, const int32_t* tokens, const int* token_from, int B) {
  const int padded = *std::lower_bound(buckets_.begin(), buckets_.end(), B);
  for (int b = 0; b < padded; ++b) {
    const bool real = b < B;
    const int pos = real ? lengths_.at(slots[b]) : 0;
    COHORT_CHECK_MSG(pos < options_.capacity, "slot {} is full ({} positions)", slots[b], pos);
    if (real) {
      hold(slots[b], pos + 1);
      stage_decode_row(b, slots[b], tokens, token_from);
      ++lengths_[slots[b]];
    } else {
      host_rows_[b] = 0;
      host_rows_[kTokenSourcePart * max_rows_ + b] = -1;
    }
    host_rows_[max_rows_ + b] = real ? slots[b] : options_.slots;  // the spare slot
    host_rows_[2 * max_rows_ + b] = pos;
  }
  return padded;
}

}  // namespace cohort::models::decode
