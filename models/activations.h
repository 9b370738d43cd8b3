// Private to the model: the activation arena for one (B, T) capacity, and
// the scratch of incremental (KV-cache) inference. All pointers are backend
// memory carved out of allocations made at warm-up.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::models {

struct Activations {
  int capacity_tokens = 0;  // B*T the training buffers hold
  int capacity_seq = 0;     // T the score scratch holds
  int B = 0, T = 0;         // shape of the current forward pass
  bool has_targets = false;
  int32_t *tokens = nullptr, *targets = nullptr, *pos = nullptr;
  std::vector<int32_t> host_targets;
  // Saved per layer for backward. res[l] is the input of block l, res[layers]
  // the output of the last block.
  std::vector<float*> res, xn1, rstd1, q, k, v, rstd_q, rstd_k, qr, kr, lse, y, x2, xn2, rstd2, g,
      u, h;
  float *xnf = nullptr, *rstdf = nullptr, *logits = nullptr, *losses = nullptr,
        *ce_scratch = nullptr;
  int logit_rows = 0;  // rows `logits` holds: B*T, or the LM head's chunk
  bool fp32_head = false;  // xnf, rstdf, logits, ce_scratch exist (see ensure_activations)
  // Backward scratch, reused by every block.
  float *dres = nullptr, *dtmp = nullptr, *tmp = nullptr, *dy = nullptr, *dq = nullptr,
        *dk = nullptr, *dv = nullptr, *dk_lin = nullptr, *dg = nullptr, *du = nullptr,
        *dh = nullptr, *attn_scratch = nullptr;
  std::vector<float> host_losses;

  // Incremental inference scratch (separate capacity, allocated on demand).
  int infer_tokens = 0, infer_rows = 0, infer_context = 0;
  int32_t *infer_ids = nullptr, *infer_pos = nullptr;
  float *ix = nullptr, *ixn = nullptr, *iq = nullptr, *ik = nullptr, *iv = nullptr, *iy = nullptr,
        *itmp = nullptr, *ig = nullptr, *iu = nullptr, *ih = nullptr, *irstd = nullptr,
        *ilast = nullptr, *ilogits = nullptr, *igathered = nullptr, *iscores = nullptr;

  std::vector<void*> training_allocations, infer_allocations;
  size_t training_bytes = 0, infer_bytes = 0;
};

}  // namespace cohort::models
