// The agent daemon: registration, heartbeats, orders, forwarding.
#include "agent/agent.h"

#include <algorithm>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <map>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/coordinator_contact.h"
#include "agent/coordinator_probe.h"
#include "agent/log_forwarder.h"
#include "agent/metrics_tail.h"
#include "agent/node_address.h"
#include "agent/supervisor.h"
#include "protocol/codec.h"
#include "protocol/input_log.h"
#include "protocol/transport.h"

namespace cohort::agent {
namespace {

namespace asio = boost::asio;
using namespace protocol;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

class AgentImpl final : public Agent {
 public:
  AgentImpl(asio::io_context& io, AgentOptions options)
      : io_(io), options_(std::move(options)),
        clock_(options_.clock ? *options_.clock : SystemClock::instance()),
        heartbeat_timer_(io), poll_timer_(io), interval_(options_.heartbeat_interval), contact_(clock_) {}

  ~AgentImpl() override { *alive_ = false; }

  Status open() {
    if (options_.name.empty()) options_.name = host_name();
    COHORT_ASSIGN_OR_RETURN(address_, choose_node_address(options_.coordinator, options_.address,
                                                          options_.interface));
    COHORT_RETURN_IF_ERROR(resolve_worker_binary(&options_.worker_binary));
    COHORT_ASSIGN_OR_RETURN(auto gpus, options_.prober->probe());
    if (gpus.empty()) {
      return failed_precondition("no GPU found on this node (no NVML, no nvidia-smi answer): "
                                 "pass --cpu-slots N to run N CPU workers, or --fake-gpus N for tests");
    }
    bool cpu = true;
    for (const auto& g : gpus) {
      gpus_.push_back({g.index, g.uuid, g.pci_bus_id, g.name, g.memory_bytes});
      cpu = cpu && is_cpu_slot(g);
    }
    SupervisorOptions so{options_.name, options_.worker_binary, cpu, "127.0.0.1", options_.port_range};
    if (!is_loopback_address(address_.address)) {
      so.node_address = address_.address;
      so.node_interface = address_.interface;
      so.node_network_named = address_.named;
    }
    std::weak_ptr<bool> alive = alive_;
    auto forward = [this, alive](StoreRequest r, std::function<void(Result<StoreReply>)> done) {
      asio::post(io_, [this, alive, r = std::move(r), done = std::move(done)]() mutable {
        if (!alive.lock()) return done(aborted("the agent is shutting down"));
        forward_store(std::move(r), std::move(done));
      });
    };
    forwarder_ = std::make_shared<LogForwarder>(clock_, options_.log_limits);
    SupervisorSink sink{
        [forwarder = forwarder_](const std::string& job, LogLine line) { forwarder->add(job, std::move(line)); },
        [this](WorkerExit exit) { send_exit(std::move(exit)); },
        [this](WorkersStarted started) { send(encode(started)); }};
    supervisor_ = std::make_unique<Supervisor>(io_, *options_.launcher, clock_, so, forward, sink);
    auto context = options_.zmq_context ? options_.zmq_context : make_zmq_context();
    COHORT_ASSIGN_OR_RETURN(dealer_, DealerEndpoint::connect(io_, context, options_.coordinator,
                                                             options_.security,
                                                             [this](std::string payload) {
                                                               on_message(std::move(payload));
                                                             }));
    dealer_->set_disconnect_handler([this, alive = std::weak_ptr<bool>(alive_)] {
      if (auto a = alive.lock(); a && *a) contact_.coordinator_gone();
    });
    spdlog::info("agent {} ({} {}) connecting to {}; address {}{} ({})", options_.name, gpus_.size(),
                 cpu ? "CPU slots" : "GPUs", options_.coordinator, address_.address,
                 address_.interface.empty() ? "" : " on " + address_.interface, address_.how);
    send_register();
    arm_heartbeat();
    arm_poll();
    return Status::ok();
  }

  const std::string& name() const override { return options_.name; }
  const std::string& address() const override { return address_.address; }
  size_t live_workers() const override { return supervisor_->live_workers(); }

  // Leaving is a drain, not a failure: the coordinator hears it first (on
  // the same connection, so before any of the exits it causes), stops the
  // attempts running here and places nothing more on this node; launch
  // orders that cross on the way are refused; once the workers are gone the
  // node is reported as left.
  void shutdown(std::function<void()> done) override {
    if (!leaving_) {
      leaving_ = true;
      spdlog::info("agent {}: leaving the cluster: stopping {} worker(s), taking no new work",
                   options_.name, supervisor_->live_workers());
      send(encode(NodeLeaving{options_.name, "its agent is shutting down"}));
      supervisor_->stop_all("the agent is shutting down");
    }
    shutdown_done_ = std::move(done);
  }

 private:
  bool send(const std::string& payload) {
    auto s = dealer_->send(payload);
    // While the coordinator is silent, watch_contact() says why, once; in
    // contact a drop is said at most every 5 s, with how many there were.
    if (!s && contact_.state() == ContactState::kInContact) {
      ++unsaid_drops_;
      if (clock_.now() - last_drop_warning_ >= std::chrono::seconds(5)) {
        spdlog::warn("agent: {}{}", s.message(),
                     unsaid_drops_ > 1 ? fmt::format(" ({} messages dropped since the last warning)", unsaid_drops_)
                                       : "");
        unsaid_drops_ = 0;
        last_drop_warning_ = clock_.now();
      }
    }
    return s.is_ok();
  }

  // Registrations and heartbeats carry an id: their answers renew the lease.
  void send_tracked(const std::string& payload, uint64_t id) {
    if (send(payload)) contact_.sent(id);
  }

  void send_register() {
    RegisterNode m{options_.name, address_.address, gpus_, supervisor_->running(), fenced_, fence_reason_};
    last_register_ = clock_.now();
    uint64_t id = next_id_++;
    send_tracked(encode(m, id), id);
    // A coordinator that restarted meanwhile hears again that this node is leaving.
    if (leaving_) send(encode(NodeLeaving{options_.name, "its agent is shutting down"}));
  }

  void arm_heartbeat() {
    heartbeat_timer_.expires_after(interval_);
    heartbeat_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (ec || !*alive) return;
      uint64_t id = next_id_++;
      send_tracked(encode(Heartbeat{options_.name, supervisor_->running()}, id), id);
      arm_heartbeat();
    });
  }

  void arm_poll() {
    poll_timer_.expires_after(options_.poll_interval);
    poll_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
      if (ec || !*alive) return;
      watch_contact();
      send_lines();
      supervisor_->check_progress();
      forward_metrics();
      report_gpus();
      expire_store_requests();
      if (shutdown_done_ && supervisor_->live_workers() == 0) {
        send_lines();
        send(encode(NodeLeft{options_.name}));
        spdlog::info("agent {}: every worker has stopped; left the cluster", options_.name);
        auto done = std::move(shutdown_done_);
        shutdown_done_ = nullptr;
        done();
        return;
      }
      arm_poll();
    });
  }

  void on_message(std::string payload) {
    auto e = decode(payload);
    if (!e) return (void)warn_bad_input("agent: bad message from the coordinator: " + e.status().message());
    if (e->type == LaunchOrder::kType) {
      auto m = body_as<LaunchOrder>(*e);
      if (!m) return spdlog::warn("agent: {}", m.status().message());
      if (contact_.state() == ContactState::kFenced) {
        // Sent before the cut-off, perhaps for an attempt replaced since.
        return spdlog::warn("agent {}: ignored the launch of job {} attempt {}: this node stopped its "
                            "workers when the coordinator fell silent, and takes orders once it answers",
                            options_.name, m->job_id, m->attempt);
      }
      if (leaving_) {
        spdlog::info("agent {}: not starting job {} attempt {}: the agent is leaving", options_.name, m->job_id,
                     m->attempt);
        return supervisor_->refuse(*m, "not started: the agent on " + options_.name + " is leaving the cluster");
      }
      supervisor_->launch(*m);
      // Rank 0's node forwards the training figures (metrics_tail.h).
      const protocol::JobControl* job = supervisor_->job_of(m->job_id, m->attempt);
      if (job && job->kind == jobs::JobKind::kTrain && m->node_rank == 0) {
        metric_tails_.try_emplace({m->job_id, m->attempt}, job->output_dir, m->attempt);
      }
    } else if (e->type == StopOrder::kType) {
      auto m = body_as<StopOrder>(*e);
      if (!m) return spdlog::warn("agent: {}", m.status().message());
      supervisor_->stop(m->job_id, m->attempt, m->reason);
    } else if (e->type == RegisterAck::kType) {
      auto m = body_as<RegisterAck>(*e);
      if (!m) return spdlog::warn("agent: {}", m.status().message());
      if (m->heartbeat_interval_ms > 0) interval_ = std::chrono::milliseconds(m->heartbeat_interval_ms);
      if (options_.fence) {
        contact_.set_lease(interval_, std::chrono::milliseconds(std::max<int64_t>(0, m->heartbeat_timeout_ms)),
                           std::chrono::milliseconds(std::max<int64_t>(0, m->recovery_grace_ms)));
      }
      bool back = contact_.state() != ContactState::kConnecting;
      on_answer(e->id);
      fenced_.clear();
      fence_reason_.clear();
      spdlog::info("agent {} {} with the coordinator as {}", options_.name,
                   back ? "registered again" : "registered", address_.address);
    } else if (e->type == Ack::kType) {
      if (lines_in_flight_.erase(e->id)) return send_lines();
      on_answer(e->id);
    } else if (e->type == StoreReply::kType || e->type == ErrorReply::kType) {
      auto it = pending_store_.find(e->id);
      if (it != pending_store_.end()) {
        auto done = std::move(it->second.done);
        pending_store_.erase(it);
        if (e->type == StoreReply::kType) {
          auto m = body_as<StoreReply>(*e);
          return m ? done(*m) : done(m.status());
        }
        auto m = body_as<ErrorReply>(*e);
        return done(m ? error_status(*m) : m.status());
      }
      if (e->type == ErrorReply::kType) on_error(*e);
    }
  }

  void on_error(const Envelope& e) {
    auto m = body_as<ErrorReply>(e);
    if (!m) return;
    // "node_taken": this node's name is held by a connection the coordinator
    // has not yet declared lost (this agent's previous run): retry, as below.
    if (m->code == "unknown_node" || m->code == "node_taken") {
      // Re-register at most once a second: queued heartbeats all get this reply.
      if (clock_.now() - last_register_ > std::chrono::seconds(1)) {
        spdlog::info("agent {}: the coordinator does not know this node; registering again",
                     options_.name);
        send_register();
      }
      return;
    }
    spdlog::warn("agent: coordinator says: {}: {}", m->code, m->message);
  }

  // An Ack or RegisterAck: the coordinator answered request `id`.
  void on_answer(uint64_t id) {
    ContactState before = contact_.state();
    if (!contact_.answered(id)) return;
    // Said only where the silence was: a warning, or workers stopped.
    if ((before == ContactState::kSilent && !last_logged_cause_.empty()) || before == ContactState::kFenced) {
      double s = std::chrono::duration<double>(contact_.last_outage()).count();
      spdlog::info("agent {}: the coordinator answers again after {:.1f} s{}", options_.name, s,
                   before == ContactState::kFenced ? "; this node had stopped its workers (self-fencing)" : "");
      fenced_.clear();  // if it never lost this node, the workers' exits said why
      fence_reason_.clear();
    }
    last_logged_cause_.clear();
    if (before != ContactState::kInContact) {
      // Batches unanswered when contact broke may never have arrived: again
      // now (the coordinator skips the ones it already has).
      for (auto& [batch_id, f] : lines_in_flight_) f.sent_at = Clock::TimePoint{};
      send_lines();
    }
  }

  // Time-driven: silence, the lease, probes of the coordinator's port.
  void watch_contact() {
    if (contact_.update() && contact_.state() == ContactState::kFenced) fence();
    if (probing_ || !contact_.probe_due(last_probe_)) return;
    probing_ = true;
    last_probe_ = clock_.now();
    probe_coordinator(io_, options_.coordinator, options_.probe_timeout, [this, alive = std::weak_ptr<bool>(alive_)](Probe p) {
      if (!alive.lock()) return;
      probing_ = false;
      on_probe(p);
    });
  }

  void on_probe(const Probe& probe) {
    if (probe.result == ProbeResult::kRefused) contact_.coordinator_gone();
    if (contact_.state() == ContactState::kInContact) return;  // it answered meanwhile
    std::string handshake = dealer_->handshake_problem();
    last_silence_ = describe_silence(options_.coordinator, probe, handshake);
    // Said once per cause (not per OS wording: a timeout and "no route"
    // alternate), again every 30 s while it lasts; a normal start takes well
    // under the 2 s before the first word.
    auto now = clock_.now();
    if (contact_.silence() < std::chrono::seconds(2)) return;
    std::string cause = std::string(to_string(probe.result)) + "|" + handshake;
    if (cause == last_logged_cause_ && now - last_silence_log_ < std::chrono::seconds(30)) return;
    last_logged_cause_ = cause;
    last_silence_log_ = now;
    double silent_s = std::chrono::duration<double>(contact_.silence()).count();
    std::string consequence;
    if (contact_.state() == ContactState::kSilent && supervisor_->live_workers() > 0) {
      auto left = contact_.lease_left();
      if (left != Clock::Duration::max()) {
        consequence = fmt::format("; its {} worker(s) stop in {:.1f} s unless the coordinator answers",
                                  supervisor_->live_workers(),
                                  std::max(0.0, std::chrono::duration<double>(left).count()));
      }
    }
    spdlog::warn("agent {}: no answer from the coordinator for {:.1f} s: {}{}", options_.name, silent_s,
                 last_silence_, consequence);
  }

  void fence() {
    using Seconds = std::chrono::duration<double>;
    std::string reason = fmt::format(
        "no answer from the coordinator at {} for {:.1f} s (its heartbeat_timeout is {:.1f} s){}: workers "
        "stopped so that an attempt the coordinator has replaced never runs twice (self-fencing)",
        options_.coordinator, Seconds(contact_.silence()).count(), Seconds(contact_.heartbeat_timeout()).count(),
        last_silence_.empty() ? "" : "; " + last_silence_);
    auto stopped = supervisor_->fence(reason);
    if (stopped.empty()) return;
    spdlog::error("agent {}: stopping {} worker(s): {}", options_.name, stopped.size(), reason);
    constexpr size_t kMaxFenced = 1024;  // reported at the next registration
    for (auto& w : stopped) {
      if (fenced_.size() < kMaxFenced) fenced_.push_back(std::move(w));
    }
    fence_reason_ = reason;
  }

  void forward_store(StoreRequest r, std::function<void(Result<StoreReply>)> done) {
    uint64_t id = next_id_++;
    // The coordinator answers blocking requests itself when they time out;
    // this deadline only covers a coordinator that never answers.
    auto budget = std::chrono::milliseconds(std::max<int64_t>(r.timeout_ms, 300000)) + std::chrono::seconds(30);
    pending_store_[id] = {std::move(done), clock_.now() + budget};
    send(encode(r, id));
  }

  void expire_store_requests() {
    auto now = clock_.now();
    for (auto it = pending_store_.begin(); it != pending_store_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      auto done = std::move(it->second.done);
      it = pending_store_.erase(it);
      done(unavailable("the coordinator did not answer a store request"));
    }
  }

  // Log batches go out only while the coordinator answers, at most
  // kLogBatchesInFlight unanswered at a time: the transport's queue (shared
  // with heartbeats and exits, 64 messages) then never holds more than that
  // many batches of log lines ahead of a control message. A batch
  // unanswered for kLogResendAfter goes again under the same id (the
  // coordinator skips ids it has taken); after kLogMaxSends it counts as a
  // gap (log_forwarder.h).
  static constexpr size_t kLogBatchesInFlight = 4;
  static constexpr auto kLogResendAfter = std::chrono::seconds(5);
  static constexpr int kLogMaxSends = 6;
  static constexpr size_t kLogBatchesAtExit = 4;

  void send_lines() {
    if (contact_.state() != ContactState::kInContact) return;
    auto now = clock_.now();
    for (auto it = lines_in_flight_.begin(); it != lines_in_flight_.end();) {
      auto& f = it->second;
      if (now - f.sent_at < kLogResendAfter) {
        ++it;
        continue;
      }
      if (f.sends >= kLogMaxSends) {
        spdlog::warn("agent {}: {} log lines of job {} were not taken by the coordinator after {} sends; "
                     "reported as a gap", options_.name, f.batch.lines.size(), f.batch.job_id, f.sends);
        forwarder_->lost(f.batch);
        it = lines_in_flight_.erase(it);
        continue;
      }
      f.sent_at = now;
      ++f.sends;
      (void)send(encode(f.batch, it->first));
      ++it;
    }
    while (lines_in_flight_.size() < kLogBatchesInFlight) {
      auto batch = forwarder_->take_batch();
      if (!batch) break;
      uint64_t id = next_id_++;
      std::string payload = encode(*batch, id);
      lines_in_flight_[id] = InFlightLines{std::move(*batch), now, 1};
      (void)send(payload);
    }
  }

  // New metrics.jsonl rows of the attempts whose rank 0 runs here; a tail
  // whose attempt has ended is read once more, then dropped.
  void forward_metrics() {
    double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (auto it = metric_tails_.begin(); it != metric_tails_.end();) {
      const auto& [job, attempt] = it->first;
      bool running = supervisor_->runs(job, attempt);
      constexpr size_t kMaxRows = 500;  // a batch stays far below the message cap
      MetricBatch batch{job, attempt, options_.name, it->second.read(now, kMaxRows), 0, -1};
      batch.total_steps = it->second.total_steps();
      batch.eta_s = it->second.eta_s();
      bool more = batch.rows.size() == kMaxRows;
      if (!batch.rows.empty()) send(encode(batch));
      it = running || more ? std::next(it) : metric_tails_.erase(it);
    }
  }

  void report_gpus() {
    if (clock_.now() - last_gpu_report_ < std::chrono::seconds(2)) return;
    last_gpu_report_ = clock_.now();
    GpuReport report{options_.name, {}};
    for (const auto& u : options_.prober->sample()) report.samples.push_back({u.index, u.utilization, u.memory_used_bytes, ""});
    // An unhealthy GPU rides on its sample (one of its own where it has none),
    // in every report while it lasts; the log says it when it changes.
    std::map<int, std::string> faults;
    for (const auto& f : options_.prober->health()) {
      auto it = std::find_if(report.samples.begin(), report.samples.end(),
                             [&](const protocol::GpuSample& s) { return s.index == f.index; });
      if (it == report.samples.end()) it = report.samples.insert(report.samples.end(), protocol::GpuSample{f.index, 0, 0, ""});
      it->fault = f.reason;
      if (gpu_faults_[f.index] != f.reason) spdlog::warn("agent {}: GPU {} is unhealthy: {}", options_.name, f.index, f.reason);
      faults[f.index] = f.reason;
    }
    gpu_faults_ = std::move(faults);
    if (!report.samples.empty()) send(encode(report));
  }

  void send_exit(WorkerExit exit) {
    // The lines go first: the window's worth, and up to kLogBatchesAtExit
    // more of this job beyond it (so `cohort run` and `submit --wait` show
    // a job's last lines before its end); an exit never waits for a job's
    // flood of output beyond that.
    send_lines();
    if (contact_.state() == ContactState::kInContact) {
      for (size_t i = 0; i < kLogBatchesAtExit; ++i) {
        auto batch = forwarder_->take_batch(exit.job_id);
        if (!batch) break;
        uint64_t id = next_id_++;
        std::string payload = encode(*batch, id);
        lines_in_flight_[id] = InFlightLines{std::move(*batch), clock_.now(), 1};
        (void)send(payload);
      }
    }
    send(encode(exit));
  }

  struct InFlightLines {
    LogBatch batch;
    Clock::TimePoint sent_at;
    int sends = 0;
  };

  struct PendingStore {
    std::function<void(Result<StoreReply>)> done;
    Clock::TimePoint deadline;
  };

  asio::io_context& io_;
  AgentOptions options_;
  const Clock& clock_;
  std::vector<GpuDesc> gpus_;
  std::unique_ptr<Supervisor> supervisor_;
  NodeAddress address_;
  std::unique_ptr<DealerEndpoint> dealer_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer poll_timer_;
  std::chrono::milliseconds interval_;
  Clock::TimePoint last_register_{};
  uint64_t unsaid_drops_ = 0;  // sends that failed since the last warning
  Clock::TimePoint last_drop_warning_{};
  std::shared_ptr<LogForwarder> forwarder_;        // shared with the launcher's threads
  std::map<uint64_t, InFlightLines> lines_in_flight_;  // by envelope id
  std::map<uint64_t, PendingStore> pending_store_;
  std::map<std::pair<std::string, int>, MetricsTail> metric_tails_;  // (job, attempt)
  Clock::TimePoint last_gpu_report_{};
  std::map<int, std::string> gpu_faults_;  // by GPU index, as last reported
  uint64_t next_id_ = 1;  // envelope ids of store requests, heartbeats and registrations
  std::function<void()> shutdown_done_;
  CoordinatorContact contact_;
  bool probing_ = false;
  Clock::TimePoint last_probe_{};
  std::string last_silence_;         // what the last probe said, for the fencing reason
  std::string last_logged_cause_;  // the cause last logged (probe result and handshake problem)
  Clock::TimePoint last_silence_log_{};
  std::vector<RunningWorker> fenced_;  // stopped while cut off, for the next registration
  std::string fence_reason_;
  bool leaving_ = false;  // shutdown() was called: no new work
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace

Result<std::unique_ptr<Agent>> Agent::start(asio::io_context& io, AgentOptions options) {
  if (!options.prober || !options.launcher) {
    return invalid_argument("agent needs a GPU prober and a process launcher");
  }
  auto agent = std::make_unique<AgentImpl>(io, std::move(options));
  COHORT_RETURN_IF_ERROR(agent->open());
  return std::unique_ptr<Agent>(std::move(agent));
}

Status resolve_worker_binary(std::string* path) {
  if (path->empty()) {
    *path = default_worker_binary();
    if (path->empty()) {
      // Command jobs still run; train, infer and serve jobs fail at launch
      // with the same advice.
      spdlog::info("agent: no cohort-worker beside this program; train, infer and serve jobs need "
                   "--worker-binary PATH on this node");
      return Status::ok();
    }
  } else if (::access(path->c_str(), X_OK) != 0) {
    return failed_precondition("--worker-binary " + *path + ": " + std::strerror(errno) +
                               " (the path of cohort-worker on this node)");
  }
  spdlog::info("agent: built-in worker {}", *path);
  return Status::ok();
}

std::string default_worker_binary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  auto candidate = self.parent_path() / "cohort-worker";
  return std::filesystem::exists(candidate, ec) ? candidate.string() : "";
}

}  // namespace cohort::agent
