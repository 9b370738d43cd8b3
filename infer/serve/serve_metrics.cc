// Prometheus text exposition (version 0.0.4) of the server's metrics.
#include "infer/serve/serve_metrics.h"

#include <vector>

#include "base/prometheus_text.h"

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
void ServeMetrics::observe_first_token_parts(double queued_s, double prefill_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_s >= 0) queue_.observe(queued_s);
  if (prefill_s >= 0) prefill_.observe(prefill_s);
}
void ServeMetrics::observe_inter_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(s);
}
void ServeMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}

void ServeMetrics::render_histogram(PrometheusText& out, const char* name, const char* help,
                                    const Histogram& h) const {
  out.family(name, "histogram", help);
  out.histogram(name, {}, std::vector<double>(kBounds.begin(), kBounds.end()),
                std::vector<int64_t>(h.counts.begin(), h.counts.end()), h.sum);
}

void ServeMetrics::set_model(std::map<std::string, int> weights, std::string kv_cache_dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  weights_ = std::move(weights);
  kv_cache_dtype_ = std::move(kv_cache_dtype);
}

std::string ServeMetrics::render(const LoopGauges& g, const std::string& state) const {
  std::lock_guard<std::mutex> lock(mu_);
  PrometheusText out;
  out.family("cohort_serve_requests_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, n] : responses_) {
    out.sample("cohort_serve_requests_total", {{"status", std::to_string(status)}}, double(n));
  }
  out.family("cohort_serve_finished_total", "counter",
             "Generations ended, by reason (stop, length, cancelled).");
  for (const auto& [reason, n] : finished_) {
    out.sample("cohort_serve_finished_total", {{"reason", reason}}, double(n));
  }
  auto gauge = [&](const char* name, const char* type, const char* help, double value) {
    out.family(name, type, help);
    out.sample(name, value);
  };
  gauge("cohort_serve_running", "gauge", "Sequences holding a KV-cache slot.", g.running);
  gauge("cohort_serve_waiting", "gauge", "Accepted requests waiting for a slot.", g.waiting);
  gauge("cohort_serve_kv_cache_usage", "gauge", "Share of KV-cache positions held (0 to 1).",
        g.kv_total > 0 ? double(g.kv_used) / double(g.kv_total) : 0.0);
  gauge("cohort_serve_preemptions_total", "counter",
        "Running requests sent back to wait when the KV cache had no block for them; they resume where "
        "they stopped, their prefix recomputed or found in the prefix cache.",
        double(g.preemptions));
  gauge("cohort_serve_steps_total", "counter", "Scheduler steps run.", double(g.steps));
  gauge("cohort_serve_prefix_cache_queries_total", "counter",
        "Prompt tokens of admitted requests, looked up in the prefix cache.", double(g.prefix_query_tokens));
  gauge("cohort_serve_prefix_cache_hits_total", "counter",
        "Of those, tokens whose KV the prefix cache held (the hit rate is hits / queries).",
        double(g.prefix_hit_tokens));
  gauge("cohort_serve_ready", "gauge", "1 when serving, 0 while loading or draining.", state == "ready" ? 1 : 0);
  gauge("cohort_serve_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
        double(prompt_tokens_));
  gauge("cohort_serve_generation_tokens_total", "counter", "Tokens generated.", double(generated_tokens_));
  if (!weights_.empty()) {
    out.family("cohort_serve_weight_tensors", "gauge", "Weight tensors of the served model, by storage format.");
    for (const auto& [format, n] : weights_) out.sample("cohort_serve_weight_tensors", {{"format", format}}, n);
  }
  if (!kv_cache_dtype_.empty()) {
    out.family("cohort_serve_kv_cache_dtype_info", "gauge", "The KV cache's number format (bf16 or fp8), as a label.");
    out.sample("cohort_serve_kv_cache_dtype_info", {{"dtype", kv_cache_dtype_}}, 1);
  }
  render_histogram(out, "cohort_serve_time_to_first_token_seconds",
                   "From a request's arrival to its first token.", ttft_);
  render_histogram(out, "cohort_serve_request_queue_time_seconds",
                   "From a request's arrival to the step that starts its prompt (waiting for a slot, KV blocks "
                   "or the step's token budget).",
                   queue_);
  render_histogram(out, "cohort_serve_request_prefill_time_seconds",
                   "From the step that starts a request's prompt to its first token's pick (one step, or "
                   "several for a prompt cut into chunks).",
                   prefill_);
  render_histogram(out, "cohort_serve_inter_token_latency_seconds",
                   "Between consecutive tokens of one request.", itl_);
  render_histogram(out, "cohort_serve_e2e_latency_seconds",
                   "From a request's arrival to its last token.", e2e_);
  return out.take();
}

}  // namespace cohort::infer
