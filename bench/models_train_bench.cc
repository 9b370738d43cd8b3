// models_train_bench: forward + backward (+ AdamW) tokens/s of a model preset
// on one device, for bench/RESULTS.md beside bench/models_torch_bench.py.
//   models_train_bench [preset=qwen3-0.6b] [batch=4] [seq=1024] [steps=10] [cuda|cpu]
//                      [attention=auto|cudnn|flash|math]
// Prints one JSON line: tokens/s, ms per step, model FLOP utilisation against
// a stated peak, and device memory. On CUDA the weights get bf16 working
// copies, as a DDP train job's do. The debugging switches apply as in a
// worker (worker/debug_switches.h): COHORT_TRAIN_BLOCKS=ops runs the blocks
// op by op instead of fused, COHORT_CUDA_OP_TIMES times each op.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "models/cuda_backend.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "worker/debug_switches.h"

using namespace cohort::models;

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "qwen3-0.6b";
  const int B = argc > 2 ? std::stoi(argv[2]) : 4;
  const int T = argc > 3 ? std::stoi(argv[3]) : 1024;
  const int steps = argc > 4 ? std::stoi(argv[4]) : 10;
  const std::string device = argc > 5 ? argv[5] : (cuda_device_count() > 0 ? "cuda" : "cpu");
  const std::string attention = argc > 6 ? argv[6] : "auto";
  auto config = preset_config(preset);
  if (!config.is_ok()) {
    std::fprintf(stderr, "%s\n", config.status().to_string().c_str());
    return 2;
  }
  config->max_seq = std::max(config->max_seq, T);
  auto debug = cohort::worker::read_debug_switches();
  if (!debug.is_ok()) {
    std::fprintf(stderr, "%s\n", debug.status().to_string().c_str());
    return 2;
  }
  std::unique_ptr<Backend> backend = make_cpu_backend();
#ifdef COHORT_HAVE_CUDA
  CudaBackend* cuda = nullptr;
  if (device == "cuda") {
    set_serial_kernel_launches(debug->serial_launches);
    auto made = make_cuda_backend(0, {.op_times = debug->op_times});
    if (!made.is_ok()) {
      std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
      return 1;
    }
    cuda = made->get();
    backend = std::move(made).value();
  }
#endif
  backend->set_attention_backend(attention_backend_named(attention));
  auto model = std::move(Model::create(*config, {}, backend.get()).value());
  model->init_weights(1);
  model->set_fused_blocks(debug->fused_training_blocks);
  model->set_fused_moe_blocks(debug->fused_moe_blocks);
  std::vector<void*> working;
  if (device == "cuda" && backend->matmul_precision() != MatmulPrecision::kFp32) {
    const DType half = matmul_operand_dtype(backend->matmul_precision());
    for (int g = 0; g < model->num_groups(); ++g) {
      const size_t n = model->layout().groups[g].numel;
      working.push_back(backend->alloc(n * dtype_size(half)));
      backend->set_working_weights(model->params(g), working.back(), n, half);
    }
  }
  AdamW opt(*model, AdamWConfig{});
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % config->vocab_size);
    targets[i] = static_cast<int32_t>((i * 104729 + 1) % config->vocab_size);
  }
  auto step = [&] {
    model->zero_grads();
    const LossSum l = model->forward(tokens.data(), targets.data(), B, T);
    model->backward(1.0f / static_cast<float>(l.count));
    opt.clip_grad_norm(1.0f);  // synchronises: the norm comes back to the host
    opt.step();
    return l.mean();
  };
  step();
  step();  // warm-up: activations and optimizer state allocated
#ifdef COHORT_HAVE_CUDA
  // Op times of the measured steps only: warm-up's module loads and cuBLAS
  // heuristics would land on the first ops.
  std::vector<std::pair<std::string, double>> warm_up_times;
  if (cuda) warm_up_times = cuda->op_times_ms();
#endif
  const auto t0 = std::chrono::steady_clock::now();
  double loss = 0;
  for (int s = 0; s < steps; ++s) loss = step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens_per_s = static_cast<double>(B) * T * steps / seconds;
  // 6 N per token for the matmuls (N: the parameters a token reads; a
  // mixture of experts' active ones) plus 12 * layers * T * q_dim for
  // attention (forward + backward), the usual MFU accounting.
  const double flops_per_token = 6.0 * static_cast<double>(config->num_active_parameters()) +
                                 12.0 * config->layers * T * config->q_dim();
  const double peak = device == "cuda" ? 989e12 : 0.0;  // H100/H200 dense bf16
  std::printf(
      "{\"preset\": \"%s\", \"device\": \"%s\", \"attention\": \"%s\", \"batch\": %d, \"seq\": %d, "
      "\"steps\": %d, \"ms_per_step\": %.2f, \"tokens_per_s\": %.1f, \"mfu\": %.4f, "
      "\"loss\": %.4f, \"blocks\": \"%s\"",
      preset.c_str(), device.c_str(), backend->attention_runs_fused(config->head_dim) ? attention.c_str() : "math", B, T, steps, 1e3 * seconds / steps, tokens_per_s,
      peak > 0 ? tokens_per_s * flops_per_token / peak : 0.0, loss,
      model->runs_fused_blocks() ? "fused" : "ops");
#ifdef COHORT_HAVE_CUDA
  if (cuda) {
    std::printf(", \"device_reserved_gib\": %.2f",
                static_cast<double>(cuda->stats().reserved_bytes) / (1u << 30));
  }
#endif
  std::printf("}\n");
#ifdef COHORT_HAVE_CUDA
  // COHORT_CUDA_OP_TIMES=1: where the GPU time went, per op, over all steps.
  if (cuda) {
    auto times = cuda->op_times_ms();
    for (auto& [name, ms] : times) {
      for (const auto& [warm_name, warm_ms] : warm_up_times) {
        if (warm_name == name) ms -= warm_ms;
      }
    }
    std::sort(times.begin(), times.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    double total = 0;
    for (const auto& [name, ms] : times) total += ms;
    for (const auto& [name, ms] : times) {
      if (ms > 0) std::printf("%-32s %9.2f ms/step %5.1f%%\n", name.c_str(), ms / steps, 100 * ms / total);
    }
  }
#endif
  return 0;
}
