// kind = "infer": sharded generation (DESIGN §7, issue 9).
//
// The job's world splits into dp × tp (tp = infer.tensor_parallel, or every
// rank when 0). Each tensor-parallel group is one replica of the model, each
// rank holding and reading only its slices; prompt i goes to replica i % dp,
// so more ranks than the model needs serve more prompts at once. Every rank
// reads the prompts file and checks it before any collective, so a bad
// prompt fails all ranks alike. Rank 0 writes the results (report.h).
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/env_knobs.h"
#include "collective/bootstrap.h"
#include "worker/worker_context.h"
#include "base/parallel_dims.h"
#include "infer/generate.h"
#include "infer/prompts.h"
#include "infer/model_source.h"
#include "infer/output_processor.h"
#include "infer/report.h"
#include "infer/scheduler.h"
#include "infer/engine_setup.h"
#include "infer/infer_job.h"

namespace cohort::infer {
namespace {

namespace fs = std::filesystem;

// COHORT_INFER_DUMP_LOGITS=1 writes <output_dir>/logits/<prompt index>.f32
// (the fp32 logits every generated token was sampled from, back to back), so
// tests can compare tensor-parallel degrees to the last bit that matters.
bool dump_logits_requested() {
  return env_knob_on(EnvKnob::kInferDumpLogits);
}

struct LogitsDump {
  std::map<int, std::vector<float>> by_prompt;
  void add(int index, const float* logits, int vocab) {
    auto& v = by_prompt[index];
    v.insert(v.end(), logits, logits + vocab);
  }
  Status write(const std::string& output_dir) const {
    const fs::path dir = fs::path(output_dir) / "logits";
    std::error_code ec;
    fs::create_directories(dir, ec);
    for (const auto& [index, values] : by_prompt) {
      std::ofstream out(dir / (std::to_string(index) + ".f32"), std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(values.data()),
                static_cast<std::streamsize>(values.size() * sizeof(float)));
      if (!out) return io_error("cannot write logits to " + dir.string());
    }
    return Status::ok();
  }
};

// Positions the KV cache needs: the longest prompt plus max_new_tokens. The
// error names the prompt, so that every rank fails with the same message.
Result<int> cache_capacity(const std::vector<Prompt>& prompts, int max_new_tokens,
                           const models::ModelConfig& config) {
  size_t longest = 0;
  int which = 0;
  for (const Prompt& p : prompts) {
    if (p.tokens.size() > longest) longest = p.tokens.size(), which = p.index;
  }
  const int64_t need = static_cast<int64_t>(longest) + max_new_tokens;
  if (need > config.max_seq) {
    return invalid_argument("infer.prompts: prompt " + std::to_string(which) + " has " +
                            std::to_string(longest) + " tokens; with max_new_tokens " +
                            std::to_string(max_new_tokens) + " it needs " + std::to_string(need) +
                            " positions but the model's max_seq is " +
                            std::to_string(config.max_seq) +
                            " (raise [model] max_seq or lower infer.max_new_tokens)");
  }
  return static_cast<int>(need);
}

models::SamplingParams sampling_params(const jobs::InferSection& infer) {
  models::SamplingParams s;
  s.temperature = static_cast<float>(infer.temperature);
  s.top_k = infer.top_k;
  s.top_p = static_cast<float>(infer.top_p);
  s.seed = static_cast<uint64_t>(infer.seed);
  return s;
}

Status run(const jobs::JobSpec& spec, collective::World& world) {
  const jobs::InferSection& infer = spec.infer;
  // Read before anything loads, so that a bad value costs no model load.
  COHORT_ASSIGN_OR_RETURN(const bool run_ahead, run_ahead_switch());
  const int tp = infer.tensor_parallel > 0 ? infer.tensor_parallel : world.size;
  const auto made = ParallelDims::create(world.size, tp);
  if (!made) return made.status().with_context("infer.tensor_parallel");
  const ParallelDims dims = *made;
  const int dp = dims.dp, replica = dims.dp_rank(world.rank);
  COHORT_ASSIGN_OR_RETURN(models::ModelConfig config, worker::resolve_model_config(spec.model));
  COHORT_ASSIGN_OR_RETURN(auto tokenizer, open_tokenizer(spec.model, config));
  COHORT_ASSIGN_OR_RETURN(auto prompts, load_prompts(infer.prompts, tokenizer.get(), config.vocab_size));
  const std::vector<int32_t> eos = model_eos_tokens(spec.model, tokenizer.get());
  COHORT_ASSIGN_OR_RETURN(StopCondition stop, StopCondition::create(infer, tokenizer.get(), eos));
  COHORT_ASSIGN_OR_RETURN(int capacity, cache_capacity(prompts, infer.max_new_tokens, config));
  std::vector<Prompt> mine;
  for (const Prompt& p : prompts) {
    if (p.index % dp == replica) mine.push_back(p);
  }
  const int slots = std::min(infer.batch_size, static_cast<int>(mine.size()));
  std::map<std::string, int> weights;
  COHORT_ASSIGN_OR_RETURN(const std::string formats, weight_formats(spec.model, config, &weights));
  if (world.rank == 0) {
    spdlog::info("infer: {} ({} layers, hidden {}, vocab {}; weights {}), {} prompts, tp {} x dp {}, "
                 "batch {}, max_new_tokens {}",
                 model_source(spec.model), config.layers, config.hidden, config.vocab_size, formats,
                 prompts.size(), tp, dp, infer.batch_size, infer.max_new_tokens);
    if (!eos.empty()) {
      spdlog::info("infer: sequences also end at the model's end-of-sequence ids [{}] "
                   "(COHORT_INFER_IGNORE_EOS=1 to decode past them)", fmt::join(eos, ", "));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  COHORT_ASSIGN_OR_RETURN(EngineBundle bundle,
                          build_engine(spec, config, world, tp, slots, capacity));
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool reporter = dims.tp_rank(world.rank) == 0;
  ReplicaResults results;
  LogitsDump dump;
  if (bundle.engine) {
    if (world.rank == 0) {
      spdlog::info("infer: {} ready in {:.2f} s", bundle.engine->describe(), load_s);
    }
    GenerateOptions options;
    options.max_new_tokens = infer.max_new_tokens;
    options.sampling = sampling_params(infer);
    // Every rank asks the engine for logits (the CUDA engine gathers them with
    // a collective that all ranks of the group must enter); only the reporter
    // keeps them.
    options.return_logits = dump_logits_requested();
    options.run_ahead = run_ahead;
    if (reporter && options.return_logits) {
      options.on_logits = [&dump](int i, const float* l, int v) { dump.add(i, l, v); };
    }
    COHORT_ASSIGN_OR_RETURN(results.outputs,
                            generate_all(*bundle.engine, mine, stop, options, &results.stats));
    if (tokenizer) {
      const auto shared_stop = std::make_shared<const StopCondition>(stop);
      for (const SequenceOutput& o : results.outputs) {
        OutputProcessor output(tokenizer.get(), shared_stop);
        for (int32_t t : o.tokens) output.add(t);
        results.texts.push_back(output.take_text(/*finished=*/true));
      }
    }
  }
  if (!dump.by_prompt.empty()) COHORT_RETURN_IF_ERROR(dump.write(spec.job.output_dir));
  RunFacts facts;
  facts.output_dir = spec.job.output_dir;
  facts.model = model_source(spec.model);
  facts.engine = bundle.engine ? bundle.engine->describe() : "none";
  facts.weights = weights;
  facts.quantize = spec.model.quantize;
  facts.kv_cache_dtype = spec.infer.kv_cache_dtype;
  facts.world = world.size, facts.tp = tp, facts.dp = dp;
  facts.batch_size = infer.batch_size;
  facts.max_new_tokens = infer.max_new_tokens;
  facts.load_s = load_s;
  for (const Prompt& p : prompts) facts.prompt_ids.push_back(p.id_json);
  return gather_and_write_results(*world.cpu, reporter, results, facts);
}

}  // namespace

Status run_infer(const jobs::JobSpec& spec) {
  if (spec.job.kind != jobs::JobKind::kInfer || !spec.has_infer) {
    return invalid_argument(spec.source_path + ": run_infer needs kind = \"infer\" and an [infer] section");
  }
  COHORT_ASSIGN_OR_RETURN(collective::World world, collective::init_from_environment());
  Status status = run(spec, world);
  if (!status.is_ok()) return status.with_context("infer (rank " + std::to_string(world.rank) + ")");
  return status;
}

}  // namespace cohort::infer
