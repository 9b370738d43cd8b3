// Private to the model: the activation arena for one (B, T) capacity, and
// the scratch of incremental (KV-cache) inference. All pointers are backend
// memory carved out of allocations made at warm-up.
#pragma once

#include <cstdint>
#include <vector>

namespace cohort::models {

// What a sparse (mixture-of-experts) layer's forward writes and its backward
// reads (model_moe.cc, ops/moe_routing.h), for N rows, E experts, top k and
// each expert's Ie intermediate rows on this rank.
// Where a sparse layer's sorted rows go, on the host (model_moe.cc). The
// experts' GEMMs run over chunks of rows, one per (source rank, local
// expert), in that order: without expert parallelism one source (this
// rank) and every expert, with it the rows each rank of the expert group
// sent to this rank's experts.
struct MoeRoute {
  std::vector<int32_t> offsets;    // [E + 1] each global expert's first sorted row on this rank
  std::vector<int32_t> chunk_rows;  // [ep * experts on this rank]
  std::vector<size_t> send_rows;    // [ep] sorted rows this rank sends to each rank of its expert group
  std::vector<size_t> recv_rows;    // [ep] rows it takes from each
  int expert_rows = 0;              // sum of chunk_rows: the rows the experts' GEMMs run over
};

struct MoeIo {
  float* probs = nullptr;          // [N, E]: the router's logits, then their softmax in place
  int32_t* experts = nullptr;      // [N, k] chosen experts
  float* weights = nullptr;        // [N, k] their weights
  float* prob_sums = nullptr;      // [E] column sums of probs; null without the load-balancing loss
  int32_t* offsets = nullptr;      // [E + 1] each expert's first sorted row
  int32_t* source_rows = nullptr;  // [N * k] the token of each sorted row
  int32_t* slots = nullptr;        // [N * k] the sorted row of each (token, choice)
  float* xs = nullptr;             // [N * k, H] the normalised input, sorted by expert
  float* ys = nullptr;             // [N * k, H] the experts' outputs, sorted
  // The experts' rows (MoeRoute::expert_rows of them, at most ep * N * k):
  // their inputs and outputs (xs and ys themselves without expert
  // parallelism) and their SwiGLU.
  float *xe = nullptr, *ye = nullptr;
  float *g = nullptr, *u = nullptr, *h = nullptr;  // [expert rows, Ie]
  MoeRoute* route = nullptr;
  float* counts = nullptr;  // expert parallelism: the per-expert counts exchanged, [2, ep, experts on a rank]
};

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
  // Sparse layers: per layer (shared by all under full checkpointing,
  // except prob_sums and the host offsets, which the load-balancing loss
  // reads after every layer ran), the backward's scratch, and the
  // load-balancing loss's gradient per probability (host, then device,
  // scaled by backward's grad_scale).
  std::vector<MoeIo> moe;
  std::vector<MoeRoute> moe_routes;
  float *moe_dlogits = nullptr, *moe_dweights = nullptr, *moe_dxs = nullptr, *moe_dg = nullptr,
        *moe_du = nullptr, *moe_dh = nullptr, *moe_aux_grad = nullptr;
  // Expert parallelism: the gradients of the experts' rows (outputs, then
  // inputs), [ep * N * k, H].
  float *moe_dye = nullptr, *moe_dxe = nullptr;
  std::vector<float> moe_aux_dprob;

  // Incremental inference scratch (separate capacity, allocated on demand).
  int infer_tokens = 0, infer_rows = 0, infer_context = 0;
  int32_t *infer_ids = nullptr, *infer_pos = nullptr;
  float *ix = nullptr, *ixn = nullptr, *iq = nullptr, *ik = nullptr, *iv = nullptr, *iy = nullptr,
        *itmp = nullptr, *ig = nullptr, *iu = nullptr, *ih = nullptr, *irstd = nullptr,
        *ilast = nullptr, *ilogits = nullptr, *igathered = nullptr, *iscores = nullptr;
  MoeIo infer_moe;
  MoeRoute infer_moe_route;

  std::vector<void*> training_allocations, infer_allocations;
  size_t training_bytes = 0, infer_bytes = 0;
};

}  // namespace cohort::models
