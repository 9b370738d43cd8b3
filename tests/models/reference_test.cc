// An independent, loop-by-loop re-implementation of the HF decoder forward
// pass (modeling_qwen3 / modeling_llama / modeling_qwen2 semantics: rotate-half
// RoPE, repeat_kv GQA, per-head q/k RMSNorm, SwiGLU), in double precision,
// reading weights by their HF names. Finite differences only prove backward
// matches forward; this proves forward is the model HF defines.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "models/model.h"
#include "models/ops/rope.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using Vec = std::vector<double>;

class Reference {
 public:
  explicit Reference(const Model& m) : m_(m), c_(m.config()) {
    for (int g = 0; g < m.num_groups(); ++g) {
      for (const ParamSpec& p : m.layout().groups[g].params) {
        w_[p.name] = m.params(g) + p.offset;
      }
    }
  }

  // Logits [T, vocab] for one sequence.
  std::vector<Vec> forward(const std::vector<int32_t>& tokens) {
    const int T = static_cast<int>(tokens.size()), H = c_.hidden;
    std::vector<Vec> x(T, Vec(H));
    for (int t = 0; t < T; ++t) {
      for (int j = 0; j < H; ++j) x[t][j] = w("model.embed_tokens.weight")[tokens[t] * H + j];
    }
    for (int l = 0; l < c_.layers; ++l) layer(x, "model.layers." + std::to_string(l) + ".");
    const float* head = c_.tie_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
    std::vector<Vec> logits;
    for (int t = 0; t < T; ++t)
      logits.push_back(matvec(head, c_.vocab_size, H, norm(x[t], w("model.norm.weight"))));
    return logits;
  }

 private:
  const float* w(const std::string& name) {
    auto it = w_.find(name);
    EXPECT_NE(it, w_.end()) << name;
    return it->second;
  }
  const float* maybe(const std::string& name) {
    auto it = w_.find(name);
    return it == w_.end() ? nullptr : it->second;
  }
  Vec norm(const Vec& x, const float* weight) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / x.size() + c_.rms_eps);
    Vec out(x.size());
    for (size_t j = 0; j < x.size(); ++j) out[j] = weight[j] * x[j] * r;
    return out;
  }
  static Vec matvec(const float* W, int out, int in, const Vec& x, const float* bias = nullptr) {
    Vec y(out);
    for (int o = 0; o < out; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (int i = 0; i < in; ++i) s += static_cast<double>(W[o * in + i]) * x[i];
      y[o] = s;
    }
    return y;
  }
  // rotate_half: x * cos + cat(-x2, x1) * sin, on each head of a [heads*D] row.
  void rope(Vec& v, int heads, int pos) const {
    const int D = c_.head_dim, half = D / 2;
    const std::vector<float> inv = rope_inv_freq(c_);
    for (int h = 0; h < heads; ++h) {
      Vec x(v.begin() + h * D, v.begin() + (h + 1) * D);
      for (int i = 0; i < D; ++i) {
        const double angle = static_cast<double>(pos) * inv[i % half];
        const double rotated = i < half ? -x[i + half] : x[i - half];
        v[h * D + i] = x[i] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  }
  void head_norm(Vec& v, int heads, const float* weight) const {
    const int D = c_.head_dim;
    for (int h = 0; h < heads; ++h) {
      Vec part = norm(Vec(v.begin() + h * D, v.begin() + (h + 1) * D), weight);
      std::copy(part.begin(), part.end(), v.begin() + h * D);
    }
  }
  void layer(std::vector<Vec>& x, const std::string& p) {
    const int T = static_cast<int>(x.size()), H = c_.hidden, D = c_.head_dim;
    const int hq = c_.heads, hkv = c_.kv_heads, I = c_.intermediate;
    std::vector<Vec> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const Vec h = norm(x[t], w(p + "input_layernorm.weight"));
      q[t] = matvec(w(p + "self_attn.q_proj.weight"), hq * D, H, h,
                    maybe(p + "self_attn.q_proj.bias"));
      k[t] = matvec(w(p + "self_attn.k_proj.weight"), hkv * D, H, h,
                    maybe(p + "self_attn.k_proj.bias"));
      v[t] = matvec(w(p + "self_attn.v_proj.weight"), hkv * D, H, h,
                    maybe(p + "self_attn.v_proj.bias"));
      if (c_.qk_norm) {
        head_norm(q[t], hq, w(p + "self_attn.q_norm.weight"));
        head_norm(k[t], hkv, w(p + "self_attn.k_norm.weight"));
      }
      rope(q[t], hq, t);
      rope(k[t], hkv, t);
    }
    for (int t = 0; t < T; ++t) {
      Vec attn(hq * D, 0.0);
      for (int h = 0; h < hq; ++h) {
        const int kv = h / (hq / hkv);  // repeat_kv
        Vec s(t + 1);
        double mx = -1e300, sum = 0;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[t][h * D + d] * k[u][kv * D + d];
          s[u] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[u]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int u = 0; u <= t; ++u) {
          for (int d = 0; d < D; ++d) attn[h * D + d] += s[u] / sum * v[u][kv * D + d];
        }
      }
      const Vec o = matvec(w(p + "self_attn.o_proj.weight"), H, hq * D, attn);
      for (int j = 0; j < H; ++j) x[t][j] += o[j];
      const Vec h2 = norm(x[t], w(p + "post_attention_layernorm.weight"));
      const Vec g = matvec(w(p + "mlp.gate_proj.weight"), I, H, h2);
      const Vec up = matvec(w(p + "mlp.up_proj.weight"), I, H, h2);
      Vec a(I);
      for (int i = 0; i < I; ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * up[i];
      const Vec d = matvec(w(p + "mlp.down_proj.weight"), H, I, a);
      for (int j = 0; j < H; ++j) x[t][j] += d[j];
    }
  }

  const Model& m_;
  const ModelConfig& c_;
  std::map<std::string, const float*> w_;
};

struct Family {
  const char* name;
  const char* model_type;
  bool qk_norm, tied, bias, llama3_rope;
};

class ReferenceForward : public ::testing::TestWithParam<Family> {};

TEST_P(ReferenceForward, LogitsMatchAnIndependentHfStyleImplementation) {
  const Family f = GetParam();
  ModelConfig c = *preset_config("tiny");
  c.model_type = f.model_type;
  c.qk_norm = f.qk_norm, c.tie_embeddings = f.tied, c.attention_bias = f.bias;
  c.rope_theta = 500000.0f;
  if (f.llama3_rope) c.rope_scaling = RopeScaling{true, 8.0f, 1.0f, 4.0f, 16};
  auto cpu = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, cpu.get()).value());
  model->init_weights(17, 0.15f);
  // Norm weights and biases away from their 1 / 0 init, so their use is tested.
  for (int g = 0; g < model->num_groups(); ++g) {
    for (const ParamSpec& p : model->layout().groups[g].params) {
      if (p.shape.size() != 1) continue;
      auto r = testing::random_vector(p.numel, static_cast<uint32_t>(p.offset + 31 * g), 0.3f);
      for (size_t i = 0; i < p.numel; ++i) model->params(g)[p.offset + i] += r[i];
    }
  }
  const int T = 11;
  std::vector<int32_t> tokens(T);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 53 + 9) % c.vocab_size;
  model->forward(tokens.data(), nullptr, 1, T);
  const auto want = Reference(*model).forward(tokens);
  double max_err = 0, max_ref = 0;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < c.vocab_size; ++j) {
      max_err = std::max(max_err, std::abs(want[t][j] - model->logits()[t * c.vocab_size + j]));
      max_ref = std::max(max_ref, std::abs(want[t][j]));
    }
  }
  EXPECT_GT(max_ref, 0.1);
  EXPECT_LT(max_err / max_ref, 1e-5) << "max abs error " << max_err;
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceForward,
                         ::testing::Values(Family{"qwen3", "qwen3", true, false, false, false},
                                           Family{"llama3", "llama", false, true, false, true},
                                           Family{"qwen2", "qwen2", false, false, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cohort::models
