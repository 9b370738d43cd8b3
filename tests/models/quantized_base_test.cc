// A LoRA job's held frozen base (models/quantized_base.h) on the CPU
// backend: a model whose block projections are held as bf16, NF4 or FP8 and
// expanded a block at a time computes exactly what a model with those
// weights rounded or round-tripped through the format computes (losses,
// adapter gradients, KV decode after expand_all), under fp32 and bf16 GEMM
// operands (a bf16 block's image read as working weights), keeps no block
// expanded outside its pass, and stores a fraction of the fp32 bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "models/kv_cache.h"
#include "models/lora.h"
#include "models/quant/quantized_weight.h"
#include "models/quantized_base.h"

namespace cohort::models {
namespace {

ModelConfig config() {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = 96, c.max_seq = 32;  // hidden 64, intermediate 128: whole NF4 blocks
  return c;
}

LoraConfig all_linear() {
  LoraConfig l;
  l.rank = 4, l.alpha = 8;
  l.targets.assign(std::begin(kAllLoraTargets), std::end(kAllLoraTargets));
  l.base_dtype = DType::kF32;
  return l;
}

// The base the held one must equal: every block rounded to bf16, or every
// block projection through quantize and dequantize on the host.
void round_trip(Model& model, HeldFormat format) {
  for (int l = 0; l < model.config().layers; ++l) {
    const int g = model.layout().block_group(l);
    if (format == HeldFormat::kBf16) {
      round_group(model, g, DType::kBF16);
      continue;
    }
    float* data = model.params(g);  // host memory on the CPU backend
    for (const ParamSpec& p : model.layout().groups[g].params) {
      if (!is_projection_weight(p.name)) continue;
      auto q = quant::quantize(format == HeldFormat::kNf4 ? quant::WeightFormat::kNf4 : quant::WeightFormat::kFp8Block,
                               p.name, data + p.offset, p.shape[0], p.shape[1]);
      ASSERT_TRUE(q.is_ok()) << q.status().to_string();
      ASSERT_TRUE(quant::dequantize(*q, data + p.offset).is_ok());
    }
  }
}

struct QuantizedAdapted {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraAdapters> lora;
  std::unique_ptr<QuantizedBase> base;
  // streamed: the model's blocks are quantized as init_weights fills them
  // (Buffers::kStreamedBlocks), never all in fp32.
  // round_to: the base rounded first (bf16, as a job's is). buffer_only:
  // the stream sees no host copy of a block, only the model's buffer (as
  // from a loader that fills the backend's memory directly).
  enum class Source { kHost, kBufferOnly };
  // operands: the GEMMs' (kBf16: a bf16 base's image is read directly).
  QuantizedAdapted(HeldFormat format, bool quantized, bool streamed = false, DType round_to = DType::kF32,
                   Source source = Source::kHost, MatmulPrecision operands = MatmulPrecision::kFp32) {
    backend->set_matmul_precision(operands);
    model = std::move(Model::create(config(), {}, backend.get(), {},
                                    streamed ? Model::Buffers::kStreamedBlocks : Model::Buffers::kParamsOnly)
                          .value());
    if (streamed) base = std::move(QuantizedBase::stream(*model, format, round_to).value());
    if (source == Source::kBufferOnly) {
      Model::GroupFilled inner = model->group_filled_listener();
      model->set_group_filled_listener([inner](int group, const float*) { inner(group, nullptr); });
    }
    model->init_weights(7, 0.3f);
    if (streamed) {
      EXPECT_TRUE(base->finish_stream().is_ok());
    }
    // The rest (a streamed model's blocks are gone from it: only the
    // embedding and head), as a job rounds its frozen base.
    round_frozen_base(*model, round_to);
    lora = std::move(LoraAdapters::create(*model, all_linear()).value());
    lora->init(9);
    model->set_lora(lora.get());
    if (!quantized) {
      round_trip(*model, format);
      return;
    }
    if (!streamed) base = std::move(QuantizedBase::create(*model, format).value());
    model->set_hooks(base->wrap({}));
  }
};

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 96);
  return t;
}

class QuantizedBaseTest : public ::testing::TestWithParam<HeldFormat> {};

TEST_P(QuantizedBaseTest, TrainsAsTheRoundTrippedBase) {
  QuantizedAdapted want(GetParam(), false), got(GetParam(), true);
  const int B = 2, T = 12;
  const auto x = tokens(B * T, 1), y = tokens(B * T, 2);
  for (QuantizedAdapted* a : {&want, &got}) {
    a->lora->zero_grads();
    a->model->forward(x.data(), y.data(), B, T);
    a->model->backward(1.0f / (B * T));
  }
  const LossSum lw = want.model->forward(x.data(), y.data(), B, T);
  const LossSum lg = got.model->forward(x.data(), y.data(), B, T);
  EXPECT_EQ(lw.sum, lg.sum);
  for (int g = 0; g < want.lora->num_groups(); ++g) {
    const size_t n = want.lora->layout().groups[g].numel;
    if (n == 0) continue;
    EXPECT_EQ(std::memcmp(want.lora->grads(g), got.lora->grads(g), n * sizeof(float)), 0) << "group " << g;
  }
  // Outside a pass no block is expanded.
  for (int l = 0; l < got.model->config().layers; ++l)
    EXPECT_EQ(got.model->params(got.model->layout().block_group(l)), nullptr) << "layer " << l;
}

// Under bf16 GEMM operands a bf16 block is not widened: the GEMMs read its
// image, and the result is still the rounded base's, bit for bit.
TEST_P(QuantizedBaseTest, TrainsAsTheRoundTrippedBaseUnderBf16Operands) {
  const auto bf16 = MatmulPrecision::kBf16;
  QuantizedAdapted want(GetParam(), false, false, DType::kF32, QuantizedAdapted::Source::kHost, bf16);
  QuantizedAdapted got(GetParam(), true, false, DType::kF32, QuantizedAdapted::Source::kHost, bf16);
  const int B = 2, T = 12;
  const auto x = tokens(B * T, 1), y = tokens(B * T, 2);
  double losses[2];
  int i = 0;
  for (QuantizedAdapted* a : {&want, &got}) {
    a->lora->zero_grads();
    losses[i++] = a->model->forward(x.data(), y.data(), B, T).sum;
    a->model->backward(1.0f / (B * T));
  }
  EXPECT_EQ(losses[0], losses[1]);
  for (int g = 0; g < want.lora->num_groups(); ++g) {
    const size_t n = want.lora->layout().groups[g].numel;
    if (n == 0) continue;
    EXPECT_EQ(std::memcmp(want.lora->grads(g), got.lora->grads(g), n * sizeof(float)), 0) << "group " << g;
  }
  // A sample after training widens every block: the fp32 buffers then hold
  // the values the image held.
  got.base->expand_all();
  got.backend->set_matmul_precision(MatmulPrecision::kFp32);
  want.backend->set_matmul_precision(MatmulPrecision::kFp32);
  EXPECT_EQ(want.model->forward(x.data(), y.data(), B, T).sum, got.model->forward(x.data(), y.data(), B, T).sum);
}

TEST_P(QuantizedBaseTest, DecodesAsTheRoundTrippedBaseOnceExpanded) {
  QuantizedAdapted want(GetParam(), false), got(GetParam(), true);
  got.base->expand_all();
  const auto prompt = tokens(9, 3);
  std::vector<float> a(96), b(96);
  auto cache_w = KvCache::create(*want.model, 1, 16), cache_g = KvCache::create(*got.model, 1, 16);
  ASSERT_TRUE(cache_w.is_ok() && cache_g.is_ok());
  want.model->prefill(*cache_w, 0, prompt.data(), int(prompt.size()), a.data());
  got.model->prefill(*cache_g, 0, prompt.data(), int(prompt.size()), b.data());
  EXPECT_EQ(a, b);
  // Hooked passes leave pinned blocks expanded.
  const auto x = tokens(12, 4);
  got.model->forward(x.data(), x.data(), 1, 12);
  EXPECT_NE(got.model->params(got.model->layout().block_group(0)), nullptr);
}

TEST_P(QuantizedBaseTest, StreamedWhileLoadingEqualsQuantizingTheLoadedModel) {
  QuantizedAdapted whole(GetParam(), true), streamed(GetParam(), true, /*streamed=*/true);
  EXPECT_EQ(streamed.base->stored_bytes(), whole.base->stored_bytes());
  const auto x = tokens(24, 5), y = tokens(24, 6);
  EXPECT_EQ(whole.model->forward(x.data(), y.data(), 2, 12).sum, streamed.model->forward(x.data(), y.data(), 2, 12).sum);
  // A loader that skips a block is an error, not a base with a hole.
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(config(), {}, backend.get(), {}, Model::Buffers::kStreamedBlocks).value());
  auto base = std::move(QuantizedBase::stream(*model, GetParam(), DType::kF32).value());
  model->group_filled(model->layout().block_group(0));
  EXPECT_NE(base->finish_stream().message().find("got 1 of 2 blocks"), std::string::npos);
}

// A streamed block rounds and quantizes the same from the loader's host
// copy as from the model's buffer, and as a whole base rounded first.
TEST_P(QuantizedBaseTest, AStreamedBlockFromTheLoadersHostCopyIsTheOneFromItsBuffer) {
  QuantizedAdapted whole(GetParam(), true, false, DType::kBF16);
  QuantizedAdapted host(GetParam(), true, true, DType::kBF16);
  QuantizedAdapted buffer(GetParam(), true, true, DType::kBF16, QuantizedAdapted::Source::kBufferOnly);
  const auto x = tokens(24, 5), y = tokens(24, 6);
  const double expected = whole.model->forward(x.data(), y.data(), 2, 12).sum;
  EXPECT_EQ(host.model->forward(x.data(), y.data(), 2, 12).sum, expected);
  EXPECT_EQ(buffer.model->forward(x.data(), y.data(), 2, 12).sum, expected);
  // Rounded to bf16 first: not the fp32 base's (a bf16 base's blocks are
  // rounded whatever round_to says).
  if (GetParam() == HeldFormat::kBf16) return;
  QuantizedAdapted unrounded(GetParam(), true, true);
  EXPECT_NE(unrounded.model->forward(x.data(), y.data(), 2, 12).sum, expected);
}

TEST_P(QuantizedBaseTest, StoresAFractionOfTheFp32Bytes) {
  QuantizedAdapted got(GetParam(), true);
  // bf16: 2 bytes a value; NF4: half a byte and a 4-byte absmax per 64
  // values; FP8: a byte and a scale per 128 (all against 4 bytes), plus the
  // norms kept as they are.
  const double ratio = double(got.base->stored_bytes()) / double(got.base->unquantized_bytes());
  const double most = GetParam() == HeldFormat::kBf16 ? 0.52 : GetParam() == HeldFormat::kNf4 ? 0.16 : 0.3;
  EXPECT_LT(ratio, most) << ratio;
  EXPECT_GT(ratio, GetParam() == HeldFormat::kBf16 ? 0.5 : 0.1) << ratio;
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedBaseTest,
                         ::testing::Values(HeldFormat::kBf16, HeldFormat::kNf4, HeldFormat::kFp8Block),
                         [](const ::testing::TestParamInfo<HeldFormat>& info) { return to_string(info.param); });

}  // namespace
}  // namespace cohort::models
