// kind = "serve" (see serve_job.h): set-up, the lockstep generation loop and
// the drain on SIGTERM.
#include "worker/worker_context.h"
#include "base/atomic_file.h"
#include "base/env_knobs.h"
#include "infer/serve_job.h"

#include "hf/model_folder.h"
#include "hf/peft_adapter.h"
#include "hf/peft_config.h"
#include "models/lora.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "collective/bootstrap.h"
#include "infer/engine_setup.h"
#include "infer/model_source.h"
#include "infer/prompts.h"
#include "infer/scheduler.h"
#include "infer/serve/serve_http.h"
#include "infer/serve/serve_metrics.h"
#include "infer/step_budget.h"
#include "infer/serve_step.h"

namespace cohort::infer {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_sigterm{false};
void on_sigterm(int) { g_sigterm = true; }

// Requests and cancellations from the HTTP thread, taken by the loop once a step.
class LoopQueue final : public GenerationQueue {
 public:
  void submit(SequenceRequest request) override {
    std::lock_guard<std::mutex> lock(mu_);
    input_.arrivals.push_back(std::move(request));
    cv_.notify_one();
  }
  void cancel(int64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    input_.cancels.push_back(id);
    cv_.notify_one();
  }
  LoopGauges gauges() const override {
    std::lock_guard<std::mutex> lock(mu_);
    LoopGauges g = gauges_;
    g.waiting += static_cast<int>(input_.arrivals.size());
    return g;
  }
  void set_gauges(const Scheduler& s, int64_t steps) {
    std::lock_guard<std::mutex> lock(mu_);
    gauges_ = LoopGauges{s.running(), s.waiting(), s.kv_used(), s.kv_total(), s.preemptions(), steps,
                         s.prompt_tokens_admitted(), s.prefix_hit_tokens()};
  }
  void change_adapter(AdapterChange change, std::function<void(Status)> done) override {
    std::lock_guard<std::mutex> lock(mu_);
    change.ticket = next_ticket_++;
    answers_[change.ticket] = std::move(done);
    input_.adapter_changes.push_back(std::move(change));
    cv_.notify_one();
  }
  // What arrived since the last call; waits up to `wait` for something.
  StepInput take(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    // Not with no time to wait: a condition variable's wait with a past
    // deadline still gives up and retakes the lock, which cost a busy
    // loop about 80 us a step on a loaded 2-core machine.
    if (wait.count() > 0 && input_.arrivals.empty() && input_.cancels.empty() && input_.adapter_changes.empty()) {
      cv_.wait_for(lock, wait);
    }
    StepInput out = std::move(input_);
    input_ = StepInput{};
    return out;
  }
  // A request refused before the scheduler saw it (its adapter went away):
  // its error event goes out with the step's.
  void reject(int64_t id) { rejected_.push_back(TokenEvent{id, -1, 0, true, "error", {}}); }
  std::vector<TokenEvent> take_rejected() { return std::move(rejected_); }
  // The answer to an adapter change (the loop's thread).
  void answer(int64_t ticket, const Status& status) {
    std::function<void(Status)> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = answers_.find(ticket);
      if (it == answers_.end()) return;
      done = std::move(it->second);
      answers_.erase(it);
    }
    done(status);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  StepInput input_;     // GUARDED_BY(mu_)
  LoopGauges gauges_;   // GUARDED_BY(mu_)
  int64_t next_ticket_ = 1;                                     // GUARDED_BY(mu_)
  std::map<int64_t, std::function<void(Status)>> answers_;     // GUARDED_BY(mu_)
  std::vector<TokenEvent> rejected_;  // the loop's thread only
};

// A PEFT folder as adapters on the engine's model (this rank's shard);
// its new index in *index.
Status load_adapter(models::decode::InferenceEngine& engine, const std::string& folder, int* index) {
  models::Model* base = engine.adapter_base();
  if (!base) return failed_precondition("the " + engine.describe() + " engine takes no adapters at run time");
  COHORT_ASSIGN_OR_RETURN(const hf::PeftAdapterConfig peft, hf::read_peft_config(folder));
  COHORT_ASSIGN_OR_RETURN(auto adapters, models::LoraAdapters::create(*base, peft.lora));
  COHORT_RETURN_IF_ERROR(hf::load_peft_adapter(folder, *adapters));
  *index = engine.add_adapter(std::move(adapters));
  if (*index < 0) return failed_precondition("the " + engine.describe() + " engine refused " + folder + " (see the log)");
  return Status::ok();
}

// Every rank makes the step's adapter changes in order, agreeing on each
// load (a folder one rank cannot read is undone on all); the results, in
// order, go to rank 0's answers.
Result<std::vector<Status>> apply_adapter_changes(std::vector<AdapterChange>& changes,
                                                  models::decode::InferenceEngine& engine, const Scheduler& scheduler,
                                                  collective::World& world) {
  std::vector<Status> results;
  for (AdapterChange& c : changes) {
    if (!c.load) {
      if (scheduler.uses_adapter(c.index)) {
        results.push_back(failed_precondition("adapter '" + c.name + "' is in use; unload it once its requests end"));
      } else {
        engine.remove_adapter(c.index);
        results.push_back(Status::ok());
      }
      continue;
    }
    Status status = load_adapter(engine, c.folder, &c.index);
    if (world.size > 1) {
      float ok = status.is_ok() ? 1.0f : 0.0f;
      collective::AllReduceOptions options;
      options.op = collective::ReduceOp::kMin;
      COHORT_RETURN_IF_ERROR(world.cpu->all_reduce(&ok, 1, collective::DType::kF32, options));
      if (ok == 0.0f && status.is_ok()) {
        engine.remove_adapter(c.index);
        status = failed_precondition("another rank could not load " + c.folder);
      }
    }
    results.push_back(status);
  }
  return results;
}

struct ServeSetup {
  models::ModelConfig config;
  int context = 0;
  std::shared_ptr<text::Tokenizer> tokenizer;
  std::vector<int32_t> eos;
  std::shared_ptr<const hf::ChatFormat> chat;  // null: ChatML
  std::shared_ptr<const text::TokenVocabulary> vocabulary;  // structured output's; null without a tokenizer
};

Result<ServeSetup> prepare(const jobs::JobSpec& spec) {
  ServeSetup s;
  COHORT_ASSIGN_OR_RETURN(s.config, worker::resolve_model_config(spec.model));
  // A slot's context caps one sequence; by default the cache holds
  // max_running of them, so the default stays modest even for 40k-position
  // models.
  s.context = spec.serve.context > 0 ? spec.serve.context : std::min(s.config.max_seq, 4096);
  if (s.context > s.config.max_seq) {
    return invalid_argument("serve.context: " + std::to_string(s.context) + " is longer than the model's max_seq " +
                            std::to_string(s.config.max_seq) + " (raise [model] max_seq)");
  }
  if (spec.serve.kv_cache_tokens > 0 && spec.serve.kv_cache_tokens < s.context) {
    return invalid_argument("serve.kv_cache_tokens: " + std::to_string(spec.serve.kv_cache_tokens) +
                            " is less than one sequence's context " + std::to_string(s.context) +
                            " (the model's max_seq, at most 4096); raise it or set serve.context lower");
  }
  COHORT_ASSIGN_OR_RETURN(auto tokenizer, open_tokenizer(spec.model, s.config));
  s.tokenizer = std::move(tokenizer);
  s.eos = model_eos_tokens(spec.model, s.tokenizer.get());
  if (s.tokenizer) s.vocabulary = text::TokenVocabulary::build(*s.tokenizer, s.eos);
  if (!spec.model.hf_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(hf::ModelFolder folder, hf::ModelFolder::open(spec.model.hf_dir));
    s.chat = folder.chat();
  }
  return s;
}

// The URL, logged and written to output_dir/endpoint.json for tests and tools.
Status announce(const jobs::JobSpec& spec, int port) {
  const std::string host = spec.serve.host.find(':') != std::string::npos ? "[" + spec.serve.host + "]" : spec.serve.host;
  const std::string url = "http://" + host + ":" + std::to_string(port);
  spdlog::info("serve: listening on {}/v1 (model '{}'{})", url, spec.serve.model_name,
               spec.serve.api_key.empty() ? ", no API key" : ", API key required");
  std::error_code ec;
  std::filesystem::create_directories(spec.job.output_dir, ec);
  const auto path = std::filesystem::path(spec.job.output_dir) / "endpoint.json";
  return write_file_atomically(
      path.string(),
      nlohmann::json({{"url", url + "/v1"}, {"port", port}, {"model", spec.serve.model_name}}).dump() + "\n");
}

// Rank 0's loop: take what arrived, share it, step, hand the tokens to HTTP.
// Rank 0's part of a step's adapter changes before they go to the others:
// a load whose name is taken, or an unload of a name nobody serves, is
// answered at once and dropped; an unload learns its engine index.
// The most adapters a server holds at once (as [serve.adapters] allows):
// each is a copy of low-rank weights on every rank.
constexpr size_t kMaxServedAdapters = 64;

void resolve_adapter_changes(StepInput& input, LoopQueue& queue, const AdapterNames& names) {
  std::vector<AdapterChange> kept;
  std::vector<std::string> loading;
  size_t unloading = 0;
  for (AdapterChange& c : input.adapter_changes) {
    const std::optional<int> index = names.find(c.name);
    const bool taken = index || std::find(loading.begin(), loading.end(), c.name) != loading.end();
    if (c.load && taken) {
      queue.answer(c.ticket, failed_precondition("adapter '" + c.name + "' is already loaded"));
      continue;
    }
    if (c.load && names.size() + loading.size() - unloading >= kMaxServedAdapters) {
      queue.answer(c.ticket, failed_precondition(std::to_string(kMaxServedAdapters) +
                                                 " adapters are loaded, the most a server holds; unload one first"));
      continue;
    }
    if (!c.load && index) ++unloading;
    if (!c.load && !index) {
      queue.answer(c.ticket, not_found("no adapter '" + c.name + "' is loaded"));
      continue;
    }
    if (c.load) loading.push_back(c.name);
    if (!c.load) c.index = *index;
    kept.push_back(std::move(c));
  }
  input.adapter_changes = std::move(kept);
  // A request parsed while its adapter was still served, which is gone.
  std::vector<SequenceRequest> arrivals;
  for (SequenceRequest& r : input.arrivals) {
    if (r.adapter >= 0 && !names.serves(r.adapter)) {
      queue.reject(r.id);
      continue;
    }
    arrivals.push_back(std::move(r));
  }
  input.arrivals = std::move(arrivals);
}

Status lead(const jobs::JobSpec& spec, collective::World& world, Scheduler& scheduler, LoopQueue& queue,
            ServeHttp& http, const ServeSetup& setup, models::decode::InferenceEngine& engine,
            AdapterNames& names) {
  int64_t steps = 0;
  bool draining = false, cut_short = false;
  StepBudget budget(spec.serve.itl_target_ms / 1000.0);
  ServeLoopStats loop_stats;
  // A drain ends a second before the agent's SIGKILL, so that the job still
  // exits by itself (and says what it cut short).
  const auto grace = std::chrono::duration<double>(std::max(0.5, spec.job.stop_grace_s - 1.0));
  Clock::time_point deadline;
  while (true) {
    if (g_sigterm && !draining) {
      draining = true;
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(grace);
      http.set_state(ServeState::kDraining);
      spdlog::info("serve: stop requested: draining {} request(s) within {:.1f} s; new ones get 503",
                   http.live(), grace.count());
    }
    if (draining && !cut_short && Clock::now() > deadline) {
      cut_short = true;
      spdlog::warn("serve: {} request(s) still running after {:.1f} s of draining; cancelling them",
                   http.live(), grace.count());
      http.cancel_all();
    }
    const bool idle = scheduler.idle();
    Clock::time_point iteration = Clock::now();
    StepInput input = queue.take(idle ? std::chrono::milliseconds(50) : std::chrono::milliseconds(0));
    if (idle) iteration = Clock::now();  // not the wait for requests
    // Draining ends once nothing is in flight: the HTTP side refuses new
    // requests, so live() only falls.
    input.stop = draining && http.live() == 0 && input.arrivals.empty() && scheduler.idle();
    input.prompt_cap = budget.prompt_cap();
    resolve_adapter_changes(input, queue, names);
    if (world.size > 1) COHORT_RETURN_IF_ERROR(broadcast_step_input(*world.cpu, &input, setup.tokenizer.get(), {}));
    COHORT_ASSIGN_OR_RETURN(const std::vector<Status> changed,
                            apply_adapter_changes(input.adapter_changes, engine, scheduler, world));
    for (size_t i = 0; i < changed.size(); ++i) {
      const AdapterChange& c = input.adapter_changes[i];
      if (changed[i].is_ok()) {
        if (c.load) names.add(c.name, c.index);
        else names.remove(c.name);
        spdlog::info("serve: adapter '{}' {}", c.name, c.load ? "loaded from " + c.folder : std::string("unloaded"));
      }
      queue.answer(c.ticket, changed[i]);
    }
    std::vector<TokenEvent> rejected = queue.take_rejected();
    apply_step_input(input, scheduler, setup.tokenizer.get(), {}, &rejected, setup.vocabulary);
    if (input.stop) break;
    std::vector<TokenEvent> events;
    StepStats stats;
    if (!scheduler.idle()) {
      events = scheduler.step(&stats, input.prompt_cap);
      budget.observe(stats.decode_rows, stats.prefill_tokens, stats.prefill_s + stats.decode_s);
    }
    if (!events.empty() || !rejected.empty()) {
      events.insert(events.end(), rejected.begin(), rejected.end());
      ++steps;
      http.deliver(std::move(events));
    }
    queue.set_gauges(scheduler, steps);
    if (stats.decode_rows > 0 || stats.prefill_tokens > 0) {
      loop_stats.observe(stats.decode_rows, stats.prefill_tokens, stats.prefill_s + stats.decode_s,
                         std::chrono::duration<double>(Clock::now() - iteration).count());
    }
  }
  for (const std::string& line : loop_stats.closing_lines(budget)) spdlog::info("serve: {}", line);
  return Status::ok();
}

// Other ranks: the same inputs, the same steps, nothing to hand out.
Status follow(collective::World& world, Scheduler& scheduler, const ServeSetup& setup,
              models::decode::InferenceEngine& engine) {
  while (true) {
    StepInput input;
    COHORT_RETURN_IF_ERROR(broadcast_step_input(*world.cpu, &input, setup.tokenizer.get(), {}));
    auto changed = apply_adapter_changes(input.adapter_changes, engine, scheduler, world);
    if (!changed.is_ok()) return changed.status();
    std::vector<TokenEvent> rejected;
    apply_step_input(input, scheduler, setup.tokenizer.get(), {}, &rejected, setup.vocabulary);
    if (input.stop) return Status::ok();
    if (!scheduler.idle()) scheduler.step(nullptr, input.prompt_cap);
  }
}

Status run(const jobs::JobSpec& spec, collective::World& world) {
  const jobs::ServeSection& serve = spec.serve;
  if (serve.tensor_parallel > 0 && serve.tensor_parallel != world.size) {
    return invalid_argument("serve.tensor_parallel = " + std::to_string(serve.tensor_parallel) +
                            " must equal the job's " + std::to_string(world.size) + " ranks");
  }
  // Read before anything loads, so that a bad value costs no model load.
  COHORT_ASSIGN_OR_RETURN(const bool run_ahead, run_ahead_switch());
  COHORT_ASSIGN_OR_RETURN(ServeSetup setup, prepare(spec));
  ServeMetrics metrics;
  LoopQueue queue;
  std::unique_ptr<ServeHttp> http;
  std::shared_ptr<AdapterNames> adapter_names;  // rank 0's, shared with the HTTP side
  if (world.rank == 0) {
    ServeHttpOptions o;
    o.host = serve.host == "localhost" ? "127.0.0.1" : serve.host;
    o.port = serve.port;
    o.api_key = serve.api_key;
    o.max_connections = serve.max_connections;
    o.max_body_bytes = serve.max_body_bytes;
    o.max_live = serve.max_running + serve.max_queue;
    o.defaults.max_choices = o.max_live;
    o.defaults.model_name = serve.model_name;
    int index = 0;  // the engine loads them in the table's order
    for (const auto& entry : serve.adapters) o.defaults.adapters->add(entry.first, index++);
    adapter_names = o.defaults.adapters;
    o.defaults.max_tokens = serve.max_tokens;
    o.defaults.sampling = models::SamplingParams{static_cast<float>(serve.temperature), serve.top_k,
                                                 static_cast<float>(serve.top_p), static_cast<uint64_t>(serve.seed)};
    o.defaults.context = setup.context;
    o.defaults.vocab_size = setup.config.vocab_size;
    o.defaults.chat = setup.chat;
    if (serve.tool_parser == "auto") {
      o.defaults.tool_format = detect_tool_call_format(setup.chat ? setup.chat->source() : "");
    } else {
      COHORT_ASSIGN_OR_RETURN(o.defaults.tool_format, parse_tool_call_format(serve.tool_parser));
    }
    spdlog::info("serve: tool calls are read in the {} format", to_string(o.defaults.tool_format));
    o.tokenizer = setup.tokenizer;
    o.eos = setup.eos;
    o.vocabulary = setup.vocabulary;
    COHORT_ASSIGN_OR_RETURN(http, ServeHttp::start(std::move(o), &queue, &metrics));
    COHORT_RETURN_IF_ERROR(announce(spec, http->port()));
  }
  // The engine as the infer job builds it, with [serve]'s seed and graphs.
  jobs::JobSpec engine_spec = spec;
  engine_spec.infer.seed = serve.seed;
  engine_spec.infer.cuda_graphs = serve.cuda_graphs;
  const auto t0 = Clock::now();
  COHORT_ASSIGN_OR_RETURN(EngineBundle bundle,
                          build_engine(engine_spec, setup.config, world, world.size, serve.max_running, setup.context,
                                       serve.kv_cache_tokens, serve.gpu_memory_fraction));
  SchedulerOptions so;
  so.max_batched_tokens = serve.max_batched_tokens;
  so.run_ahead = run_ahead;
  Scheduler scheduler(*bundle.engine, so);
  if (world.rank == 0) {
    std::map<std::string, int> by_format;
    const auto formats = weight_formats(spec.model, setup.config, &by_format);  // the load above read the same headers
    metrics.set_model(by_format, serve.kv_cache_dtype);
    spdlog::info("serve: {} from {} (weights {}) ready in {:.2f} s: tp {}, {} slots of {} positions, KV cache "
                 "of {} positions, queue {}",
                 bundle.engine->describe(), model_source(spec.model),
                 formats.is_ok() ? *formats : formats.status().message(),
                 std::chrono::duration<double>(Clock::now() - t0).count(), world.size, serve.max_running,
                 setup.context, scheduler.kv_total(), serve.max_queue);
    http->set_state(ServeState::kReady);
    COHORT_RETURN_IF_ERROR(lead(spec, world, scheduler, queue, *http, setup, *bundle.engine, *adapter_names));
    // The last responses may still be leaving; give them a moment.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (http->responding() > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (http->responding() > 0) {
      spdlog::warn("serve: {} response(s) still being sent after the drain; closing them", http->responding());
    }
    spdlog::info("serve: drained; stopping");
    return Status::ok();
  }
  return follow(world, scheduler, setup, *bundle.engine);
}

}  // namespace

Status run_serve(const jobs::JobSpec& spec) {
  if (spec.job.kind != jobs::JobKind::kServe) {
    return invalid_argument(spec.source_path + ": run_serve needs kind = \"serve\"");
  }
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);  // Ctrl-C on a worker started by hand drains the same way
  COHORT_ASSIGN_OR_RETURN(collective::World world, collective::init_from_environment());
  Status status = run(spec, world);
  if (!status.is_ok()) return status.with_context("serve (rank " + std::to_string(world.rank) + ")");
  return status;
}

}  // namespace cohort::infer
