// One rank of an equivalence run: trains the tiny model for a few steps on
// deterministic synthetic data with a given strategy and mesh, then writes
// its per-step losses, its memory report and (dp rank 0 of each tp slice) its
// final parameters. Launched torchrun-style (MASTER_ADDR/PORT, RANK,
// WORLD_SIZE) by parallel_equivalence_test.
//
//   parallel_worker STRATEGY TP GLOBAL_BATCH MICRO_BATCH STEPS OUT_PREFIX
//
// Mixed precision through the environment: COHORT_TEST_MATMUL (fp32 | bf16 |
// fp16: the backend's GEMM precision), COHORT_TEST_PARAM_DTYPE (bf16 | fp16:
// zero3/fsdp2 gather dtype), COHORT_TEST_LOSS_SCALE (the loss is multiplied
// by it, finish_step divides it out) and COHORT_TEST_POISON_STEP (that
// step's loss scale is infinite, so its gradients are not finite);
// COHORT_TEST_NO_WORKING_WEIGHTS=1 turns the 16-bit working copies off.
// COHORT_TEST_LORA=RANK trains LoRA adapters of that rank on every
// projection (a mixture of experts: its attention ones; alpha 2 · rank, fp32
// base) instead of the whole model; the
// params file then holds the adapters and COHORT_TEST_BASE_CHECK=1 adds the
// frozen base's tensors, so that a test sees it unchanged.
// COHORT_TEST_LORA_BASE=bf16|nf4|fp8 holds that base in bf16 or quantized (QLoRA)
// block by block, and COHORT_TEST_BASE_ROUND_TRIP=bf16|nf4|fp8 rounds or round-trips
// it through the format on load instead.
// COHORT_TEST_CHECKPOINTING (none | selective | full) sets activation
// checkpointing.
// COHORT_TEST_PRESET names the model (default tiny; tiny-moe for experts),
// COHORT_TEST_NO_AUX=1 drops a mixture of experts' load-balancing loss (a
// loss of each rank's own tokens, so runs split otherwise differ by it), and
// COHORT_TEST_EP sets expert_parallel; every rank of the first expert group
// then writes its experts' parameters (.tpT.epE.params for E > 0).
// Each losses line: step, loss, gradient norm (-1 when skipped), applied.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "collective/bootstrap.h"
#include "hf/load_quantization.h"
#include "models/backend.h"
#include "models/config.h"
#include "models/cuda_backend.h"
#include "parallel/parallelize.h"
#ifdef COHORT_HAVE_NCCL
#include "collective/nccl/nccl_communicator.h"
#endif

using namespace cohort;

namespace {

constexpr int kSeqLen = 16;

// Token t of sequence i of step s: the same whatever the world size.
int32_t token(int step, int seq, int t, int vocab) {
  uint64_t x = uint64_t(step) * 1000003u + uint64_t(seq) * 7919u + uint64_t(t) * 104729u + 12345u;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return int32_t(x % uint64_t(vocab));
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "parallel_worker: %s: %s\n", what.c_str(), status.to_string().c_str());
  return 1;
}

void write_tensors(std::ofstream& out, const models::ParamGroup& group, const std::vector<float>& values,
                   const std::string& prefix) {
  for (const auto& p : group.params) {
    // name, shard dim, shard begin, local shape, global shape, values
    out << prefix << p.name << ' ' << int(p.shard_dim) << ' ' << p.shard_begin << ' ' << p.shape.size();
    for (auto d : p.shape) out << ' ' << d;
    for (auto d : p.global_shape) out << ' ' << d;
    out << ' ' << p.numel << '\n';
    out.write(reinterpret_cast<const char*>(values.data() + p.offset), std::streamsize(p.numel * sizeof(float)));
    out << '\n';
  }
}

void write_params(const std::string& path, parallel::ParallelModel& pm, bool with_base) {
  std::ofstream out(path, std::ios::binary);
  const auto& layout = pm.trained().layout();
  for (int g = 0; g < pm.trained().num_groups(); ++g) {
    std::vector<float> values;
    if (!pm.data_parallel->gather_group(g, &values).is_ok()) std::exit(3);
    write_tensors(out, layout.groups[g], values, "");
    if (!with_base || !pm.lora) continue;
    const auto& base = pm.model->layout().groups[g];
    values.resize(base.numel);
    pm.model->backend().copy_to_host(values.data(), pm.model->params(g), base.numel * sizeof(float));
    write_tensors(out, base, values, "frozen.");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: parallel_worker STRATEGY TP GLOBAL_BATCH MICRO_BATCH STEPS OUT_PREFIX\n");
    return 2;
  }
  auto strategy = parse_strategy(argv[1]);
  int tp = std::atoi(argv[2]), global_batch = std::atoi(argv[3]), micro = std::atoi(argv[4]);
  int steps = std::atoi(argv[5]);
  std::string out_prefix = argv[6];
  if (!strategy) return fail("strategy", strategy.status());

  auto world = collective::init_from_environment();
  if (!world) return fail("init", world.status());
  auto config = models::preset_config(env_or("COHORT_TEST_PRESET", "tiny"));
  if (!config) return fail("config", config.status());
  if (env_or("COHORT_TEST_NO_AUX", "0") == "1") config->moe.aux_loss = false;
  // COHORT_TEST_DEVICE=cuda: the same run on this rank's GPU over NCCL.
  std::unique_ptr<models::Backend> backend;
  std::shared_ptr<collective::Communicator> comm = world->cpu;
  void* stream = nullptr;
  const char* device = std::getenv("COHORT_TEST_DEVICE");
  if (device && std::string(device) == "cuda") {
#if defined(COHORT_HAVE_CUDA) && defined(COHORT_HAVE_NCCL)
    auto nccl = collective::init_nccl_world(*world);
    if (!nccl) return fail("nccl", nccl.status());
    auto cuda = models::make_cuda_backend((*nccl)->cuda_device());
    if (!cuda) return fail("cuda", cuda.status());
    stream = (*cuda)->stream();
    backend = std::move(*cuda);
    comm = std::shared_ptr<collective::Communicator>(std::move(*nccl));
#else
    return fail("device", invalid_argument("built without CUDA"));
#endif
  } else {
    backend = models::make_cpu_backend();
  }
  std::string matmul = env_or("COHORT_TEST_MATMUL", "");
  if (matmul == "fp32") backend->set_matmul_precision(models::MatmulPrecision::kFp32);
  if (matmul == "bf16") backend->set_matmul_precision(models::MatmulPrecision::kBf16);
  if (matmul == "fp16") backend->set_matmul_precision(models::MatmulPrecision::kFp16);
  double loss_scale = std::atof(env_or("COHORT_TEST_LOSS_SCALE", "1").c_str());
  int poison_step = std::atoi(env_or("COHORT_TEST_POISON_STEP", "0").c_str());
  parallel::ParallelConfig pc;
  std::string param_dtype = env_or("COHORT_TEST_PARAM_DTYPE", "fp32");
  pc.data_parallel.param_dtype = param_dtype == "bf16"   ? models::DType::kBF16
                                 : param_dtype == "fp16" ? models::DType::kF16
                                                         : models::DType::kF32;
  pc.data_parallel.keep_working_weights = env_or("COHORT_TEST_NO_WORKING_WEIGHTS", "0") != "1";
  pc.data_parallel.stream = stream;
  pc.tensor_parallel = tp;
  pc.expert_parallel = std::atoi(env_or("COHORT_TEST_EP", "1").c_str());
  pc.data_parallel.strategy = *strategy;
  pc.data_parallel.bucket_mb = 0.01;  // several buckets even for the tiny model
  const int lora_rank = std::atoi(env_or("COHORT_TEST_LORA", "0").c_str());
  if (lora_rank > 0) {
    models::LoraConfig lora;
    lora.rank = lora_rank, lora.alpha = 2.0 * lora_rank, lora.base_dtype = models::DType::kF32;
    lora.targets.assign(std::begin(models::kAllLoraTargets), std::end(models::kAllLoraTargets));
    // A mixture of experts takes adapters on its attention only.
    if (config->is_moe()) lora.targets.resize(4);
    const std::string base = env_or("COHORT_TEST_LORA_BASE", "");
    if (base == "bf16") lora.base_dtype = models::DType::kBF16;  // held block by block in bf16
    if (base == "nf4") lora.base_format = models::LoraConfig::BaseFormat::kNf4;
    if (base == "fp8") lora.base_format = models::LoraConfig::BaseFormat::kFp8;
    pc.lora = lora;
  }
  // COHORT_TEST_BASE_ROUND_TRIP=nf4|fp8: the base's projections through
  // that format on load, what a quantized base must train like.
  const std::string round_trip = env_or("COHORT_TEST_BASE_ROUND_TRIP", "");
  auto pm = parallel::parallelize(
      *config, comm.get(), backend.get(), pc,
      [&round_trip](models::Model& m) {
        m.init_weights(42);
        if (round_trip.empty()) return Status::ok();
        if (round_trip == "bf16") {
          models::round_frozen_base(m, models::DType::kBF16);
          return Status::ok();
        }
        return hf::quantize_round_trip(m, round_trip == "nf4" ? models::quant::WeightFormat::kNf4
                                                             : models::quant::WeightFormat::kFp8Block);
      },
      [](models::LoraAdapters& a) { a.init(43); return Status::ok(); });
  if (!pm) return fail("parallelize", pm.status());
  models::ActivationCheckpointing checkpointing = models::ActivationCheckpointing::kNone;
  if (!models::parse_activation_checkpointing(env_or("COHORT_TEST_CHECKPOINTING", "none"), &checkpointing))
    return fail("COHORT_TEST_CHECKPOINTING", invalid_argument("none, selective or full"));
  pm->model->set_activation_checkpointing(checkpointing);
  auto& mesh = *pm->mesh;
  int dp = mesh.dims().dp, dp_rank = mesh.dp_rank();
  if (global_batch % (micro * dp) != 0) return fail("batch", invalid_argument("global batch does not divide"));
  int accumulation = global_batch / (micro * dp);
  int vocab = config->vocab_size;

  std::ofstream losses(out_prefix + ".rank" + std::to_string(world->rank) + ".losses");
  models::AdamWConfig adamw;
  // Adam divides by sqrt(v) + eps: for gradients near rounding level that
  // amplifies summation-order noise (1 rank with 1 or 2 micro-batches already
  // differ by 3e-5 with eps 1e-8). A larger eps keeps the comparison about the
  // parallel machinery rather than about that amplification.
  adamw.lr = 1e-3f;
  adamw.eps = 1e-6f;
  std::vector<int32_t> tokens(size_t(micro) * kSeqLen), targets(tokens.size());
  for (int step = 1; step <= steps; ++step) {
    pm->data_parallel->begin_step(accumulation);
    double loss_sum = 0;
    double step_scale = step == poison_step ? INFINITY : loss_scale;
    float scale = float(step_scale / double(global_batch * kSeqLen));
    for (int k = 0; k < accumulation; ++k) {
      pm->data_parallel->begin_micro_step(k);
      int first_seq = dp_rank * (global_batch / dp) + k * micro;
      for (int b = 0; b < micro; ++b)
        for (int t = 0; t < kSeqLen; ++t) {
          tokens[b * kSeqLen + t] = token(step, first_seq + b, t, vocab);
          targets[b * kSeqLen + t] = token(step, first_seq + b, t + 1, vocab);
        }
      auto loss = pm->model->forward(tokens.data(), targets.data(), micro, kSeqLen);
      loss_sum += loss.sum;
      pm->model->backward(scale);
    }
    auto outcome = pm->data_parallel->finish_step(adamw, 1.0f, step, step == poison_step ? 1.0 : loss_scale);
    if (!outcome) return fail("step", outcome.status());
    float total = float(loss_sum);
    // The loss is a host value: sum it over the CPU world (tp ranks repeat it).
    total /= float(mesh.dims().tp);
    if (world->size > 1 && !world->cpu->all_reduce(&total, 1, collective::DType::kF32).is_ok()) return 4;
    losses << step << ' ' << (double(total) / (global_batch * kSeqLen)) << ' '
           << (outcome->applied ? outcome->grad_norm : -1.0) << ' ' << int(outcome->applied) << '\n';
  }
  auto mem = pm->data_parallel->memory();
  std::ofstream(out_prefix + ".rank" + std::to_string(world->rank) + ".memory")
      << mem.param_bytes << ' ' << mem.grad_bytes << ' ' << mem.optimizer_bytes << '\n';
  const bool with_base = env_or("COHORT_TEST_BASE_CHECK", "0") == "1";
  if (mesh.dims().expert_replica(world->rank) == 0) {
    const int ep_rank = mesh.ep_rank();
    write_params(out_prefix + ".tp" + std::to_string(mesh.tp_rank()) +
                     (ep_rank > 0 ? ".ep" + std::to_string(ep_rank) : std::string()) + ".params",
                 *pm, with_base);
  } else {
    // Sharded strategies gather collectively: every dp rank takes part.
    for (int g = 0; g < pm->trained().num_groups(); ++g) {
      std::vector<float> ignored;
      if (!pm->data_parallel->gather_group(g, &ignored).is_ok()) return 3;
    }
  }
  return 0;
}
