// JobSpec: the typed form of a job file (DESIGN §6).
//
// A job file is loaded with `load_job_file` (jobs/load.h), which checks every
// key against the schema (jobs/schema.h) and fills these structs; nothing
// downstream reads TOML. Defaults here are the documented defaults.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/parallel_dims.h"
#include "base/strategy.h"

namespace cohort::jobs {

using cohort::Strategy;  // base/strategy.h: one enum for the job file and parallel/

enum class JobKind { kTrain, kInfer, kServe, kCommand };
enum class DeviceVisibility {
  kOwn,   // each worker sees only its own GPU, as cuda:0
  kNode,  // each worker sees the job's GPUs on its node; cuda:LOCAL_RANK is its own
};
enum class Precision { kBf16, kFp16, kFp32 };

// Limits a job file is held to, so that one file cannot make the loader, the
// coordinator or a rank plan allocate without bound. The coordinator checks
// the same figures on submit (protocol/limits.h holds its byte caps).
inline constexpr size_t kMaxJobNameBytes = 128;
inline constexpr int kMaxNodes = 100000;
inline constexpr int64_t kMaxWorldSize = 1 << 20;  // ranks = nodes × gpus_per_node
inline constexpr int64_t kMaxBatch = 1000000000;   // sequences per optimizer step

const char* to_string(JobKind kind);
const char* to_string(DeviceVisibility devices);
// The inverses of the two above (the job file's and the wire's spelling);
// false for anything else.
bool parse_job_kind(std::string_view name, JobKind* kind);
bool parse_devices(std::string_view name, DeviceVisibility* devices);
const char* to_string(Precision precision);
bool parse_precision(std::string_view name, Precision* precision);

// `nodes = 2` is {2, 2}; `nodes = "1:4"` is an elastic job, {1, 4}.
struct NodeRange {
  int min = 1;
  int max = 1;
  bool elastic() const { return min != max; }
};

// A range of TCP ports, both ends included (`job.port_range = "29500-29999"`,
// `cohort agent --port-range`). Empty ({0, 0}): no constraint.
struct PortRange {
  int first = 0;
  int last = 0;
  bool empty() const { return first == 0; }
  int size() const { return empty() ? 0 : last - first + 1; }
};
// "LO-HI" with 1024 <= LO <= HI <= 65535 (or a single port "P"); false and
// *why set for anything else.
bool parse_port_range(std::string_view text, PortRange* range, std::string* why);

// One entry of job.depends_on: a job id and what its end must be.
enum class DependencyKind { kOk, kAny, kNotOk };
struct Dependency {
  std::string job_id;
  DependencyKind kind = DependencyKind::kOk;
};
// "job-3", "job-3:ok", "job-3:any" or "job-3:notok"; false and *why set for
// anything else.
bool parse_dependency(std::string_view text, Dependency* dependency, std::string* why);
const char* to_string(DependencyKind kind);
std::string to_string(const PortRange& range);  // "LO-HI", "" when empty

struct JobSection {
  std::string name;
  JobKind kind = JobKind::kCommand;
  NodeRange nodes;
  int gpus_per_node = 1;
  int max_restarts = 0;
  int priority = 0;                 // higher runs first; FIFO within a priority
  bool preemptible = false;         // a higher-priority job that cannot be placed may stop and requeue it
  std::string output_dir;           // default: runs/<name>
  std::string working_dir;          // default: the directory cohort was started in
  DeviceVisibility devices = DeviceVisibility::kOwn;  // default depends on kind
  double stop_grace_s = 10.0;       // SIGTERM, then SIGKILL after this
  double hang_timeout_s = 0.0;      // 0: no hang detection
  double placement_timeout_s = 0.0; // 0: wait for capacity forever
  double time_limit_s = 0.0;        // wall-clock limit from the first start (Slurm --time); 0: none
  // "job-3" or "job-3:ok" (Slurm afterok), "job-3:any" (afterany),
  // "job-3:notok" (afternotok): the job waits until each holds.
  std::vector<std::string> depends_on;
  std::string port_range;           // "LO-HI" for MASTER_PORT; "": the agent's range
  std::map<std::string, std::string> env;
};

struct ModelSection {
  std::string preset;        // tiny | tiny-moe | qwen3-0.6b | qwen3-1.7b | llama-3.2-1b | llama-3.1-8b | llama-3.1-70b | qwen3-moe-2.4b-a0.6b | qwen3-30b-a3b
  std::string hf_dir;        // a Hugging Face folder: config.json + safetensors
  std::string checkpoint;    // a cohort checkpoint folder (infer, or train init)
  int max_seq = 0;           // 0: the preset's or config's own
  std::string attention = "auto";  // auto | cudnn | flash | math
  std::string quantize = "none";   // none | fp8 | int8 | int4: weights round-tripped at load (hf/load_quantization.h)
  std::string adapter;       // infer and serve: a PEFT LoRA adapter folder merged into the weights at load
};

struct ParallelSection {
  Strategy strategy = Strategy::kDdp;
  int tensor_parallel = 1;
  int expert_parallel = 1;  // a mixture of experts' experts split over this many data-parallel ranks
  double bucket_mb = 25.0;
  bool reshard_after_forward = true;
  bool prefetch = true;
  std::string param_dtype = "auto";  // auto | bf16 | fp16 | fp32: zero3/fsdp2 all-gather dtype
};

// One training data source: `train.data = "path"`, or an entry of
// `train.data = [{path = "a.jsonl", weight = 3, format = "chat"}, "b.bin"]`.
struct DataSource {
  std::string path;
  double weight = 1.0;        // mixture weight (relative)
  std::string format;         // "" : train.data_format
  std::string text_field;     // "" : train.text_field
};

struct TrainSection {
  std::vector<DataSource> data;      // at least one when loaded
  std::string data_format = "auto";  // data/data_format.h's names
  std::string text_field = "text";   // JSONL: the field holding the text
  double eval_fraction = 0.05;  // held-out share of the data
  int steps = 0;
  int micro_batch = 8;
  int global_batch = 0;        // 0: micro_batch × data-parallel degree
  // Elastic jobs: "keep" holds the global batch across world sizes by
  // changing accumulation (the coordinator writes it into each attempt's
  // file); "scale" lets it follow the world size.
  std::string elastic_batch = "keep";
  int seq_len = 256;
  double lr = 3e-4;
  double min_lr = 0.0;         // end of the cosine; 0: lr / 10
  int warmup_steps = 0;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;      // 0: no clipping
  Precision precision = Precision::kBf16;
  // What backward finds saved: "none", "selective" or "full"
  // (models/model.h, ActivationCheckpointing).
  std::string activation_checkpointing = "none";
  int lm_head_chunk_tokens = 0;  // 0: the LM head and loss over all rows at once
  double initial_loss_scale = 65536.0;  // fp16 only
  int loss_scale_window = 2000;         // fp16: finite steps before the scale doubles
  int checkpoint_every = 0;    // 0: only at the end and on SIGTERM
  // "shared": output_dir is the same storage on every node (checked at
  // start); "node-local": each node keeps its ranks' shards on its own disk
  // and a resume needs the same nodes.
  std::string checkpoint_storage = "shared";
  int eval_every = 0;          // 0: no periodic evaluation
  int eval_batches = 4;
  int log_every = 1;
  int64_t seed = 1234;
  bool resume = true;          // start from output_dir's latest checkpoint
  int sample_tokens = 0;       // >0: print a generated sample at the end
  std::string sample_prompt;
  bool tensorboard = false;    // event files under output_dir/tensorboard (rank 0)
};

struct InferSection {
  std::string prompts;          // JSONL: {"prompt": "..."} or {"tokens": [...]}
  int max_new_tokens = 64;
  double temperature = 0.0;     // 0: greedy
  int top_k = 0;                // 0: off
  double top_p = 1.0;
  int64_t seed = 1234;
  std::vector<int64_t> stop_tokens;
  std::vector<std::string> stop_strings;
  int batch_size = 1;
  int tensor_parallel = 0;      // 0: all of the job's ranks
  bool cuda_graphs = true;
  std::string kv_cache_dtype = "bf16";  // bf16 | fp8 (models/ops/kv_fp8.h; the CUDA-graph engine)
};

// kind = "serve": the OpenAI-compatible HTTP server (infer/serve_job.h).
struct ServeSection {
  std::string host = "127.0.0.1";
  int port = 8000;              // 0: any free port (printed and written to output_dir/endpoint.json)
  std::string api_key;          // required when host is not loopback
  std::string model_name;       // the id /v1/models lists; default: the job's name
  int max_running = 16;         // sequences decoded together (KV-cache slots)
  int max_queue = 64;           // requests waiting for a slot before 429
  int max_connections = 256;    // open HTTP connections before new ones are refused
  int max_body_bytes = 1 << 20; // request bodies above this get 413
  int context = 0;              // positions per sequence (prompt + output); 0: the model's max_seq, at most 4096
  int max_batched_tokens = 8192;  // tokens per forward: running sequences' next tokens, then prompt chunks
  double itl_target_ms = 25;    // steps with decode rows take the prompt tokens that fit this (infer/step_budget.h); 0: off
  bool prefix_caching = true;   // full KV blocks reused by later prompts with the same prefix
  int64_t kv_cache_tokens = 0;  // KV-cache positions shared by the running sequences; 0: by gpu_memory_fraction
  std::string kv_cache_dtype = "bf16";  // bf16 | fp8 (models/ops/kv_fp8.h; the CUDA-graph engine)
  double gpu_memory_fraction = 0.9;  // of the GPU's memory the server may take (weights, buffers, KV cache)
  int max_tokens = 256;         // a request's max_tokens when it gives none
  double temperature = 1.0;     // defaults for requests that give none
  double top_p = 1.0;
  int top_k = 0;
  int64_t seed = 1234;          // preset weights' init, and requests without a seed
  int tensor_parallel = 0;      // 0: all of the job's ranks
  bool cuda_graphs = true;
  std::string tool_parser = "auto";  // tool calls read from the text: auto (from the chat template), hermes, llama3_json
  std::map<std::string, std::string> adapters;  // [serve.adapters]: name -> PEFT adapter folder, served beside the base
};

struct CommandSection {
  std::vector<std::string> argv;
};

// lora.target_modules' default, {"q_proj", "v_proj"}: a function rather than
// a braced list, which GCC 12 fails on inside JobSpec's member initializers.
std::vector<std::string> default_lora_target_modules();

// [lora]: train low-rank adapters on a frozen base (kind = "train"). Names
// and defaults follow PEFT's LoraConfig; models/lora_config.h holds the
// checked form the worker runs.
struct LoraSection {
  int rank = 8;                  // PEFT's r
  double alpha = 8.0;            // PEFT's lora_alpha; the delta is scaled by alpha / rank
  double dropout = 0.0;          // on the adapters' input only
  // PEFT module names (q_proj k_proj v_proj o_proj gate_proj up_proj
  // down_proj), or "all-linear": every one of them. PEFT's default for
  // Llama and Qwen models is q_proj and v_proj.
  std::vector<std::string> target_modules = default_lora_target_modules();
  bool use_rslora = false;       // scale by alpha / sqrt(rank)
  std::string init = "kaiming_uniform";  // kaiming_uniform | gaussian (A; B starts at zero)
  std::string adapter;           // a PEFT adapter folder to start from
  std::string base_dtype = "bf16";  // bf16 | fp32 | nf4 | fp8 (QLoRA: a quantized base)
};

struct JobSpec {
  std::string source_path;  // the job file, for messages
  JobSection job;
  ModelSection model;
  ParallelSection parallel;
  TrainSection train;
  InferSection infer;
  ServeSection serve;
  CommandSection command;
  LoraSection lora;

  bool has_model = false;
  bool has_train = false;
  bool has_infer = false;
  bool has_serve = false;
  bool has_command = false;
  bool has_lora = false;

  // Data-parallel degree at a given number of nodes (ParallelDims); 0 when
  // tensor_parallel does not divide the world.
  int world_size(int nodes) const { return nodes * job.gpus_per_node; }
  int data_parallel(int nodes) const {
    const auto dims = ParallelDims::create(world_size(nodes), parallel.tensor_parallel);
    return dims.is_ok() ? dims->dp : 0;
  }
  // Micro-steps per optimizer step at a given number of nodes; 0 when the
  // global batch does not divide evenly.
  int accumulation_steps(int nodes) const;
  int effective_global_batch(int nodes) const;
};

}  // namespace cohort::jobs
