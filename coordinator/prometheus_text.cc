#include "coordinator/prometheus_text.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "base/prometheus_text.h"

namespace cohort::coordinator {
namespace {

void cluster_series(PrometheusText& e, const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes) {
  std::map<std::string, int> node_states{{"alive", 0}, {"draining", 0}, {"drained", 0}, {"left", 0}, {"lost", 0}};
  int gpus = 0, free = 0;
  for (const auto& n : nodes) {
    ++node_states[n.state];
    if (n.state == "alive") {
      gpus += int(n.gpus.size());
      free += n.gpus_free;
    }
  }
  std::map<std::string, int> job_states{{"queued", 0},    {"running", 0}, {"stopping", 0},
                                        {"succeeded", 0}, {"failed", 0},  {"cancelled", 0},
                                        {"timed_out", 0}};
  for (const auto& j : jobs) ++job_states[j.info.state];
  e.family("cohort_nodes", "gauge", "Nodes known to the coordinator, by state.");
  for (const auto& [s, n] : node_states) e.sample("cohort_nodes", {{"state", s}}, n);
  e.family("cohort_gpus", "gauge", "GPUs on alive nodes.");
  e.sample("cohort_gpus", {{"state", "total"}}, gpus);
  e.sample("cohort_gpus", {{"state", "free"}}, free);
  e.family("cohort_jobs", "gauge", "Jobs by state.");
  for (const auto& [s, n] : job_states) e.sample("cohort_jobs", {{"state", s}}, n);
}

void gpu_series(PrometheusText& e, const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes) {
  e.family("cohort_gpu_memory_total_bytes", "gauge", "Memory of each GPU.");
  for (const auto& n : nodes) {
    for (const auto& g : n.gpus) {
      e.sample("cohort_gpu_memory_total_bytes", {{"node", n.name}, {"gpu", std::to_string(g.index)}, {"name", g.name}},
               double(g.memory_bytes));
    }
  }
  e.family("cohort_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML), where the node reports it.");
  for (const auto& n : nodes) {
    for (const auto& s : n.gpu_samples) {
      e.sample("cohort_gpu_memory_used_bytes", {{"node", n.name}, {"gpu", std::to_string(s.index)}},
               double(s.memory_used_bytes));
    }
  }
  e.family("cohort_gpu_utilization_ratio", "gauge",
           "Share of the last sample period a kernel ran on the GPU (NVML), 0 to 1.");
  for (const auto& n : nodes) {
    for (const auto& s : n.gpu_samples) {
      e.sample("cohort_gpu_utilization_ratio", {{"node", n.name}, {"gpu", std::to_string(s.index)}}, s.utilization);
    }
  }
  e.family("cohort_gpu_job", "gauge", "1 for each GPU a running job's rank holds.");
  for (const auto& j : jobs) {
    if (j.info.state != "running" && j.info.state != "stopping") continue;
    for (const auto& r : j.ranks) {
      if (r.state == "exited" || r.gpu < 0) continue;
      e.sample("cohort_gpu_job", {{"node", r.node}, {"gpu", std::to_string(r.gpu)}, {"job", j.info.id}}, 1);
    }
  }
}

void job_state_series(PrometheusText& e, const std::vector<JobView>& jobs, int64_t now_ms) {
  static const char* kStates[] = {"queued", "running", "stopping", "succeeded", "failed", "cancelled",
                                  "timed_out"};
  e.family("cohort_job_info", "gauge", "1 per job, with its name and kind.");
  for (const auto& j : jobs) {
    e.sample("cohort_job_info", {{"job", j.info.id}, {"name", j.info.name}, {"kind", j.info.kind}}, 1);
  }
  e.family("cohort_job_state", "gauge", "1 for the state each job is in, 0 for the others.");
  for (const auto& j : jobs) {
    for (const char* s : kStates) e.sample("cohort_job_state", {{"job", j.info.id}, {"state", s}}, j.info.state == s);
  }
  e.family("cohort_job_restarts_total", "counter", "Failure restarts a job has used.");
  for (const auto& j : jobs) e.sample("cohort_job_restarts_total", {{"job", j.info.id}}, j.info.restarts_used);
  e.family("cohort_job_attempts_total", "counter", "Attempts started for a job (restarts and scale-ups included).");
  for (const auto& j : jobs) e.sample("cohort_job_attempts_total", {{"job", j.info.id}}, double(j.info.attempts.size()));
  e.family("cohort_job_queue_wait_seconds", "gauge",
           "Seconds from submission to the first attempt's start (to now while it waits).");
  for (const auto& j : jobs) {
    int64_t start = j.info.attempts.empty() ? (j.info.ended_ms ? j.info.ended_ms : now_ms)
                                            : j.info.attempts.front().started_ms;
    e.sample("cohort_job_queue_wait_seconds", {{"job", j.info.id}}, std::max<int64_t>(0, start - j.info.submitted_ms) / 1e3);
  }
  e.family("cohort_job_ranks", "gauge", "Ranks of a job's current attempt on each node.");
  for (const auto& j : jobs) {
    if (j.info.state != "running" && j.info.state != "stopping") continue;
    std::map<std::string, int> per_node;
    for (const auto& r : j.ranks) ++per_node[r.node];
    for (const auto& [node, n] : per_node) e.sample("cohort_job_ranks", {{"job", j.info.id}, {"node", node}}, n);
  }
}

void attempt_histogram(PrometheusText& e, const std::vector<JobView>& jobs) {
  static const double kBuckets[] = {1, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600};
  const std::string name = "cohort_job_attempt_duration_seconds";
  e.family(name, "histogram", "Durations of a job's ended attempts.");
  for (const auto& j : jobs) {
    std::vector<double> durations;
    for (const auto& a : j.info.attempts) {
      if (a.ended_ms > 0 && a.started_ms > 0) durations.push_back(std::max<int64_t>(0, a.ended_ms - a.started_ms) / 1e3);
    }
    double sum = 0;
    std::vector<int64_t> counts(std::size(kBuckets) + 1, 0);
    for (double d : durations) {
      sum += d;
      size_t i = 0;
      while (i < std::size(kBuckets) && d > kBuckets[i]) ++i;
      ++counts[i];
    }
    e.histogram(name, {{"job", j.info.id}}, std::vector<double>(std::begin(kBuckets), std::end(kBuckets)), counts,
                sum);
  }
}

void training_series(PrometheusText& e, const std::vector<JobView>& jobs) {
  struct Gauge {
    const char* name;
    const char* help;
    Figure figure;
  };
  static const Gauge kGauges[] = {
      {"cohort_job_loss", "Training loss at the newest step.", Figure::kLoss},
      {"cohort_job_eval_loss", "Evaluation loss at the newest evaluation.", Figure::kEvalLoss},
      {"cohort_job_learning_rate", "Learning rate at the newest step.", Figure::kLearningRate},
      {"cohort_job_tokens_per_second", "Training throughput at the newest step, all ranks.", Figure::kTokensPerSecond},
      {"cohort_job_mfu_ratio", "Model FLOPs utilisation at the newest step, 0 to 1.", Figure::kMfu},
      {"cohort_job_grad_norm", "Global gradient norm at the newest step.", Figure::kGradNorm},
  };
  e.family("cohort_job_step", "gauge", "Newest completed training step.");
  for (const auto& j : jobs) {
    if (auto p = j.training->latest()) e.sample("cohort_job_step", {{"job", j.info.id}}, double(p->step));
  }
  e.family("cohort_job_steps", "gauge", "Steps a training job runs in all.");
  for (const auto& j : jobs) {
    if (j.total_steps > 0) e.sample("cohort_job_steps", {{"job", j.info.id}}, double(j.total_steps));
  }
  for (const auto& g : kGauges) {
    e.family(g.name, "gauge", g.help);
    for (const auto& j : jobs) {
      auto p = g.figure == Figure::kEvalLoss ? j.training->latest_eval() : j.training->latest();
      if (p && p->has(g.figure)) e.sample(g.name, {{"job", j.info.id}}, p->get(g.figure));
    }
  }
}

}  // namespace

std::string prometheus_text(const std::vector<JobView>& jobs, const std::vector<protocol::NodeInfo>& nodes,
                            int64_t now_ms) {
  PrometheusText e;
  cluster_series(e, jobs, nodes);
  gpu_series(e, jobs, nodes);
  job_state_series(e, jobs, now_ms);
  attempt_histogram(e, jobs);
  training_series(e, jobs);
  return e.take();
}

}  // namespace cohort::coordinator
