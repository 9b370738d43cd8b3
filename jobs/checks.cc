// Rules that span fields: what a kind requires, how the world size splits
// into data- and tensor-parallel degrees, and how batches divide. Run after
// every key was read, so one pass reports all of them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>

#include "base/host_address.h"
#include "hf/hub_cache.h"
#include "jobs/load_context.h"
#include "jobs/schema.h"

namespace cohort::jobs {
namespace {

// Checked by a loop, not std::regex: libstdc++'s regex recurses per
// character and a 30,000-character name ran it off the stack.
bool is_job_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The longest sequence a built-in preset supports when model.max_seq is 0
// (models/config.cc has the same figures; jobs/ does not link models/).
int preset_max_seq(const std::string& preset) {
  if (preset == "tiny") return 128;
  if (preset.empty()) return 0;
  return 4096;
}

void check_required(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.given("job")) {
    ctx.error_at("job", "missing section [job] (it needs at least name and kind)");
    return;
  }
  if (!ctx.given("job.name")) ctx.error_at("job", "[job] is missing the required key 'name'");
  if (!ctx.given("job.kind"))
    ctx.error_at("job", "[job] is missing the required key 'kind' (train, infer, serve or command)");
  if (ctx.given("job.name") && spec.job.name.size() > kMaxJobNameBytes)
    ctx.error_at("job.name", "job.name: " + std::to_string(spec.job.name.size()) +
                                 " characters long; at most " + std::to_string(kMaxJobNameBytes));
  else if (ctx.given("job.name") && !is_job_name(spec.job.name))
    ctx.error_at("job.name", "job.name: \"" + spec.job.name +
                                 "\" may use only letters, digits, '.', '_' and '-'");
  if (!ctx.valid("job.kind")) return;

  switch (spec.job.kind) {
    case JobKind::kCommand:
      if (!spec.has_command) ctx.error_at("job.kind", "kind = \"command\" needs a [command] section with argv");
      else if (ctx.given("command.argv") && !ctx.valid("command.argv"))
        ;  // its type error is reported already
      else if (spec.command.argv.empty() || spec.command.argv[0].empty())
        ctx.error_at(ctx.given("command.argv") ? "command.argv" : "command",
                     "command.argv: needs at least the program to run");
      break;
    case JobKind::kTrain:
      if (!spec.has_train) ctx.error_at("job.kind", "kind = \"train\" needs a [train] section");
      else {
        if (!ctx.given("train.data")) ctx.error_at("train", "[train] is missing the required key 'data'");
        if (!ctx.given("train.steps")) ctx.error_at("train", "[train] is missing the required key 'steps'");
      }
      break;
    case JobKind::kInfer:
      if (!spec.has_infer) ctx.error_at("job.kind", "kind = \"infer\" needs an [infer] section");
      else if (!ctx.given("infer.prompts"))
        ctx.error_at("infer", "[infer] is missing the required key 'prompts'");
      break;
    case JobKind::kServe:
      break;  // [serve] is optional: every key has a default
  }
  if (spec.job.kind != JobKind::kCommand) {
    int sources = int(!spec.model.preset.empty()) + int(!spec.model.hf_dir.empty()) +
                  int(!spec.model.checkpoint.empty());
    if (sources == 0)
      ctx.error_at(spec.has_model ? "model" : "job.kind",
                   std::string("kind = \"") + to_string(spec.job.kind) +
                       "\" needs [model] with one of preset, hf_dir or checkpoint");
    else if (sources > 1)
      ctx.error_at("model", "[model]: give only one of preset, hf_dir and checkpoint");
  }
  if (!spec.model.adapter.empty() && spec.job.kind != JobKind::kInfer && spec.job.kind != JobKind::kServe)
    ctx.error_at("model.adapter",
                 std::string("model.adapter is merged for kind infer and serve, not \"") + to_string(spec.job.kind) +
                     "\" (to train on from an adapter, set lora.adapter)");
  if (spec.job.kind != JobKind::kCommand && spec.has_command)
    ctx.warn("[command] has no effect for kind = \"" + std::string(to_string(spec.job.kind)) + "\"");
  if (spec.job.kind != JobKind::kTrain && spec.has_train)
    ctx.warn("[train] has no effect for kind = \"" + std::string(to_string(spec.job.kind)) + "\"");
  if (spec.job.kind != JobKind::kInfer && spec.has_infer)
    ctx.warn("[infer] has no effect for kind = \"" + std::string(to_string(spec.job.kind)) + "\"");
  if (spec.job.kind != JobKind::kServe && spec.has_serve)
    ctx.warn("[serve] has no effect for kind = \"" + std::string(to_string(spec.job.kind)) + "\"");
}

// Tensor-parallel groups are consecutive ranks inside one node.
void check_mesh(JobSpec& spec, LoadContext& ctx) {
  int tp = spec.parallel.tensor_parallel;
  const char* tp_key = "parallel.tensor_parallel";
  if (spec.job.kind == JobKind::kInfer && spec.infer.tensor_parallel > 0) {
    tp = spec.infer.tensor_parallel;
    tp_key = "infer.tensor_parallel";
  }
  if (spec.job.kind == JobKind::kServe) {
    tp = spec.serve.tensor_parallel > 0 ? spec.serve.tensor_parallel : spec.job.gpus_per_node;
    tp_key = "serve.tensor_parallel";
  }
  int64_t world = int64_t(spec.job.nodes.max) * spec.job.gpus_per_node;
  if (world > kMaxWorldSize) {
    ctx.error_at("job.nodes", "job.nodes: " + std::to_string(spec.job.nodes.max) + " nodes × " +
                                  std::to_string(spec.job.gpus_per_node) + " GPUs per node = " +
                                  std::to_string(world) + " ranks; at most " +
                                  std::to_string(kMaxWorldSize));
    return;
  }
  if (tp < 1) return;  // reported by its range check
  if (spec.job.gpus_per_node % tp != 0) {
    ctx.error_at(tp_key, std::string(tp_key) + ": " + std::to_string(tp) +
                             " does not divide gpus_per_node " + std::to_string(spec.job.gpus_per_node) +
                             " (tensor-parallel groups stay inside a node), so nodes × gpus_per_node = " +
                             std::to_string(spec.world_size(spec.job.nodes.max)) +
                             " ranks cannot form whole tensor-parallel groups");
  }
}

// Expert parallelism: training only (any strategy, LoRA too), and an expert
// group size dividing the data-parallel degree at every world size the job
// may run at. Whether the model has experts enough is known when it loads
// (models::local_dims names the count).
void check_expert_parallel(JobSpec& spec, LoadContext& ctx) {
  const int ep = spec.parallel.expert_parallel;
  if (ep <= 1 || !ctx.valid("parallel.expert_parallel")) return;
  const char* key = "parallel.expert_parallel";
  const std::string prefix = std::string(key) + ": " + std::to_string(ep) + " ";
  if (spec.job.kind != JobKind::kTrain) {
    return ctx.error_at(key, prefix + "splits a training job's experts; kind = \"" +
                                 std::string(to_string(spec.job.kind)) + "\" serves every expert on each rank");
  }
  if (spec.parallel.tensor_parallel < 1) return;
  for (int nodes : {spec.job.nodes.min, spec.job.nodes.max}) {
    const int dp = spec.data_parallel(nodes);
    if (dp > 0 && dp % ep != 0) {
      return ctx.error_at(key, prefix + "does not divide the data-parallel degree " + std::to_string(dp) + " at " +
                                   std::to_string(nodes) + " node(s) (nodes × gpus_per_node / tensor_parallel)");
    }
  }
}

void check_train(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.valid("job.kind") || spec.job.kind != JobKind::kTrain || !spec.has_train) return;
  const auto& t = spec.train;
  if (spec.parallel.tensor_parallel < 1 || spec.job.gpus_per_node % spec.parallel.tensor_parallel != 0) return;
  if (int64_t(spec.job.nodes.max) * spec.job.gpus_per_node > kMaxWorldSize) return;  // reported already
  // In 64 bits: micro_batch × dp reaches 10^12 and wrapped to 0 in an int.
  int64_t per_step_max = int64_t(t.micro_batch) * spec.data_parallel(spec.job.nodes.max);
  if (per_step_max > kMaxBatch) {
    ctx.error_at(ctx.given("train.micro_batch") ? "train.micro_batch" : "train",
                 "train.micro_batch: " + std::to_string(t.micro_batch) + " × data-parallel degree " +
                     std::to_string(spec.data_parallel(spec.job.nodes.max)) + " = " +
                     std::to_string(per_step_max) + " sequences per step; at most " +
                     std::to_string(kMaxBatch));
  } else if (ctx.valid("train.global_batch") && ctx.valid("train.micro_batch") == ctx.given("train.micro_batch") &&
      t.global_batch > 0) {
    for (int nodes = spec.job.nodes.min; nodes <= spec.job.nodes.max; ++nodes) {
      int dp = spec.data_parallel(nodes);
      if (t.global_batch % (int64_t(t.micro_batch) * dp) != 0) {
        std::string where = spec.job.nodes.elastic() ? " at " + std::to_string(nodes) + " nodes" : "";
        ctx.error_at("train.global_batch",
                     "train.global_batch: " + std::to_string(t.global_batch) +
                         " is not divisible by micro_batch " + std::to_string(t.micro_batch) +
                         " × data-parallel degree " + std::to_string(dp) + where + " (= " +
                         std::to_string(int64_t(t.micro_batch) * dp) + ")");
        break;
      }
    }
  }
  if (t.warmup_steps > t.steps && ctx.given("train.steps"))
    ctx.error_at("train.warmup_steps", "train.warmup_steps: " + std::to_string(t.warmup_steps) +
                                           " is more than train.steps " + std::to_string(t.steps));
  if (ctx.given("train.min_lr") && t.min_lr > t.lr)
    ctx.error_at("train.min_lr", "train.min_lr: larger than train.lr");
  // Keys that only some settings read: say so rather than ignore them quietly.
  bool sharded_params = spec.parallel.strategy == Strategy::kZero3 || spec.parallel.strategy == Strategy::kFsdp2;
  if (ctx.given("parallel.param_dtype") && spec.parallel.param_dtype != "auto" && !sharded_params)
    ctx.warn(std::string("parallel.param_dtype has no effect with strategy = \"") + strategy_name(spec.parallel.strategy) +
             "\" (only zero3 and fsdp2 gather parameters)");
  for (const char* key : {"train.initial_loss_scale", "train.loss_scale_window"})
    if (ctx.given(key) && t.precision != Precision::kFp16)
      ctx.warn(std::string(key) + " has no effect with train.precision = \"" + to_string(t.precision) +
               "\" (loss scaling is for fp16)");
  int max_seq = spec.model.max_seq > 0 ? spec.model.max_seq : preset_max_seq(spec.model.preset);
  if (max_seq > 0 && t.seq_len > max_seq && ctx.given("train.seq_len"))
    ctx.error_at("train.seq_len", "train.seq_len: " + std::to_string(t.seq_len) + " is longer than " +
                                      (spec.model.max_seq > 0 ? "model.max_seq "
                                                              : "preset \"" + spec.model.preset + "\"'s max_seq ") +
                                      std::to_string(max_seq) + " (set model.max_seq or a shorter seq_len)");
}

void check_infer(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.valid("job.kind") || spec.job.kind != JobKind::kInfer || !spec.has_infer) return;
  if (spec.infer.tensor_parallel == 0 && spec.job.nodes.elastic())
    ctx.error_at("job.nodes", "job.nodes: inference jobs run on a fixed number of nodes");
}

// The server is one tensor-parallel replica; off loopback it needs a key,
// the rule the coordinator's HTTP API follows.
void check_serve(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.valid("job.kind") || spec.job.kind != JobKind::kServe) return;
  const auto& s = spec.serve;
  if (spec.job.nodes.elastic())
    ctx.error_at("job.nodes", "job.nodes: a server runs on a fixed number of nodes");
  const int world = spec.world_size(spec.job.nodes.max);
  if (s.tensor_parallel > 0 && s.tensor_parallel != world)
    ctx.error_at("serve.tensor_parallel",
                 "serve.tensor_parallel: " + std::to_string(s.tensor_parallel) + " must equal the job's " +
                     std::to_string(world) + " ranks (one server replica; run more jobs for more replicas)");
  const HostKind host = classify_host(s.host);
  const std::string host_field = ctx.given("serve.host") ? "serve.host" : "serve";
  if (host == HostKind::kName)
    ctx.error_at(host_field, "serve.host: \"" + s.host + "\" is not an IP address; the server binds an address: "
                 "127.0.0.1 (or localhost) for this node only, 0.0.0.0 or one of the node's own addresses "
                 "for others (with serve.api_key)");
  if (host == HostKind::kOtherAddress && s.api_key.empty())
    ctx.error_at(host_field,
                 "serve.host: \"" + s.host + "\" is not a loopback address, so serve.api_key is required "
                 "(anyone who reaches the port could use the model)");
  if (spec.model.max_seq > 0 && s.context > spec.model.max_seq)
    ctx.error_at("serve.context", "serve.context: " + std::to_string(s.context) +
                                      " is longer than model.max_seq " + std::to_string(spec.model.max_seq));
  // Adapters are named in requests' `model`: a name the base or another
  // adapter has would be ambiguous.
  constexpr size_t kMaxAdapters = 64;
  if (s.adapters.size() > kMaxAdapters)
    ctx.error_at("serve.adapters", "serve.adapters: " + std::to_string(s.adapters.size()) + " adapters; at most " +
                                       std::to_string(kMaxAdapters));
  for (const auto& [name, folder] : s.adapters) {
    const std::string key = "serve.adapters." + name;
    if (name == s.model_name || (s.model_name.empty() && name == spec.job.name))
      ctx.error_at(key, key + ": the base model's name (serve.model_name); give the adapter another");
  }
  // Every running sequence's next token is in every step.
  if (s.max_batched_tokens < s.max_running)
    ctx.error_at("serve.max_batched_tokens", "serve.max_batched_tokens: " + std::to_string(s.max_batched_tokens) +
                                                 " is less than serve.max_running " + std::to_string(s.max_running) +
                                                 ": a step holds one token of every running sequence");
  // A cache smaller than one context would accept requests it can never
  // admit. (With context 0 the server checks once it knows the model's.)
  if (s.kv_cache_tokens > 0 && s.context > 0 && s.kv_cache_tokens < s.context)
    ctx.error_at("serve.kv_cache_tokens", "serve.kv_cache_tokens: " + std::to_string(s.kv_cache_tokens) +
                                              " is less than one sequence's serve.context " +
                                              std::to_string(s.context) + "; raise it or lower serve.context");
}

// PEFT's module names of the projections an adapter may sit on, in block
// order (models/lora_config.h has the same list; jobs/ does not link models/,
// and tests/jobs/lora_section_test.cc checks that the two agree).
const char* const kLoraModules[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

void check_lora_targets(const LoraSection& lora, LoadContext& ctx) {
  const std::string key = "lora.target_modules";
  if (lora.target_modules.empty()) return ctx.error_at(key, key + ": name at least one module, or \"all-linear\"");
  std::string known;
  for (const char* m : kLoraModules) known += std::string(known.empty() ? "" : ", ") + m;
  std::vector<std::string> seen;
  for (size_t i = 0; i < lora.target_modules.size(); ++i) {
    const std::string& name = lora.target_modules[i];
    const std::string at = key + "[" + std::to_string(i) + "]";
    const std::string where = ctx.given(at) ? at : key;
    if (name == "all-linear") {
      if (lora.target_modules.size() > 1)
        ctx.error_at(where, at + ": \"all-linear\" already names every projection; give it alone");
      continue;
    }
    if (std::find(std::begin(kLoraModules), std::end(kLoraModules), name) == std::end(kLoraModules)) {
      std::string near = nearest_name(name, std::vector<std::string>(std::begin(kLoraModules), std::end(kLoraModules)));
      ctx.error_at(where, at + ": unknown module \"" + name + "\" (one of: " + known + ", or \"all-linear\")" +
                              (near.empty() ? "" : "; did you mean \"" + near + "\"?"));
    } else if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      ctx.error_at(where, at + ": \"" + name + "\" is named twice");
    }
    seen.push_back(name);
  }
}

void check_lora(JobSpec& spec, LoadContext& ctx) {
  if (!spec.has_lora) return;
  if (ctx.valid("job.kind") && spec.job.kind != JobKind::kTrain) {
    ctx.warn("[lora] has no effect for kind = \"" + std::string(to_string(spec.job.kind)) +
             "\" (adapters are trained by kind = \"train\")");
    return;
  }
  const LoraSection& lora = spec.lora;
  if (!ctx.given("lora.target_modules") || ctx.valid("lora.target_modules")) check_lora_targets(lora, ctx);
  if ((lora.base_dtype == "nf4" || lora.base_dtype == "fp8") && spec.model.quantize != "none")
    ctx.error_at("model.quantize", "model.quantize: \"" + spec.model.quantize + "\" beside lora.base_dtype = \"" +
                                       lora.base_dtype + "\": the base is quantized by lora.base_dtype alone");
  if (!lora.adapter.empty()) {
    for (const char* key : {"lora.rank", "lora.alpha", "lora.use_rslora", "lora.target_modules", "lora.init"})
      if (ctx.given(key))
        ctx.warn(std::string(key) + " has no effect with lora.adapter: the adapter folder's adapter_config.json " +
                 "sets the adapters' shape and scale, and they start from its weights");
  }
}

void check_dependencies(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.valid("job.depends_on")) return;
  for (size_t i = 0; i < spec.job.depends_on.size(); ++i) {
    Dependency dependency;
    std::string why;
    if (!parse_dependency(spec.job.depends_on[i], &dependency, &why)) {
      ctx.error_at("job.depends_on", "job.depends_on[" + std::to_string(i) + "]: " + why);
    }
  }
}

void check_ports(JobSpec& spec, LoadContext& ctx) {
  if (!ctx.valid("job.port_range")) return;
  PortRange range;
  std::string why;
  if (!parse_port_range(spec.job.port_range, &range, &why)) ctx.error_at("job.port_range", "job.port_range: " + why);
}

// "~" and "~/x" name the home folder, as a shell would have made them.
std::string expand_home(const std::string& path) {
  if (path != "~" && path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + path.substr(1) : path;
}

std::string absolute(const std::string& given, const std::string& base) {
  if (given.empty()) return given;
  std::filesystem::path p(expand_home(given));
  std::string out = (p.is_absolute() ? p : std::filesystem::path(base) / p).lexically_normal().string();
  if (out.size() > 1 && out.back() == '/') out.pop_back();  // "dir/." normalizes to "dir/"
  return out;
}

}  // namespace

void check_job_rules(JobSpec& spec, LoadContext& ctx) {
  check_required(spec, ctx);
  check_ports(spec, ctx);
  check_dependencies(spec, ctx);
  check_mesh(spec, ctx);
  check_expert_parallel(spec, ctx);
  check_train(spec, ctx);
  check_infer(spec, ctx);
  check_serve(spec, ctx);
  check_lora(spec, ctx);
}

void resolve_hub_model(JobSpec& spec, LoadContext& ctx, const std::string& base) {
  const std::string& given = spec.model.hf_dir;
  std::error_code ec;
  if (given.empty() || !hf::looks_like_hub_id(given) || std::filesystem::exists(absolute(given, base), ec)) return;
  auto snapshot = hf::find_in_hub_cache(given);
  if (!snapshot) return ctx.error_at("model.hf_dir", "model.hf_dir: " + snapshot.status().message());
  spec.model.hf_dir = *snapshot;
}

void resolve_defaults(JobSpec& spec, const LoadContext& ctx, const std::string& cwd, const std::string& file_dir) {
  auto base = [&](const char* key) { return ctx.from_override(key) ? cwd : file_dir; };
  if (!ctx.given("job.devices"))
    spec.job.devices = spec.job.kind == JobKind::kCommand ? DeviceVisibility::kNode : DeviceVisibility::kOwn;
  if (spec.job.output_dir.empty()) spec.job.output_dir = "runs/" + spec.job.name;
  if (spec.serve.model_name.empty()) spec.serve.model_name = spec.job.name;
  if (spec.job.working_dir.empty()) spec.job.working_dir.assign(1, '.');  // not = ".": a GCC 12 -Wrestrict false positive
  spec.job.working_dir = absolute(spec.job.working_dir, base("job.working_dir"));
  spec.job.output_dir = absolute(spec.job.output_dir, base("job.output_dir"));
  spec.model.hf_dir = absolute(spec.model.hf_dir, base("model.hf_dir"));
  spec.model.checkpoint = absolute(spec.model.checkpoint, base("model.checkpoint"));
  for (auto& d : spec.train.data) d.path = absolute(d.path, base("train.data"));
  spec.infer.prompts = absolute(spec.infer.prompts, base("infer.prompts"));
  spec.lora.adapter = absolute(spec.lora.adapter, base("lora.adapter"));
  spec.model.adapter = absolute(spec.model.adapter, base("model.adapter"));
  for (auto& [name, folder] : spec.serve.adapters) folder = absolute(folder, base("serve.adapters"));
  if (!ctx.given("train.min_lr")) spec.train.min_lr = spec.train.lr / 10;
  // The default sequence length never exceeds what the model supports.
  int max_seq = spec.model.max_seq > 0 ? spec.model.max_seq : preset_max_seq(spec.model.preset);
  if (!ctx.given("train.seq_len") && max_seq > 0 && spec.train.seq_len > max_seq) spec.train.seq_len = max_seq;
}

}  // namespace cohort::jobs
