// Prometheus text exposition (version 0.0.4) of the server's metrics.
#include "infer/serve_metrics.h"

#include <fmt/format.h>

namespace cohort::infer {

void ServeMetrics::Histogram::observe(double v) {
  size_t i = 0;
  while (i < kBounds.size() && v > kBounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

void ServeMetrics::count_response(int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[http_status];
}

void ServeMetrics::count_finish(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
}

void ServeMetrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void ServeMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}
void ServeMetrics::observe_inter_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}
void ServeMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}

void ServeMetrics::render_histogram(std::string& out, const char* name, const char* help,
                                    const Histogram& h) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.n, name, h.sum,
                     name, h.n);
}

std::string ServeMetrics::render(const LoopGauges& g, const std::string& state) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out += "# HELP cohort_serve_requests_total HTTP responses by status code.\n"
         "# TYPE cohort_serve_requests_total counter\n";
  for (const auto& [status, n] : responses_) {
    out += fmt::format("cohort_serve_requests_total{{status=\"{}\"}} {}\n", status, n);
  }
  out += "# HELP cohort_serve_finished_total Generations ended, by reason (stop, length, cancelled).\n"
         "# TYPE cohort_serve_finished_total counter\n";
  for (const auto& [reason, n] : finished_) {
    out += fmt::format("cohort_serve_finished_total{{reason=\"{}\"}} {}\n", reason, n);
  }
  out += fmt::format(
      "# HELP cohort_serve_running Sequences holding a KV-cache slot.\n"
      "# TYPE cohort_serve_running gauge\ncohort_serve_running {}\n"
      "# HELP cohort_serve_waiting Accepted requests waiting for a slot.\n"
      "# TYPE cohort_serve_waiting gauge\ncohort_serve_waiting {}\n"
      "# HELP cohort_serve_kv_cache_usage Share of KV-cache positions held (0 to 1).\n"
      "# TYPE cohort_serve_kv_cache_usage gauge\ncohort_serve_kv_cache_usage {}\n"
      "# HELP cohort_serve_kv_cache_reserved Share of KV-cache positions reserved for the running "
      "requests' whole lengths; a waiting request is admitted when its own fits in the rest (0 to 1).\n"
      "# TYPE cohort_serve_kv_cache_reserved gauge\ncohort_serve_kv_cache_reserved {}\n"
      "# HELP cohort_serve_steps_total Scheduler steps run.\n"
      "# TYPE cohort_serve_steps_total counter\ncohort_serve_steps_total {}\n"
      "# HELP cohort_serve_ready 1 when serving, 0 while loading or draining.\n"
      "# TYPE cohort_serve_ready gauge\ncohort_serve_ready {}\n"
      "# HELP cohort_serve_prompt_tokens_total Prompt tokens of accepted requests.\n"
      "# TYPE cohort_serve_prompt_tokens_total counter\ncohort_serve_prompt_tokens_total {}\n"
      "# HELP cohort_serve_generation_tokens_total Tokens generated.\n"
      "# TYPE cohort_serve_generation_tokens_total counter\ncohort_serve_generation_tokens_total {}\n",
      g.running, g.waiting, g.kv_total > 0 ? double(g.kv_used) / double(g.kv_total) : 0.0,
      g.kv_total > 0 ? double(g.kv_reserved) / double(g.kv_total) : 0.0, g.steps,
      state == "ready" ? 1 : 0, prompt_tokens_, generated_tokens_);
  render_histogram(out, "cohort_serve_time_to_first_token_seconds",
                   "From a request's arrival to its first token.", ttft_);
  render_histogram(out, "cohort_serve_inter_token_latency_seconds",
                   "Between consecutive tokens of one request.", itl_);
  render_histogram(out, "cohort_serve_e2e_latency_seconds",
                   "From a request's arrival to its last token.", e2e_);
  return out;
}

}  // namespace cohort::infer
