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
//
// Expert parallelism: the sorted rows are already grouped by the rank that
// holds their expert, so one variable all-to-all over the expert group
// takes them there (after one of the per-expert counts), the experts run
// over what arrived (source rank by source rank, expert by expert), and
// the reverse all-to-all brings the outputs back in sorted order; backward
// does the same with the gradients. A rank may receive up to ep_size times
// its own rows.
#include <algorithm>

#include "base/check.h"
#include "models/activations.h"
#include "models/block_engine.h"
#include "models/model.h"

namespace cohort::models {

namespace {

// Calls f(local expert, first row, rows) for each chunk of the experts' rows
// in order (MoeRoute): source ranks outside, this rank's experts inside.
template <typename F>
void for_each_chunk(const MoeRoute& route, int local_experts, F&& f) {
  int first = 0;
  for (size_t c = 0; c < route.chunk_rows.size(); ++c) {
    const int count = route.chunk_rows[c];
    if (count > 0) f(static_cast<int>(c) % local_experts, first, count);
    first += count;
  }
}

}  // namespace

void Model::plan_moe_route(MoeRoute& r, float* counts) {
  const int E = config_.moe.experts, El = dims_.experts, ep = shard_.ep_size;
  r.chunk_rows.assign(static_cast<size_t>(ep) * El, 0);
  r.send_rows.assign(ep, 0);
  r.recv_rows.assign(ep, 0);
  if (ep == 1) {
    for (int e = 0; e < E; ++e) r.chunk_rows[e] = r.offsets[e + 1] - r.offsets[e];
    r.send_rows[0] = r.recv_rows[0] = static_cast<size_t>(r.offsets[E]);
    r.expert_rows = r.offsets[E];
    return;
  }
  // Rank p of the expert group holds experts [p * El, (p + 1) * El): this
  // rank's rows for each of them go there, and each rank says how many it
  // sends to each of this rank's experts (as floats: exact below 2^24 rows).
  const size_t n = static_cast<size_t>(ep) * El;
  std::vector<float> host(2 * n);
  for (int p = 0; p < ep; ++p) {
    for (int e = 0; e < El; ++e) {
      const int global = p * El + e, rows = r.offsets[global + 1] - r.offsets[global];
      host[static_cast<size_t>(global)] = static_cast<float>(rows);
      r.send_rows[p] += static_cast<size_t>(rows);
    }
  }
  backend_->copy_from_host(counts, host.data(), n * sizeof(float));
  const std::vector<size_t> each(ep, static_cast<size_t>(El));
  ep_.all_to_all_v(counts, each, counts + n, each);
  backend_->copy_to_host(host.data() + n, counts + n, n * sizeof(float));
  r.expert_rows = 0;
  for (int s = 0; s < ep; ++s) {
    for (int e = 0; e < El; ++e) {
      const int rows = static_cast<int>(host[n + static_cast<size_t>(s) * El + e]);
      r.chunk_rows[static_cast<size_t>(s) * El + e] = rows;
      r.recv_rows[s] += static_cast<size_t>(rows);
      r.expert_rows += rows;
    }
  }
}

void Model::exchange_rows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                          const std::vector<size_t>& recv_rows, int width) {
  std::vector<size_t> send_counts(send_rows.size()), recv_counts(recv_rows.size());
  for (size_t p = 0; p < send_rows.size(); ++p) send_counts[p] = send_rows[p] * width;
  for (size_t p = 0; p < recv_rows.size(); ++p) recv_counts[p] = recv_rows[p] * width;
  ep_.all_to_all_v(send, send_counts, recv, recv_counts);
}

void Model::moe_forward(const BlockTensors& w, const MoeIo& m, const float* x, float* out, int N) {
  Backend& be = *backend_;
  const MoeConfig& moe = config_.moe;
  const int H = config_.hidden, E = moe.experts, k = moe.experts_per_token;
  const int Ie = dims_.expert_intermediate, rows = N * k;
  const bool split = shard_.ep_size > 1;
  COHORT_CHECK(!split || ep_.all_to_all_v);
  be.linear_forward(m.probs, x, w.router, nullptr, N, H, E);
  be.moe_router_forward(m.probs, m.experts, m.weights, m.prob_sums, m.probs, N, E, k, moe.normalize_top_k);
  be.moe_permute(m.offsets, m.source_rows, m.slots, m.experts, N, E, k);
  MoeRoute& route = *m.route;
  route.offsets.resize(E + 1);
  be.copy_to_host(route.offsets.data(), m.offsets, (E + 1) * sizeof(int32_t));
  be.gather_rows(m.xs, x, m.source_rows, rows, H);
  plan_moe_route(route, m.counts);
  if (split) exchange_rows(m.xs, route.send_rows, m.xe, route.recv_rows, H);
  for_each_chunk(route, dims_.experts, [&](int e, int first, int count) {
    const ExpertTensors ex = layout_.expert_tensors(w, e);
    const size_t in = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_forward(m.g + mid, m.xe + in, ex.gate, nullptr, count, H, Ie);
    be.linear_forward(m.u + mid, m.xe + in, ex.up, nullptr, count, H, Ie);
  });
  be.swiglu_forward(m.h, m.g, m.u, static_cast<size_t>(route.expert_rows) * Ie);
  for_each_chunk(route, dims_.experts, [&](int e, int first, int count) {
    const ExpertTensors ex = layout_.expert_tensors(w, e);
    be.linear_forward(m.ye + static_cast<size_t>(first) * H, m.h + static_cast<size_t>(first) * Ie,
                      ex.down, nullptr, count, Ie, H);
  });
  if (split) exchange_rows(m.ye, route.recv_rows, m.ys, route.send_rows, H);
  be.zero(out, static_cast<size_t>(N) * H * sizeof(float));
  be.moe_combine(out, m.ys, m.slots, m.weights, N, k, H);
}

// On entry acts_->dres holds d loss / d (block output), which is also the
// gradient of the layer's output (the residual adds it unchanged); on exit
// dres has gained the MLP branch through post_attention_layernorm. Under
// expert parallelism the outputs' gradients travel to the experts' ranks
// and the inputs' come back, the forward's exchanges reversed.
void Model::block_moe_backward(int l, const BlockTensors& w, const BlockTensors& dw) {
  Activations& a = *acts_;
  Backend& be = *backend_;
  const MoeIo& m = a.moe[l];
  const MoeConfig& moe = config_.moe;
  const int N = a.B * a.T, H = config_.hidden, E = moe.experts, k = moe.experts_per_token;
  const int Ie = dims_.expert_intermediate, rows = N * k;
  const MoeRoute& route = *m.route;
  const bool split = shard_.ep_size > 1;
  const size_t expert_H = static_cast<size_t>(route.expert_rows) * H;
  const size_t expert_I = static_cast<size_t>(route.expert_rows) * Ie;
  // The weighted sum: each sorted row's gradient and each weight's.
  be.moe_combine_backward(a.moe_dxs, a.moe_dweights, a.dres, m.ys, m.weights, m.slots, N, k, H);
  // Under tensor parallelism ys is this rank's partial sum of the experts'
  // outputs; the weights' gradient needs the whole.
  tp_sum(a.moe_dweights, static_cast<size_t>(rows));
  float* dye = a.moe_dxs;
  if (split) {
    exchange_rows(a.moe_dxs, route.send_rows, a.moe_dye, route.recv_rows, H);
    dye = a.moe_dye;
  }
  be.zero(a.moe_dh, expert_I * sizeof(float));
  for_each_chunk(route, dims_.experts, [&](int e, int first, int count) {
    const ExpertTensors ex = layout_.expert_tensors(w, e), dex = layout_.expert_tensors(dw, e);
    const size_t out = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_backward(a.moe_dh + mid, dex.down, nullptr, dye + out, m.h + mid, ex.down, count, Ie, H);
  });
  be.zero(a.moe_dg, expert_I * sizeof(float));
  be.zero(a.moe_du, expert_I * sizeof(float));
  be.swiglu_backward(a.moe_dg, a.moe_du, a.moe_dh, m.g, m.u, expert_I);
  // Without expert parallelism moe_dxs held the outputs' gradients, spent
  // above: now the inputs'.
  float* dxe = split ? a.moe_dxe : a.moe_dxs;
  be.zero(dxe, expert_H * sizeof(float));
  for_each_chunk(route, dims_.experts, [&](int e, int first, int count) {
    const ExpertTensors ex = layout_.expert_tensors(w, e), dex = layout_.expert_tensors(dw, e);
    const size_t in = static_cast<size_t>(first) * H, mid = static_cast<size_t>(first) * Ie;
    be.linear_backward(dxe + in, dex.gate, nullptr, a.moe_dg + mid, m.xe + in, ex.gate, count, H, Ie);
    be.linear_backward(dxe + in, dex.up, nullptr, a.moe_du + mid, m.xe + in, ex.up, count, H, Ie);
  });
  if (split) exchange_rows(a.moe_dxe, route.recv_rows, a.moe_dxs, route.send_rows, H);
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
    // The fused blocks keep a sparse layer's routing themselves.
    const BlockMoeStats stats = engine_ ? engine_->moe_stats(l) : BlockMoeStats{};
    COHORT_CHECK(!engine_ || (stats.offsets && stats.prob_sums));
    const std::vector<int32_t>& offsets = engine_ ? *stats.offsets : a.moe_routes[l].offsets;
    for (int e = 0; e < E; ++e) count[e] += offsets[e + 1] - offsets[e];
    backend_->copy_to_host(sums.data(), engine_ ? stats.prob_sums : a.moe[l].prob_sums, E * sizeof(float));
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
