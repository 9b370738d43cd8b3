// A sparse layer's mixture of experts, op by op on the backend: the router,
// its softmax and top k, the rows sorted by expert, each expert's SwiGLU as
// GEMMs over its rows, the weighted sum back into token order; the backward
// of all of it, the routers' included; and transformers' load-balancing loss
// (load_balancing_loss_func) over every sparse layer of the pass.
//
// Each expert's GEMMs need its row count on the host: the sorted offsets
// come back once per layer and pass (one E + 1 integer copy), and backward
// reuses them. Dropless: every token reaches its k experts, so the sorted
// buffers are exactly N * k rows whatever the routing.
#include <algorithm>

#include "base/check.h"
#include "models/activations.h"
#include "models/model.h"

namespace cohort::models {

void Model::moe_forward(const BlockTensors& w, const MoeIo& m, const float* x, float* out, int N) {
  Backend& be = *backend_;
  const MoeConfig& moe = config_.moe;
  const int H = config_.hidden, E = moe.experts, k = moe.experts_per_token;
  const int Ie = dims_.expert_intermediate, rows = N * k;
  be.linear_forward(m.probs, x, w.router, nullptr, N, H, E);
  be.moe_router_forward(m.probs, m.experts, m.weights, m.prob_sums, m.probs, N, E, k, moe.normalize_top_k);
  be.moe_permute(m.offsets, m.source_rows, m.slots, m.experts, N, E, k);
  std::vector<int32_t>& offsets = *m.host_offsets;
  offsets.resize(E + 1);
  be.copy_to_host(offsets.data(), m.offsets, (E + 1) * sizeof(int32_t));
  be.gather_rows(m.xs, x, m.source_rows, rows, H);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], count = offsets[e + 1] - first;
    if (count == 0) continue;
    const ExpertTensors ex = layout_.expert_tensors(w, e);
    const size_t in = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_forward(m.g + mid, m.xs + in, ex.gate, nullptr, count, H, Ie);
    be.linear_forward(m.u + mid, m.xs + in, ex.up, nullptr, count, H, Ie);
  }
  be.swiglu_forward(m.h, m.g, m.u, static_cast<size_t>(rows) * Ie);
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], count = offsets[e + 1] - first;
    if (count == 0) continue;
    const ExpertTensors ex = layout_.expert_tensors(w, e);
    be.linear_forward(m.ys + static_cast<size_t>(first) * H, m.h + static_cast<size_t>(first) * Ie,
                      ex.down, nullptr, count, Ie, H);
  }
  be.zero(out, static_cast<size_t>(N) * H * sizeof(float));
  be.moe_combine(out, m.ys, m.slots, m.weights, N, k, H);
}

// On entry acts_->dres holds d loss / d (block output), which is also the
// gradient of the layer's output (the residual adds it unchanged); on exit
// dres has gained the MLP branch through post_attention_layernorm.
void Model::block_moe_backward(int l, const BlockTensors& w, const BlockTensors& dw) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  const MoeIo& m = a.moe[l];
  const MoeConfig& moe = config_.moe;
  const int N = a.B * a.T, H = config_.hidden, E = moe.experts, k = moe.experts_per_token;
  const int Ie = dims_.expert_intermediate, rows = N * k;
  const std::vector<int32_t>& offsets = a.moe_host_offsets[l];
  const size_t rows_H = static_cast<size_t>(rows) * H, rows_I = static_cast<size_t>(rows) * Ie;
  // The weighted sum: each sorted row's gradient and each weight's.
  be.moe_combine_backward(a.moe_dxs, a.moe_dweights, a.dres, m.ys, m.weights, m.slots, N, k, H);
  // Under tensor parallelism ys is this rank's partial sum of the experts'
  // outputs; the weights' gradient needs the whole.
  tp_sum(a.moe_dweights, static_cast<size_t>(rows));
  be.zero(a.moe_dh, rows_I * sizeof(float));
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], count = offsets[e + 1] - first;
    if (count == 0) continue;
    const ExpertTensors ex = layout_.expert_tensors(w, e), dex = layout_.expert_tensors(dw, e);
    const size_t out = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_backward(a.moe_dh + mid, dex.down, nullptr, a.moe_dxs + out, m.h + mid, ex.down, count, Ie, H);
  }
  be.zero(a.moe_dg, rows_I * sizeof(float));
  be.zero(a.moe_du, rows_I * sizeof(float));
  be.swiglu_backward(a.moe_dg, a.moe_du, a.moe_dh, m.g, m.u, rows_I);
  // moe_dxs held the outputs' gradients, spent above: now the inputs'.
  be.zero(a.moe_dxs, rows_H * sizeof(float));
  for (int e = 0; e < E; ++e) {
    const int first = offsets[e], count = offsets[e + 1] - first;
    if (count == 0) continue;
    const ExpertTensors ex = layout_.expert_tensors(w, e), dex = layout_.expert_tensors(dw, e);
    const size_t in = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_backward(a.moe_dxs + in, dex.gate, nullptr, a.moe_dg + mid, m.xs + in, ex.gate, count, H, Ie);
    be.linear_backward(a.moe_dxs + in, dex.up, nullptr, a.moe_du + mid, m.xs + in, ex.up, count, H, Ie);
  }
  // Back to token order: each token's k rows add up.
  be.zero(a.dtmp, static_cast<size_t>(N) * H * sizeof(float));
  be.moe_combine(a.dtmp, a.moe_dxs, m.slots, nullptr, N, k, H);
  tp_sum(a.dtmp, static_cast<size_t>(N) * H);
  // The router (replicated: every rank computes the whole gradient, so it
  // joins dtmp after the sum).
  be.zero(a.moe_dlogits, static_cast<size_t>(N) * E * sizeof(float));
  be.moe_router_backward(a.moe_dlogits, a.moe_dweights, m.probs, m.experts,
                         moe.aux_loss ? a.moe_aux_grad : nullptr, N, E, k, moe.normalize_top_k);
  be.linear_backward(a.dtmp, dw.router, nullptr, a.moe_dlogits, a.xn2[l], w.router, N, H, E);
  be.rmsnorm_backward(a.dres, dw.mlp_norm, a.dtmp, a.x2[l], w.mlp_norm, a.rstd2[l], N, H);
}

// transformers' load_balancing_loss_func over the R = N * (sparse layers)
// router rows of the pass, all layers' rows as one batch:
//   aux = E * sum_e f_e * P_e,  f_e = (times e was chosen) / R,
//   P_e = (sum of e's probabilities) / R,
// so d aux / d p[row, e] = E * count_e / R^2 for every row (the choice
// itself carries no gradient). The loss sum gains coef * aux per valid
// target (model.h).
void Model::add_router_aux_loss(LossSum* loss) {
  Activations& a = *acts_;
  const int E = config_.moe.experts, N = a.B * a.T;
  std::vector<double> count(E, 0.0), prob_sum(E, 0.0);
  std::vector<float> sums(E);
  int sparse_layers = 0;
  for (int l = 0; l < config_.layers; ++l) {
    if (!config_.is_moe_layer(l)) continue;
    ++sparse_layers;
    const std::vector<int32_t>& offsets = a.moe_host_offsets[l];
    for (int e = 0; e < E; ++e) count[e] += offsets[e + 1] - offsets[e];
    backend_->copy_to_host(sums.data(), a.moe[l].prob_sums, E * sizeof(float));
    for (int e = 0; e < E; ++e) prob_sum[e] += sums[e];
  }
  const double R = double(N) * sparse_layers;
  double aux = 0;
  for (int e = 0; e < E; ++e) aux += count[e] * prob_sum[e];
  aux *= E / (R * R);
  const double coef = config_.moe.aux_loss_coef, per_target = static_cast<double>(loss->count);
  loss->sum += coef * aux * per_target;
  a.moe_aux_dprob.resize(E);
  for (int e = 0; e < E; ++e) {
    a.moe_aux_dprob[e] = static_cast<float>(coef * per_target * E * count[e] / (R * R));
  }
}

void Model::prepare_router_aux_grad(float grad_scale) {
  Activations& a = *acts_;
  const int E = config_.moe.experts;
  COHORT_CHECK(static_cast<int>(a.moe_aux_dprob.size()) == E);
  std::vector<float> scaled(E);
  for (int e = 0; e < E; ++e) scaled[e] = a.moe_aux_dprob[e] * grad_scale;
  backend_->copy_from_host(a.moe_aux_grad, scaled.data(), E * sizeof(float));
}

}  // namespace cohort::models
