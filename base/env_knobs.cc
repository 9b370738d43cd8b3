// The COHORT_* table. Adding a variable: an EnvKnob, a row here (in enum
// order), its row in docs/gpus-and-performance.md (the test prints it), and
// read_env_knob at the use.
#include "base/env_knobs.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace cohort {

const std::vector<EnvKnobDoc>& env_knobs() {
  using K = EnvKnob;
  static const std::vector<EnvKnobDoc> table = {
      {K::kLog, "COHORT_LOG", "base",
       "Log level (trace, debug, info, warn, error, off) when `--log-level` is not given.", false},
      {K::kCoordinator, "COHORT_COORDINATOR", "protocol",
       "The coordinator's address for client commands (default tcp://127.0.0.1:7070).", false},
      {K::kKeys, "COHORT_KEYS", "cli", "Folder of CURVE keys when `--keys` is not given.", false},
      {K::kHttpToken, "COHORT_HTTP_TOKEN", "cli",
       "The HTTP API token of `cohort coordinator` and `cohort run` when `--http-token` is not "
       "given.",
       false},
      {K::kStore, "COHORT_STORE", "collective",
       "Set by the agent (launch contract): the rendezvous store a worker bootstraps from.", false},
      {K::kStoreToken, "COHORT_STORE_TOKEN", "collective",
       "Set by the agent (launch contract): the attempt's token, presented to the store.", false},
      {K::kProgressFile, "COHORT_PROGRESS_FILE", "train",
       "Set by the agent (launch contract): touched to report progress for hang detection.", false},
      {K::kNode, "COHORT_NODE", "train",
       "Set by the agent (launch contract): the node's name, for the shared-storage check and node-local "
       "checkpoints (else the host name).",
       false},
      {K::kCollectiveTimeoutS, "COHORT_COLLECTIVE_TIMEOUT_S", "collective",
       "Seconds a collective may wait for its peers before failing (default 600).", false},
      {K::kGlooHostname, "COHORT_GLOO_HOSTNAME", "collective",
       "The address Gloo binds to when GLOO_SOCKET_IFNAME is not set.", false},
      {K::kDevice, "COHORT_DEVICE", "worker",
       "`cpu` or `cuda` forces a built-in worker's device, for train, infer and serve alike (default: "
       "its GPU when it sees one); `cpu` keeps it on the CPU although it sees a GPU (parity checks).",
       true},
      {K::kPeakTflops, "COHORT_PEAK_TFLOPS", "worker",
       "Peak TFLOP/s per GPU for the MFU figure in metrics.jsonl (default 989, an H100's bf16).",
       false},
      {K::kCudaOpTimes, "COHORT_CUDA_OP_TIMES", "worker",
       "Any value: the CUDA backend times every op (models_train_bench prints the totals).", true},
      {K::kCudaSerialLaunches, "COHORT_CUDA_SERIAL_LAUNCHES", "worker",
       "`1`: kernels launch only after their predecessor has finished (no programmatic dependent "
       "launch), so that a kernel timer sees each kernel's own time.",
       true},
      {K::kQuantMma, "COHORT_QUANT_MMA", "models",
       "`0`: the quantized decode GEMV keeps its CUDA-core form for every code kind instead of the "
       "tensor-core form for 4-bit and e4m3 codes (comparisons: bench/quant_projection_bench).",
       true},
      {K::kFp8Gemm, "COHORT_FP8_GEMM", "models",
       "`0`: the graph engine's FP8 weights (128 x 128 blocks) beyond 8 rows keep the bf16 paths "
       "(codes read by the skinny GEMM, or expanded for cuBLASLt) instead of the FP8 tensor cores "
       "with activations quantized per row and 128 columns.",
       true},
      {K::kInferEngine, "COHORT_INFER_ENGINE", "worker",
       "`model` serves inference with the models library's fp32 CUDA engine instead of the bf16 "
       "graph engine (the reference it is compared with); `graphs`, the default, takes the graph "
       "engine wherever its kernels fit the model.",
       true},
      {K::kInferCheckLockstep, "COHORT_INFER_CHECK_LOCKSTEP", "worker",
       "`1`: every engine call is checked to be the same on all tensor-parallel ranks (tests).",
       true},
      {K::kInferDumpLogits, "COHORT_INFER_DUMP_LOGITS", "infer",
       "`1`: writes output_dir/logits/<prompt>.f32, the logits of every generated token (tests).",
       true},
      {K::kInferIgnoreEos, "COHORT_INFER_IGNORE_EOS", "infer",
       "`1`: generation ignores the model's end-of-sequence tokens (fixed-length benchmarks).",
       true},
      {K::kInferStepTimes, "COHORT_INFER_STEP_TIMES", "worker",
       "`1`: the bf16 graph engine times its steps on the GPU (CUDA events) and logs, as it closes, GPU and "
       "wall time per step for each decode batch size, and for the eager prompt and mixed steps by rows "
       "(GPU time a row, the host's time enqueuing them).",
       true},
      {K::kInferRunAhead, "COHORT_INFER_RUN_AHEAD", "infer",
       "`0`: the server and the offline job read each step's tokens before they launch the next, instead "
       "of launching the next step of greedy rows first and reading the last one's tokens while it runs, "
       "where the engine can (for A/B runs; another value than 0 or 1 is refused).",
       true},
      {K::kInferProjections, "COHORT_INFER_PROJECTIONS", "worker",
       "`skinny` or `cublaslt`: the bf16 graph engine's projections of 2 to 64 rows all take that "
       "kernel family instead of the one measured faster per decode bucket at warm-up (so that "
       "runs with and without graphs compute the same sums).",
       true},
      {K::kInferFusedAttentionRows, "COHORT_INFER_FUSED_ATTENTION_ROWS", "worker",
       "A number of rows: the bf16 graph engine's decode steps of up to that many rows prepare "
       "q/k/v inside the attention kernel, larger ones run qkv_rope_cache first (default 64).",
       true},
      {K::kInferLoraRunRows, "COHORT_INFER_LORA_RUN_ROWS", "worker",
       "A number of rows: in the bf16 graph engine's prompt steps, a served adapter's run of at "
       "least that many consecutive rows (a prompt's) takes the run kernels (shrink, then expand, "
       "over 16-row tiles) instead of the per-row LoRA kernel (default 1,024; 0: the per-row kernel "
       "for every row), for A/B runs.",
       true},
      {K::kInferLoraPrompt, "COHORT_INFER_LORA_PROMPT", "worker",
       "`dense` or `kernels`: the bf16 graph engine's prompt steps apply served adapters as cuBLAS "
       "GEMMs over every loaded adapter side by side (the default while their ranks sum to at most "
       "256), or through the LoRA kernels (per row, and runs by COHORT_INFER_LORA_RUN_ROWS), for "
       "A/B runs.",
       true},
      {K::kInferLoraDecode, "COHORT_INFER_LORA_DECODE", "worker",
       "`dense` or `kernel`: the bf16 graph engine's decode steps all apply served adapters in the "
       "dense form (cuBLAS GEMMs over every loaded adapter, captured in the decode graphs, which are "
       "captured again when adapters come or go), or all through the per-row LoRA kernel, instead of "
       "the default (dense where hidden is 4,096 or more: every step, or from 16 rows with "
       "COHORT_INFER_LORA_SIDE_STREAM=off), for A/B runs.",
       true},
      {K::kInferLoraSideStream, "COHORT_INFER_LORA_SIDE_STREAM", "worker",
       "`on` or `off`: in the dense form, served adapters' shrink GEMM and mask run beside their "
       "projection on a stream of their own (the default, `on`), or after it on the engine's stream, "
       "for A/B runs.",
       true},
      {K::kInferAttention, "COHORT_INFER_ATTENTION", "worker",
       "`lanes` or `tiles`: the bf16 graph engine's decode attention runs on the CUDA cores lane by "
       "lane, or on the tensor cores (the default where the head size is 64 or 128), for A/B runs.",
       true},
      {K::kTrainDumpBatches, "COHORT_TRAIN_DUMP_BATCHES", "train",
       "`1`: rank 0 appends each step's inputs and targets (int32) to output_dir/batches.i32, "
       "for loss parity checks against another trainer.",
       true},
      {K::kTrainBlocks, "COHORT_TRAIN_BLOCKS", "worker",
       "`ops`: CUDA training runs each decoder block op by op on fp32 activations instead of the "
       "fused bf16 blocks (models/block_engine.h), for A/B runs and equivalence checks; `dense`: "
       "the fused blocks without a mixture of experts' sparse layers, which then run op by op "
       "(`fused`, the default, runs them in the blocks: models/cuda/train_experts.cuh).",
       true},
      {K::kMoeGemms, "COHORT_MOE_GEMMS", "models",
       "`loop`: the fused training blocks give the experts' forward and input-gradient GEMMs "
       "to cuBLAS one call per expert instead of one grouped call over the experts with rows "
       "(cublasGemmGroupedBatchedEx; `grouped`, the default), and the weight gradients (bf16 into "
       "fp32) one call per expert instead of cohort's one launch over the experts, for A/B runs.",
       true},
      {K::kLoraTileRows, "COHORT_LORA_TILE_ROWS", "models",
       "`8` or `16`: the served adapters' kernel takes tiles of that many rows in every launch "
       "instead of choosing (8 up to 64 rows, 16 beyond: models/ops/lora_rows.cuh), for A/B runs.",
       true},
      {K::kLoraCluster, "COHORT_LORA_CLUSTER", "models",
       "`8` or `16`: the served adapters' kernel runs clusters of that many blocks in every launch "
       "instead of choosing (16 on wide projections that fit the multiprocessors), for A/B runs.",
       true},
      {K::kCudnnLibrary, "COHORT_CUDNN_LIBRARY", "models",
       "The cuDNN library file that the fused attention opens (default `libcudnn.so.9`, found "
       "through the loader's path), such as the one a PyTorch wheel carries.",
       false},
  };
  return table;
}

const char* env_knob_name(EnvKnob knob) {
  const auto& table = env_knobs();
  const size_t i = static_cast<size_t>(knob);
  COHORT_CHECK(i < table.size() && table[i].knob == knob);
  return table[i].name;
}

const char* read_env_knob(EnvKnob knob) {
  const char* v = std::getenv(env_knob_name(knob));
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Result<std::optional<int>> read_env_knob_count(EnvKnob knob) {
  const char* v = read_env_knob(knob);
  if (v == nullptr) return std::optional<int>();
  int value = 0;
  const char* end = v + std::strlen(v);
  const auto [at, error] = std::from_chars(v, end, value);
  if (error != std::errc() || at != end || value < 0) {
    return invalid_argument(std::string(env_knob_name(knob)) + "='" + v +
                            "' is not a non-negative integer");
  }
  return std::optional<int>(value);
}

bool env_knob_on(EnvKnob knob) {
  const char* v = read_env_knob(knob);
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

std::string env_knobs_markdown() {
  std::string out = "| variable | read by | what it does |\n|---|---|---|\n";
  for (const auto& k : env_knobs()) {
    out += std::string("| `") + k.name + "` | " + k.read_by + " | " +
           (k.debug ? "*Debugging switch.* " : "") + k.meaning + " |\n";
  }
  return out;
}

}  // namespace cohort
