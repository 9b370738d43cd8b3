// The schema table. Adding a key means adding a row here and a case in
// load.cc's `assign_field`; the README reference is regenerated from this table
// (`cohort validate --reference`).
#include "jobs/schema.h"

#include "base/strategy.h"

#include <algorithm>
#include <sstream>

namespace cohort::jobs {
namespace {

constexpr double kNoLimit = 0;

FieldDoc field(std::string section, std::string key, FieldType type, std::string def,
               std::string desc, double min = kNoLimit, double max = kNoLimit) {
  return FieldDoc{std::move(section), std::move(key), type, {}, std::move(def), std::move(desc), min, max};
}

FieldDoc choice(std::string section, std::string key, std::vector<std::string> choices,
                std::string def, std::string desc) {
  return FieldDoc{std::move(section), std::move(key), FieldType::kEnum, std::move(choices),
                  std::move(def), std::move(desc)};
}

constexpr double kBig = 1e12;

std::vector<FieldDoc> build_schema() {
  using T = FieldType;
  std::vector<FieldDoc> f;
  // [job]
  f.push_back(field("job", "name", T::kString, "(required)",
                    "Job name: letters, digits, '.', '_' and '-'."));
  f.push_back(choice("job", "kind", {"train", "infer", "serve", "command"}, "(required)",
                     "What the workers run: the built-in trainer, offline inference (`[infer]`), "
                     "the OpenAI-compatible server (`[serve]`), or any program (`[command]`)."));
  f.push_back(field("job", "nodes", T::kNodeRange, "1",
                    "Number of nodes, or \"MIN:MAX\" for an elastic job."));
  f.push_back(field("job", "gpus_per_node", T::kInt, "1",
                    "Worker processes per node (one per GPU; CPU slots where there is none).", 1, 1024));
  f.push_back(field("job", "max_restarts", T::kInt, "0",
                    "Restarts allowed after failures, counted for the whole job.", 0, 1e6));
  f.push_back(field("job", "priority", T::kInt, "0",
                    "Higher runs first; first come, first served within a priority.", -1e6, 1e6));
  f.push_back(field("job", "output_dir", T::kString, "\"runs/<name>\"",
                    "Logs, metrics.jsonl, checkpoints and outputs."));
  f.push_back(field("job", "working_dir", T::kString, "(current directory)",
                    "Directory the workers start in."));
  f.push_back(choice("job", "devices", {"own", "node"}, "own (train, infer); node (command)",
                     "`own`: each worker sees only its GPU, as cuda:0. `node`: each worker sees "
                     "the job's GPUs on its node, so cuda:LOCAL_RANK is its own."));
  f.push_back(field("job", "stop_grace", T::kFloat, "10.0",
                    "Seconds between SIGTERM and SIGKILL when workers are stopped.", 0, 86400));
  f.push_back(field("job", "hang_timeout", T::kFloat, "0",
                    "Seconds without a progress report before a rank counts as hung (0: off).", 0, 1e7));
  f.push_back(field("job", "placement_timeout", T::kFloat, "0",
                    "Seconds a job waits for capacity before failing (0: wait forever).", 0, 1e9));
  f.push_back(field("job", "port_range", T::kString, "(the agent's `--port-range`, else 29500-30499)",
                    "\"LO-HI\": the TCP ports MASTER_PORT is chosen from on rank 0's node (a free one, never "
                    "one another job holds); for firewalled clusters."));
  f.push_back(field("job.env", "", T::kStringTable, "{}",
                    "Extra environment variables for every worker (`[job.env]` table)."));
  // [model]
  f.push_back(choice("model", "preset", {"tiny", "qwen3-0.6b", "qwen3-1.7b", "llama-3.2-1b"}, "",
                     "A built-in model shape, randomly initialised from the seed."));
  f.push_back(field("model", "hf_dir", T::kString, "",
                    "A Hugging Face model folder: config.json and safetensors (sharded or not)."));
  f.push_back(field("model", "checkpoint", T::kString, "",
                    "A cohort checkpoint folder to start from."));
  f.push_back(field("model", "max_seq", T::kInt, "0",
                    "Longest sequence the model supports (0: the preset's or config's own).", 0, 1e7));
  f.push_back(choice("model", "attention", {"auto", "flash", "math"}, "\"auto\"",
                     "Training attention, as transformers' attn_implementation. flash: the fused "
                     "flash-style kernels (GPU, bf16, head_dim 64 or 128); math: GEMM + softmax, the "
                     "reference; auto: flash where it applies, else math. CPU runs use math."));
  // [parallel]
  f.push_back(choice("parallel", "strategy", strategy_names(), "\"ddp\"",
                     "Data-parallel strategy on the data-parallel axis."));
  f.push_back(field("parallel", "tensor_parallel", T::kInt, "1",
                    "Tensor-parallel degree; groups are consecutive ranks inside a node.", 1, 1024));
  f.push_back(field("parallel", "bucket_mb", T::kFloat, "25.0",
                    "Gradient bucket size for DDP all-reduce, in MiB.", 0, 1e5));
  f.back().min_exclusive = true;
  f.push_back(field("parallel", "reshard_after_forward", T::kBool, "true",
                    "FSDP2/ZeRO-3: free gathered parameters after each block's forward."));
  f.push_back(field("parallel", "prefetch", T::kBool, "true",
                    "FSDP2/ZeRO-3: gather the next block while the current one computes."));
  f.push_back(choice("parallel", "param_dtype", {"auto", "bf16", "fp16", "fp32"}, "\"auto\"",
                     "FSDP2/ZeRO-3: dtype of the parameter all-gather (sharded masters stay fp32; "
                     "gradients are reduced in fp32). auto: the GEMM precision (bf16 or fp16 on GPU; fp32 on CPU "
                     "unless train.precision is fp16)."));
  // [train]
  f.push_back(field("train", "data", T::kDataSources, "(required)",
                    "Training data: a path (file or folder), or a mixture `[{path = \"a.jsonl\", weight = 3}, "
                    "\"b.bin\"]` sampled by weight (an entry may set its own `format` and `text_field`). Text and "
                    "JSONL are tokenized with the model's tokenizer into output_dir/data-cache first."));
  f.push_back(choice("train", "data_format",
                     {"auto", "text", "jsonl", "chat", "prompt_completion", "nanogpt", "u16", "u32", "megatron", "cohort"},
                     "\"auto\"",
                     "`auto` decides by content: cohort shards and Megatron indexes by their headers, JSONL by its "
                     "first line (`messages`: chat, loss on assistant turns; `prompt`/`completion`: loss on the "
                     "completion; else `text_field`), a `.bin` without `.idx` is nanoGPT uint16, other files are text "
                     "(a file is a document; a folder, one per file)."));
  f.push_back(field("train", "text_field", T::kString, "\"text\"", "JSONL text data: the field holding each document."));
  f.push_back(field("train", "eval_fraction", T::kFloat, "0.05",
                    "Share of the data held out for evaluation.", 0, 0.9));
  f.push_back(field("train", "steps", T::kInt, "(required)", "Optimizer steps.", 1, 1e9));
  f.push_back(field("train", "micro_batch", T::kInt, "8", "Sequences per rank per micro-step.", 1, 1e6));
  f.push_back(field("train", "global_batch", T::kInt, "micro_batch × data-parallel degree",
                    "Sequences per optimizer step; accumulation makes up the difference.", 0, 1e9));
  f.push_back(field("train", "seq_len", T::kInt, "256", "Tokens per sequence.", 1, 1e7));
  f.push_back(field("train", "lr", T::kFloat, "3e-4", "Peak learning rate.", 0, 10));
  f.back().min_exclusive = true;
  f.push_back(field("train", "min_lr", T::kFloat, "lr / 10", "Learning rate at the end of the cosine.", 0, 10));
  f.push_back(field("train", "warmup_steps", T::kInt, "0", "Linear warm-up steps.", 0, 1e9));
  f.push_back(field("train", "weight_decay", T::kFloat, "0.1", "AdamW weight decay.", 0, 10));
  f.push_back(field("train", "beta1", T::kFloat, "0.9", "AdamW beta1.", 0, 1));
  f.push_back(field("train", "beta2", T::kFloat, "0.95", "AdamW beta2.", 0, 1));
  f.push_back(field("train", "grad_clip", T::kFloat, "1.0", "Global gradient-norm clip (0: off).", 0, 1e6));
  f.push_back(choice("train", "precision", {"bf16", "fp16", "fp32"}, "\"bf16\"",
                     "GEMM operand precision over fp32 master weights, fp32 accumulation. bf16: bf16 tensor cores "
                     "(CPU runs compute in fp32). fp16: fp16 tensor cores with dynamic loss scaling (CPU rounds "
                     "linear-layer operands to fp16 the same way). fp32: fp32 GEMMs."));
  f.push_back(field("train", "initial_loss_scale", T::kFloat, "65536",
                    "fp16: the loss scale to start from; halved after a step with non-finite gradients "
                    "(the step is skipped).", 0, 1e30));
  f.back().min_exclusive = true;
  f.push_back(field("train", "loss_scale_window", T::kInt, "2000",
                    "fp16: steps with finite gradients in a row before the loss scale doubles.", 1, 1e9));
  f.push_back(field("train", "checkpoint_every", T::kInt, "0",
                    "Steps between checkpoints (0: only at the end and on SIGTERM).", 0, 1e9));
  f.push_back(choice("train", "checkpoint_storage", {"shared", "node-local"}, "\"shared\"",
                     "`shared`: output_dir is one filesystem every node mounts at the same path (checked at start: "
                     "every rank must see a marker rank 0 writes there). `node-local`: each node keeps its own ranks' "
                     "shards under output_dir/checkpoints/<node>; a resume then needs the same nodes, and is refused "
                     "with the node lists otherwise."));
  f.push_back(field("train", "eval_every", T::kInt, "0", "Steps between evaluations (0: none).", 0, 1e9));
  f.push_back(field("train", "eval_batches", T::kInt, "4", "Batches per evaluation.", 1, 1e6));
  f.push_back(field("train", "log_every", T::kInt, "1", "Steps between log lines (metrics.jsonl gets every step).", 1, 1e9));
  f.push_back(field("train", "seed", T::kInt, "1234", "Seed for initialisation and data order.", 0, 9.2e18));
  f.push_back(field("train", "resume", T::kBool, "true",
                    "Start from the latest checkpoint in output_dir when there is one."));
  f.push_back(field("train", "sample_tokens", T::kInt, "0",
                    "Tokens of text to generate and print at the end (0: none).", 0, 1e6));
  f.push_back(field("train", "sample_prompt", T::kString, "\"\"", "Prompt for that sample."));
  f.push_back(field("train", "tensorboard", T::kBool, "false",
                    "Also write TensorBoard event files (loss, lr, grad norm, tokens/s, MFU, eval loss) under "
                    "output_dir/tensorboard."));
  // [infer]
  f.push_back(field("infer", "prompts", T::kString, "(required)",
                    "JSONL file: {\"prompt\": \"text\"} or {\"tokens\": [ids]} per line."));
  f.push_back(field("infer", "max_new_tokens", T::kInt, "64", "Tokens to generate per prompt.", 1, 1e7));
  f.push_back(field("infer", "temperature", T::kFloat, "0.0", "Sampling temperature (0: greedy).", 0, 100));
  f.push_back(field("infer", "top_k", T::kInt, "0", "Keep the k most likely tokens (0: off).", 0, 1e7));
  f.push_back(field("infer", "top_p", T::kFloat, "1.0", "Nucleus sampling mass.", 0, 1));
  f.back().min_exclusive = true;
  f.push_back(field("infer", "seed", T::kInt, "1234", "Sampling seed.", 0, 9.2e18));
  f.push_back(field("infer", "stop", T::kStopList, "[]", "Token ids and/or strings that end a sequence."));
  f.push_back(field("infer", "batch_size", T::kInt, "1", "Prompts decoded together.", 1, 1e5));
  f.push_back(field("infer", "tensor_parallel", T::kInt, "0",
                    "Tensor-parallel degree (0: all of the job's ranks).", 0, 1024));
  f.push_back(field("infer", "cuda_graphs", T::kBool, "true", "Capture decode steps in CUDA graphs."));
  // [serve]
  f.push_back(field("serve", "host", T::kString, "\"127.0.0.1\"",
                    "Address rank 0 serves HTTP on; off loopback it needs api_key."));
  f.push_back(field("serve", "port", T::kInt, "8000",
                    "TCP port (0: any free port; the URL is logged and written to "
                    "output_dir/endpoint.json).", 0, 65535));
  f.push_back(field("serve", "api_key", T::kString, "\"\"",
                    "Bearer key every /v1 request must carry (required off loopback)."));
  f.push_back(field("serve", "model_name", T::kString, "(the job's name)",
                    "The model id /v1/models lists and responses carry."));
  f.push_back(field("serve", "max_running", T::kInt, "16",
                    "Sequences decoded together (KV-cache slots).", 1, 1e5));
  f.push_back(field("serve", "max_queue", T::kInt, "64",
                    "Requests waiting for a slot; beyond it requests get 429.", 0, 1e6));
  f.push_back(field("serve", "max_connections", T::kInt, "256",
                    "Open HTTP connections; more are closed at once.", 1, 1e6));
  f.push_back(field("serve", "max_body_bytes", T::kInt, "1048576",
                    "Largest request body; larger ones get 413.", 1024, 1e9));
  f.push_back(field("serve", "context", T::kInt, "0",
                    "Positions per sequence, prompt plus output; the KV cache holds max_running of them "
                    "(0: the model's max_seq, at most 4096).", 0, 1e7));
  f.push_back(field("serve", "prefill_chunk", T::kInt, "256",
                    "Prompt tokens prefilled per step, so long prompts do not stall running streams "
                    "(0: whole prompts).", 0, 1e7));
  f.push_back(field("serve", "max_tokens", T::kInt, "256",
                    "max_tokens of a request that gives none.", 1, 1e7));
  f.push_back(field("serve", "temperature", T::kFloat, "1.0",
                    "Sampling temperature of a request that gives none (0: greedy).", 0, 100));
  f.push_back(field("serve", "top_p", T::kFloat, "1.0", "top_p of a request that gives none.", 0, 1));
  f.back().min_exclusive = true;
  f.push_back(field("serve", "top_k", T::kInt, "0", "top_k of a request that gives none (0: off).", 0, 1e7));
  f.push_back(field("serve", "seed", T::kInt, "1234",
                    "Seed of preset weights and of requests that give none.", 0, 9.2e18));
  f.push_back(field("serve", "tensor_parallel", T::kInt, "0",
                    "Tensor-parallel degree (0: all of the job's ranks; one replica).", 0, 1024));
  f.push_back(field("serve", "cuda_graphs", T::kBool, "true", "Capture decode steps in CUDA graphs."));
  // [command]
  f.push_back(field("command", "argv", T::kStringList, "(required)",
                    "The program and its arguments, run once per rank."));
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
                                                    "serve", "command"};
  return sections;
}

const char* type_name(FieldType type) {
  switch (type) {
    case FieldType::kString: return "string";
    case FieldType::kInt: return "integer";
    case FieldType::kFloat: return "number";
    case FieldType::kBool: return "boolean";
    case FieldType::kEnum: return "string";
    case FieldType::kStringList: return "array of strings";
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
