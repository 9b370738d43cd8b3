// The schema table: one row per key, binding its name, type, range and
// meaning to the JobSpec member that holds it. Loading, to_toml, the job file
// reference in docs/job-file.md (`cohort validate --reference`) and the
// defaults shown there all come from these rows.
#include "jobs/schema.h"

#include <algorithm>
#include <sstream>

#include "jobs/schema_binding.h"

// Rows name only the Doc members they set; GCC 12 warns about the others
// although designated initializers leave them at their defaults by design.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace cohort::jobs {
namespace {

using binding::bind;
using binding::Doc;
constexpr double kBig = 1e12;

// [infer] and [serve] kv_cache_dtype's text (one engine builds both).
constexpr const char* kKvCacheDtypeText =
    "Number format of the KV cache. fp8: each cached key and value is an e4m3 byte times a "
    "power-of-two scale of its layer and KV head (one for K, one for V), measured over a "
    "512-token calibration prefill when the engine starts (the largest value seen gets 2x "
    "headroom); half of bf16's bytes, so the same memory holds twice the positions. The "
    "CUDA-graph engine only: a job that asks for fp8 where another engine runs stops with "
    "the reason.";

// infer.stop: one key, two members (ids and strings), in the order given.
FieldDoc stop_list_field() {
  FieldDoc f;
  f.section = "infer";
  f.key = "stop";
  f.type = FieldType::kStopList;
  f.default_text = "[]";
  f.description = "Token ids and/or strings that end a sequence.";
  f.set = [](JobSpec& spec, const FieldValue& v) {
    spec.infer.stop_tokens.clear();
    spec.infer.stop_strings.clear();
    for (const auto& entry : std::get<std::vector<StopEntry>>(v)) {
      if (const auto* id = std::get_if<int64_t>(&entry)) spec.infer.stop_tokens.push_back(*id);
      else spec.infer.stop_strings.push_back(std::get<std::string>(entry));
    }
  };
  f.get = [](const JobSpec& spec) -> std::optional<FieldValue> {
    std::vector<StopEntry> out;
    for (auto id : spec.infer.stop_tokens) out.emplace_back(id);
    for (const auto& s : spec.infer.stop_strings) out.emplace_back(s);
    return FieldValue(std::move(out));
  };
  return f;
}

std::vector<FieldDoc> build_schema() {
  using J = JobSpec;
  std::vector<FieldDoc> f;
  // [job]
  f.push_back(bind("job", "name", &J::job, &JobSection::name,
                   {.text = "Job name: letters, digits, '.', '_' and '-'.", .default_text = "(required)"}));
  f.push_back(bind("job", "kind", &J::job, &JobSection::kind,
                   {.text = "What the workers run: the built-in trainer, offline inference (`[infer]`), the "
                            "OpenAI-compatible server (`[serve]`), or any program (`[command]`).",
                    .default_text = "(required)"}));
  f.push_back(bind("job", "nodes", &J::job, &JobSection::nodes,
                   {.text = "Number of nodes, or \"MIN:MAX\" for an elastic job."}));
  f.push_back(bind("job", "gpus_per_node", &J::job, &JobSection::gpus_per_node,
                   {.text = "Worker processes per node (one per GPU; CPU slots where there is none).", .min = 1,
                    .max = 1024}));
  f.push_back(bind("job", "max_restarts", &J::job, &JobSection::max_restarts,
                   {.text = "Restarts allowed after failures, counted for the whole job.", .min = 0, .max = 1e6}));
  f.push_back(bind("job", "priority", &J::job, &JobSection::priority,
                   {.text = "Higher runs first; first come, first served within a priority.", .min = -1e6,
                    .max = 1e6}));
  f.push_back(bind("job", "preemptible", &J::job, &JobSection::preemptible,
                   {.text = "A higher-priority job that cannot be placed may stop this one (SIGTERM: a training "
                            "worker checkpoints); it requeues and resumes without using restart budget."}));
  f.push_back(bind("job", "output_dir", &J::job, &JobSection::output_dir,
                   {.text = "Logs, metrics.jsonl, checkpoints and outputs.", .default_text = "\"runs/<name>\""}));
  f.push_back(bind("job", "working_dir", &J::job, &JobSection::working_dir,
                   {.text = "Directory the workers start in.", .default_text = "(the job file's folder)"}));
  f.push_back(bind("job", "devices", &J::job, &JobSection::devices,
                   {.text = "`own`: each worker sees only its GPU, as cuda:0. `node`: each worker sees the job's "
                            "GPUs on its node, so cuda:LOCAL_RANK is its own.",
                    .default_text = "own (train, infer); node (command)"}));
  f.push_back(bind("job", "stop_grace", &J::job, &JobSection::stop_grace_s,
                   {.text = "Seconds between SIGTERM and SIGKILL when workers are stopped.", .min = 0,
                    .max = 86400}));
  f.push_back(bind("job", "hang_timeout", &J::job, &JobSection::hang_timeout_s,
                   {.text = "Seconds without a progress report before a rank counts as hung (0: off).", .min = 0,
                    .max = 1e7}));
  f.push_back(bind("job", "placement_timeout", &J::job, &JobSection::placement_timeout_s,
                   {.text = "Seconds a job waits for capacity before failing (0: wait forever).", .min = 0,
                    .max = 1e9}));
  f.push_back(bind("job", "time_limit", &J::job, &JobSection::time_limit_s,
                   {.text = "Wall-clock seconds from the job's first start (Slurm's --time); then its workers get "
                            "SIGTERM (a training worker checkpoints), SIGKILL after stop_grace, and the job ends "
                            "`timed_out` (0: no limit).",
                    .min = 0, .max = 1e9}));
  f.push_back(bind("job", "depends_on", &J::job, &JobSection::depends_on,
                   {.text = "Jobs this one waits for, as \"job-3:ok\" (succeeded; Slurm's afterok), \"job-3:any\" "
                            "(ended) or \"job-3:notok\" (ended without success); a dependency that can no longer "
                            "hold cancels the job."}));
  f.push_back(bind("job", "port_range", &J::job, &JobSection::port_range,
                   {.text = "\"LO-HI\": the TCP ports MASTER_PORT is chosen from on rank 0's node (a free one, "
                            "never one another job holds); for firewalled clusters.",
                    .default_text = "(the agent's `--port-range`, else 29500-30499)", .omit_empty = true}));
  f.push_back(bind("job.env", "", &J::job, &JobSection::env,
                   {.text = "Extra environment variables for every worker (`[job.env]` table)."}));
  // [model]
  f.push_back(bind("model", "preset", &J::model, &ModelSection::preset,
                   {.text = "A built-in model shape, randomly initialised from the seed.",
                    .choices = {"tiny", "tiny-moe", "qwen3-0.6b", "qwen3-1.7b", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b",
                                "qwen3-moe-2.4b-a0.6b", "qwen3-30b-a3b"},
                    .omit_empty = true}));
  f.push_back(bind("model", "hf_dir", &J::model, &ModelSection::hf_dir,
                   {.text = "A Hugging Face model folder: config.json and safetensors (sharded or not); or a model id (ORG/NAME) found in the local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), never downloaded.",
                    .omit_empty = true}));
  f.push_back(bind("model", "checkpoint", &J::model, &ModelSection::checkpoint,
                   {.text = "A cohort checkpoint to start from: its folder, a `latest` file, or a run's output_dir (its newest checkpoint).", .omit_empty = true}));
  f.push_back(bind("model", "max_seq", &J::model, &ModelSection::max_seq,
                   {.text = "Longest sequence the model supports (0: the preset's or config's own).", .min = 0,
                    .max = 1e7}));
  f.push_back(bind("model", "attention", &J::model, &ModelSection::attention,
                   {.text = "Training attention, as transformers' attn_implementation. cudnn: cuDNN's fused flash "
                            "attention in the fused bf16 blocks (the library is loaded at run time); flash: cohort's "
                            "fused flash-style kernels (GPU, bf16, head_dim 64 or 128); math: GEMM + softmax, the "
                            "reference; auto: cudnn where the library loads and has an engine for the shape, else "
                            "flash where it applies, else math. CPU runs use math.",
                    .choices = {"auto", "cudnn", "flash", "math"}}));
  f.push_back(bind("model", "adapter", &J::model, &ModelSection::adapter,
                   {.text = "kind infer and serve: a PEFT LoRA adapter folder (adapter_config.json, "
                            "adapter_model.safetensors, as PEFT or cohort writes it) merged into the model's "
                            "weights when it loads, so the fine-tune is served at the base's speed. Its targets "
                            "and shapes must fit the model; training continues from an adapter with "
                            "lora.adapter.",
                    .omit_empty = true}));
  f.push_back(bind("model", "quantize", &J::model, &ModelSection::quantize,
                   {.text = "Weight-only quantization at load, for a bf16/fp32 source: every linear projection "
                            "(q/k/v/o, gate/up/down) is quantized and dequantized back, so the model computes with "
                            "the numbers a quantized engine has. fp8: e4m3 in 128 x 128 tiles with one scale each "
                            "(transformers' FineGrainedFP8); int8 / int4: symmetric, one scale per 128 input "
                            "columns. Embeddings, norms and the LM head are kept. Pre-quantized folders (config.json "
                            "quant_method fp8, gptq or awq) load as they are and refuse this option.",
                    .choices = {"none", "fp8", "int8", "int4"}}));
  // [parallel]
  f.push_back(bind("parallel", "strategy", &J::parallel, &ParallelSection::strategy,
                   {.text = "Data-parallel strategy on the data-parallel axis."}));
  f.push_back(bind("parallel", "tensor_parallel", &J::parallel, &ParallelSection::tensor_parallel,
                   {.text = "Tensor-parallel degree; groups are consecutive ranks inside a node.", .min = 1,
                    .max = 1024}));
  f.push_back(bind("parallel", "expert_parallel", &J::parallel, &ParallelSection::expert_parallel,
                   {.text = "Training a mixture-of-experts model: its experts split over this many consecutive "
                            "data-parallel ranks (an expert group), each token travelling to its experts' ranks and "
                            "back by all-to-all; the groups are each other's replicas. Must divide the "
                            "data-parallel degree and the model's expert count. Under zero1/2/3 and fsdp2 the dense "
                            "parameters shard over the data-parallel axis and each expert over the ranks holding it; "
                            "with [lora] the frozen experts split and the adapters train on every rank.",
                    .min = 1, .max = 1024}));
  f.push_back(bind("parallel", "bucket_mb", &J::parallel, &ParallelSection::bucket_mb,
                   {.text = "Gradient bucket size for DDP all-reduce, in MiB.", .min = 0, .max = 1e5,
                    .min_exclusive = true}));
  f.push_back(bind("parallel", "reshard_after_forward", &J::parallel, &ParallelSection::reshard_after_forward,
                   {.text = "FSDP2/ZeRO-3: free gathered parameters after each block's forward."}));
  f.push_back(bind("parallel", "prefetch", &J::parallel, &ParallelSection::prefetch,
                   {.text = "FSDP2/ZeRO-3: gather the next block while the current one computes."}));
  f.push_back(bind("parallel", "param_dtype", &J::parallel, &ParallelSection::param_dtype,
                   {.text = "FSDP2/ZeRO-3: dtype of the parameter all-gather (sharded masters stay fp32; gradients "
                            "are reduced in fp32). auto: the GEMM precision (bf16 or fp16 on GPU; fp32 on CPU "
                            "unless train.precision is fp16).",
                    .choices = {"auto", "bf16", "fp16", "fp32"}}));
  // [train]
  f.push_back(bind("train", "data", &J::train, &TrainSection::data,
                   {.text = "Training data: a path (file or folder), or a mixture `[{path = \"a.jsonl\", weight = "
                            "3}, \"b.bin\"]` sampled by weight (an entry may set its own `format` and "
                            "`text_field`). Text and JSONL are tokenized with the model's tokenizer into "
                            "output_dir/data-cache first.",
                    .default_text = "(required)"}));
  f.push_back(bind("train", "data_format", &J::train, &TrainSection::data_format,
                   {.text = "`auto` decides by content: cohort shards and Megatron indexes by their headers, JSONL by "
                            "its first line (`messages`: chat, loss on assistant turns; `prompt`/`completion`: loss "
                            "on the completion; else `text_field`), a `.bin` without `.idx` is nanoGPT uint16, "
                            "other files are text (a file is a document; a folder, one per file).",
                    .choices = {"auto", "text", "jsonl", "chat", "prompt_completion", "nanogpt", "u16", "u32",
                                "megatron", "cohort"}}));
  f.push_back(bind("train", "text_field", &J::train, &TrainSection::text_field,
                   {.text = "JSONL text data: the field holding each document."}));
  f.push_back(bind("train", "eval_fraction", &J::train, &TrainSection::eval_fraction,
                   {.text = "Share of the data held out for evaluation.", .min = 0, .max = 0.9}));
  f.push_back(bind("train", "steps", &J::train, &TrainSection::steps,
                   {.text = "Optimizer steps.", .default_text = "(required)", .min = 1, .max = 1e9}));
  f.push_back(bind("train", "micro_batch", &J::train, &TrainSection::micro_batch,
                   {.text = "Sequences per rank per micro-step.", .min = 1, .max = 1e6}));
  f.push_back(bind("train", "global_batch", &J::train, &TrainSection::global_batch,
                   {.text = "Sequences per optimizer step; accumulation makes up the difference.",
                    .default_text = "micro_batch × data-parallel degree", .min = 0, .max = 1e9}));
  f.push_back(bind("train", "elastic_batch", &J::train, &TrainSection::elastic_batch,
                   {.text = "Elastic jobs (`nodes = \"MIN:MAX\"`): `keep` holds the global batch (global_batch, "
                            "else micro_batch × data-parallel degree at MAX nodes) at every world size by changing "
                            "gradient accumulation, and an attempt is placed only on a node count that divides it; "
                            "`scale` lets it follow the world size.",
                    .choices = {"keep", "scale"}}));
  f.push_back(bind("train", "seq_len", &J::train, &TrainSection::seq_len,
                   {.text = "Tokens per sequence.", .min = 1, .max = 1e7}));
  f.push_back(bind("train", "lr", &J::train, &TrainSection::lr,
                   {.text = "Peak learning rate.", .min = 0, .max = 10, .min_exclusive = true}));
  f.push_back(bind("train", "min_lr", &J::train, &TrainSection::min_lr,
                   {.text = "Learning rate at the end of the cosine.", .default_text = "lr / 10", .min = 0,
                    .max = 10}));
  f.push_back(bind("train", "warmup_steps", &J::train, &TrainSection::warmup_steps,
                   {.text = "Linear warm-up steps.", .min = 0, .max = 1e9}));
  f.push_back(bind("train", "weight_decay", &J::train, &TrainSection::weight_decay,
                   {.text = "AdamW weight decay.", .min = 0, .max = 10}));
  f.push_back(bind("train", "beta1", &J::train, &TrainSection::beta1, {.text = "AdamW beta1.", .min = 0, .max = 1}));
  f.push_back(bind("train", "beta2", &J::train, &TrainSection::beta2, {.text = "AdamW beta2.", .min = 0, .max = 1}));
  f.push_back(bind("train", "grad_clip", &J::train, &TrainSection::grad_clip,
                   {.text = "Global gradient-norm clip (0: off).", .min = 0, .max = 1e6}));
  f.push_back(bind("train", "precision", &J::train, &TrainSection::precision,
                   {.text = "GEMM operand precision over fp32 master weights, fp32 accumulation. bf16: bf16 tensor "
                            "cores (CPU runs compute in fp32). fp16: fp16 tensor cores with dynamic loss scaling "
                            "(CPU rounds linear-layer operands to fp16 the same way). fp32: fp32 GEMMs."}));
  f.push_back(bind("train", "activation_checkpointing", &J::train, &TrainSection::activation_checkpointing,
                   {.text = "What the forward pass keeps for backward. none: every activation. selective: the "
                            "GEMMs' and attention's inputs and outputs; norms, RoPE and SwiGLU are recomputed "
                            "(about a third less activation memory, no extra GEMM). full: each block's input "
                            "only; the block's forward reruns before its backward (a block's activations in "
                            "all, one more forward of the blocks). The same gradients in each.",
                    .choices = {"none", "selective", "full"}}));
  f.push_back(bind("train", "lm_head_chunk_tokens", &J::train, &TrainSection::lm_head_chunk_tokens,
                   {.text = "The LM head and cross-entropy in chunks of this many tokens, so that the full "
                            "[tokens, vocab] fp32 logits never exist (0: all at once). Costs one more LM-head "
                            "GEMM a step (backward computes each chunk's logits again).",
                    .min = 0, .max = 1e9}));
  f.push_back(bind("train", "initial_loss_scale", &J::train, &TrainSection::initial_loss_scale,
                   {.text = "fp16: the loss scale to start from; halved after a step with non-finite gradients "
                            "(the step is skipped).",
                    .min = 0, .max = 1e30, .min_exclusive = true}));
  f.push_back(bind("train", "loss_scale_window", &J::train, &TrainSection::loss_scale_window,
                   {.text = "fp16: steps with finite gradients in a row before the loss scale doubles.", .min = 1,
                    .max = 1e9}));
  f.push_back(bind("train", "checkpoint_every", &J::train, &TrainSection::checkpoint_every,
                   {.text = "Steps between checkpoints (0: only at the end and on SIGTERM).", .min = 0, .max = 1e9}));
  f.push_back(bind("train", "checkpoint_storage", &J::train, &TrainSection::checkpoint_storage,
                   {.text = "`shared`: output_dir is one filesystem every node mounts at the same path (checked at "
                            "start: every rank must see a marker rank 0 writes there). `node-local`: each node "
                            "keeps its own ranks' shards under output_dir/checkpoints/<node>; a resume then needs "
                            "the same nodes, and is refused with the node lists otherwise.",
                    .choices = {"shared", "node-local"}}));
  f.push_back(bind("train", "eval_every", &J::train, &TrainSection::eval_every,
                   {.text = "Steps between evaluations (0: none).", .min = 0, .max = 1e9}));
  f.push_back(bind("train", "eval_batches", &J::train, &TrainSection::eval_batches,
                   {.text = "Batches per evaluation.", .min = 1, .max = 1e6}));
  f.push_back(bind("train", "log_every", &J::train, &TrainSection::log_every,
                   {.text = "Steps between log lines (metrics.jsonl gets every step).", .min = 1, .max = 1e9}));
  f.push_back(bind("train", "seed", &J::train, &TrainSection::seed,
                   {.text = "Seed for initialisation and data order.", .min = 0, .max = 9.2e18}));
  f.push_back(bind("train", "resume", &J::train, &TrainSection::resume,
                   {.text = "Start from the latest checkpoint in output_dir when there is one."}));
  f.push_back(bind("train", "sample_tokens", &J::train, &TrainSection::sample_tokens,
                   {.text = "Tokens of text to generate and print at the end (0: none).", .min = 0, .max = 1e6}));
  f.push_back(bind("train", "sample_prompt", &J::train, &TrainSection::sample_prompt,
                   {.text = "Prompt for that sample."}));
  f.push_back(bind("train", "tensorboard", &J::train, &TrainSection::tensorboard,
                   {.text = "Also write TensorBoard event files (loss, lr, grad norm, tokens/s, MFU, eval loss) "
                            "under output_dir/tensorboard."}));
  // [infer]
  f.push_back(bind("infer", "prompts", &J::infer, &InferSection::prompts,
                   {.text = "JSONL file: {\"prompt\": \"text\"} or {\"tokens\": [ids]} per line.",
                    .default_text = "(required)"}));
  f.push_back(bind("infer", "max_new_tokens", &J::infer, &InferSection::max_new_tokens,
                   {.text = "Tokens to generate per prompt.", .min = 1, .max = 1e7}));
  f.push_back(bind("infer", "temperature", &J::infer, &InferSection::temperature,
                   {.text = "Sampling temperature (0: greedy).", .min = 0, .max = 100}));
  f.push_back(bind("infer", "top_k", &J::infer, &InferSection::top_k,
                   {.text = "Keep the k most likely tokens (0: off).", .min = 0, .max = 1e7}));
  f.push_back(bind("infer", "top_p", &J::infer, &InferSection::top_p,
                   {.text = "Nucleus sampling mass.", .min = 0, .max = 1, .min_exclusive = true}));
  f.push_back(bind("infer", "seed", &J::infer, &InferSection::seed,
                   {.text = "Sampling seed.", .min = 0, .max = 9.2e18}));
  f.push_back(stop_list_field());
  f.push_back(bind("infer", "batch_size", &J::infer, &InferSection::batch_size,
                   {.text = "Prompts decoded together.", .min = 1, .max = 1e5}));
  f.push_back(bind("infer", "tensor_parallel", &J::infer, &InferSection::tensor_parallel,
                   {.text = "Tensor-parallel degree (0: all of the job's ranks).", .min = 0, .max = 1024}));
  f.push_back(bind("infer", "cuda_graphs", &J::infer, &InferSection::cuda_graphs,
                   {.text = "Capture decode steps in CUDA graphs."}));
  f.push_back(bind("infer", "kv_cache_dtype", &J::infer, &InferSection::kv_cache_dtype,
                   {.text = kKvCacheDtypeText, .choices = {"bf16", "fp8"}}));
  // [serve]
  f.push_back(bind("serve", "host", &J::serve, &ServeSection::host,
                   {.text = "Address rank 0 serves HTTP on; off loopback it needs api_key."}));
  f.push_back(bind("serve", "port", &J::serve, &ServeSection::port,
                   {.text = "TCP port (0: any free port; the URL is logged and written to output_dir/endpoint.json).",
                    .min = 0, .max = 65535}));
  f.push_back(bind("serve", "api_key", &J::serve, &ServeSection::api_key,
                   {.text = "Bearer key every /v1 request must carry (required off loopback)."}));
  f.push_back(bind("serve.adapters", "", &J::serve, &ServeSection::adapters,
                   {.text = "LoRA adapters served beside the base (`[serve.adapters]` table of name = PEFT adapter "
                            "folder): a request whose `model` names one runs with it, /v1/models lists them, and "
                            "requests for different adapters and the base share every batch, on the bf16 CUDA-graph "
                            "engine (up to 64 adapters loaded at once, rank at most 64)."}));
  f.push_back(bind("serve", "model_name", &J::serve, &ServeSection::model_name,
                   {.text = "The model id /v1/models lists and responses carry.", .default_text = "(the job's name)"}));
  f.push_back(bind("serve", "max_running", &J::serve, &ServeSection::max_running,
                   {.text = "Sequences decoded together (KV-cache slots).", .min = 1, .max = 1e5}));
  f.push_back(bind("serve", "max_queue", &J::serve, &ServeSection::max_queue,
                   {.text = "Requests waiting for a slot; beyond it requests get 429.", .min = 0, .max = 1e6}));
  f.push_back(bind("serve", "max_connections", &J::serve, &ServeSection::max_connections,
                   {.text = "Open HTTP connections; more are closed at once.", .min = 1, .max = 1e6}));
  f.push_back(bind("serve", "max_body_bytes", &J::serve, &ServeSection::max_body_bytes,
                   {.text = "Largest request body; larger ones get 413.", .min = 1024, .max = 1e9}));
  f.push_back(bind("serve", "context", &J::serve, &ServeSection::context,
                   {.text = "Positions per sequence, prompt plus output; the KV cache holds max_running of them "
                            "(0: the model's max_seq, at most 4096).",
                    .min = 0, .max = 1e7}));
  f.push_back(bind("serve", "max_batched_tokens", &J::serve, &ServeSection::max_batched_tokens,
                   {.text = "Tokens one forward step takes: every running sequence's next token first, then "
                            "prompts, a long one in chunks over several steps, so running streams keep getting "
                            "a token every step. At least max_running.",
                    .min = 1, .max = 1e6}));
  f.push_back(bind("serve", "itl_target_ms", &J::serve, &ServeSection::itl_target_ms,
                   {.text = "Time a step may take while sequences are decoding, so that each stream's next "
                            "token comes within it: such a step takes only the prompt tokens that fit, from the "
                            "measured times of recent steps (at least 16 a step, so prompts keep moving); a "
                            "step with no sequence decoding takes max_batched_tokens. Lower it for steadier "
                            "streams, raise it (or 0: off) for faster prompts beside running ones.",
                    .min = 0, .max = 1e6}));
  f.push_back(bind("serve", "prefix_caching", &J::serve, &ServeSection::prefix_caching,
                   {.text = "Keep full KV-cache blocks (16 positions) keyed by their token prefix after their "
                            "request ends, and start a later prompt with the same prefix past them, so a shared "
                            "system prompt or conversation is computed once; cached blocks no request holds are "
                            "reused for new ones least recently used first. The bf16 CUDA engine only."}));
  f.push_back(bind("serve", "kv_cache_tokens", &J::serve, &ServeSection::kv_cache_tokens,
                   {.text = "Positions the KV cache holds for all running sequences together, in blocks of 16 "
                            "handed out as sequences grow; a request is admitted when its prompt's blocks are free, "
                            "and when running ones outgrow the cache the newest waits to resume (0: what "
                            "gpu_memory_fraction leaves after the model, at most max_running × context). The bf16 "
                            "CUDA engine shares them; the CPU engine gives each slot its context.",
                    .min = 0, .max = 1e12}));
  f.push_back(bind("serve", "kv_cache_dtype", &J::serve, &ServeSection::kv_cache_dtype,
                   {.text = kKvCacheDtypeText, .choices = {"bf16", "fp8"}}));
  f.push_back(bind("serve", "gpu_memory_fraction", &J::serve, &ServeSection::gpu_memory_fraction,
                   {.text = "Share of the GPU's memory the server may use for the model, its buffers and the KV "
                            "cache, when kv_cache_tokens is 0; the cache gets what is left, and a job whose cache "
                            "cannot hold one sequence of context stops with the numbers.",
                    .min = 0.01, .max = 1.0}));
  f.push_back(bind("serve", "tool_parser", &J::serve, &ServeSection::tool_parser,
                   {.text = "How a chat reply's tool calls are read from its text when a request gives tools: "
                            "hermes (`<tool_call>{...}</tool_call>`, Qwen's), llama3_json (the reply is the call's "
                            "JSON), or auto (the one the model's chat template shows).",
                    .choices = {"auto", "hermes", "llama3_json"}}));
  f.push_back(bind("serve", "max_tokens", &J::serve, &ServeSection::max_tokens,
                   {.text = "max_tokens of a request that gives none.", .min = 1, .max = 1e7}));
  f.push_back(bind("serve", "temperature", &J::serve, &ServeSection::temperature,
                   {.text = "Sampling temperature of a request that gives none (0: greedy).", .min = 0, .max = 100}));
  f.push_back(bind("serve", "top_p", &J::serve, &ServeSection::top_p,
                   {.text = "top_p of a request that gives none.", .min = 0, .max = 1, .min_exclusive = true}));
  f.push_back(bind("serve", "top_k", &J::serve, &ServeSection::top_k,
                   {.text = "top_k of a request that gives none (0: off).", .min = 0, .max = 1e7}));
  f.push_back(bind("serve", "seed", &J::serve, &ServeSection::seed,
                   {.text = "Seed of preset weights and of requests that give none.", .min = 0, .max = 9.2e18}));
  f.push_back(bind("serve", "tensor_parallel", &J::serve, &ServeSection::tensor_parallel,
                   {.text = "Tensor-parallel degree (0: all of the job's ranks; one replica).", .min = 0,
                    .max = 1024}));
  f.push_back(bind("serve", "cuda_graphs", &J::serve, &ServeSection::cuda_graphs,
                   {.text = "Capture decode steps in CUDA graphs."}));
  // [lora]
  f.push_back(bind("lora", "rank", &J::lora, &LoraSection::rank,
                   {.text = "Rank r of every adapter: A is [r, in], B is [out, r] (PEFT's `r`).", .min = 1,
                    .max = 4096}));
  f.push_back(bind("lora", "alpha", &J::lora, &LoraSection::alpha,
                   {.text = "PEFT's `lora_alpha`: the adapters' delta is scaled by alpha / rank (alpha / sqrt(rank) "
                            "with use_rslora).",
                    .min = 0, .max = 1e6, .min_exclusive = true}));
  f.push_back(bind("lora", "dropout", &J::lora, &LoraSection::dropout,
                   {.text = "Dropout on the adapters' input during training (the base projection sees the input "
                            "unchanged); masks follow from train.seed, the step and the micro-step.",
                    .min = 0, .max = 0.99}));
  {
    FieldDoc targets = bind("lora", "target_modules", &J::lora, &LoraSection::target_modules,
                            {.text = "The projections that get adapters, by PEFT's module names: q_proj, k_proj, "
                                     "v_proj, o_proj, gate_proj, up_proj, down_proj; or \"all-linear\" for all "
                                     "seven. Every layer gets the same set.",
                             .default_text = "[\"q_proj\", \"v_proj\"]"});
    targets.type = FieldType::kNameList;
    f.push_back(std::move(targets));
  }
  f.push_back(bind("lora", "use_rslora", &J::lora, &LoraSection::use_rslora,
                   {.text = "Rank-stabilised LoRA: scale by alpha / sqrt(rank) instead of alpha / rank."}));
  f.push_back(bind("lora", "init", &J::lora, &LoraSection::init,
                   {.text = "How A starts (B starts at zero, so training starts from the base model): "
                            "kaiming_uniform is PEFT's default (`init_lora_weights = true`, uniform in ±1/sqrt(in)); "
                            "gaussian draws A from N(0, 1/rank²).",
                    .choices = {"kaiming_uniform", "gaussian"}}));
  f.push_back(bind("lora", "adapter", &J::lora, &LoraSection::adapter,
                   {.text = "A PEFT adapter folder (adapter_config.json, adapter_model.safetensors) to start from; its "
                            "r, lora_alpha, use_rslora and target_modules then set rank, alpha, use_rslora and "
                            "target_modules.",
                    .omit_empty = true}));
  f.push_back(bind("lora", "base_dtype", &J::lora, &LoraSection::base_dtype,
                   {.text = "How the frozen base is held: bf16 (weights rounded to bf16 when the model loads), "
                            "fp32, or QLoRA's nf4 (NF4 with double quantization, blocks of 64) or fp8 (128 x 128 "
                            "block scales): every block's projections quantized from the bf16 weights and expanded "
                            "a block at a time while it runs; embeddings, norms and the LM head stay bf16.",
                    .choices = {"bf16", "fp32", "fp8", "nf4"}}));
  // [command]
  f.push_back(bind("command", "argv", &J::command, &CommandSection::argv,
                   {.text = "The program and its arguments, run once per rank.", .default_text = "(required)"}));
  for (auto& d : f) {
    if (d.max == 0 && d.min == 0) continue;
    if (d.max == 0) d.max = kBig;
  }
  return f;
}

}  // namespace

const std::vector<FieldDoc>& schema_fields() {
  static const std::vector<FieldDoc> fields = build_schema();
  return fields;
}

const std::vector<std::string>& schema_sections() {
  static const std::vector<std::string> sections = {"job", "model", "parallel", "train", "infer",
                                                    "serve", "command", "lora"};
  return sections;
}

const FieldDoc* find_field(const std::string& section, const std::string& key) {
  for (const auto& f : schema_fields())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

bool section_applies(JobKind kind, const std::string& section) {
  if (section == "job") return true;
  if (section == "model" || section == "parallel") return kind != JobKind::kCommand;
  if (section == "lora") return kind == JobKind::kTrain;
  return section == to_string(kind);
}

const char* type_name(FieldType type) {
  switch (type) {
    case FieldType::kString: return "string";
    case FieldType::kInt: return "integer";
    case FieldType::kFloat: return "number";
    case FieldType::kBool: return "boolean";
    case FieldType::kEnum: return "string";
    case FieldType::kStringList: return "array of strings";
    case FieldType::kNameList: return "string or array of strings";
    case FieldType::kNodeRange: return "integer or \"MIN:MAX\"";
    case FieldType::kStopList: return "array of integers and strings";
    case FieldType::kStringTable: return "table of strings";
    case FieldType::kDataSources: return "path or array of sources";
  }
  return "?";
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string nearest_name(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& candidate : known) {
    size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::string job_file_reference_markdown() {
  std::ostringstream out;
  std::string current;
  for (const auto& f : schema_fields()) {
    if (f.section != current) {
      current = f.section;
      out << "\n### `[" << current << "]`\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    std::string type = type_name(f.type);
    if (f.type == FieldType::kEnum) {
      type.clear();
      for (const auto& c : f.choices) type += (type.empty() ? "" : " \\| ") + c;
    }
    std::string key = f.key.empty() ? "*(any)*" : "`" + f.key + "`";
    out << "| " << key << " | " << type << " | " << f.default_text << " | " << f.description
        << " |\n";
  }
  return out.str();
}

}  // namespace cohort::jobs
