// The server's Prometheus metrics (GET /metrics): requests by status, finish
// reasons, tokens, and latency histograms; the gauges (running, waiting, KV
// use) are read from the generation loop when the page is rendered.
// Thread-safe: the HTTP thread records, any thread may render.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "base/prometheus_text.h"

namespace cohort::infer {

struct LoopGauges {
  int running = 0;
  int waiting = 0;
  int64_t kv_used = 0, kv_total = 0;  // positions
  // Running sequences preempted for KV blocks since the start.
  int64_t preemptions = 0;
  int64_t steps = 0;
  // Prompt tokens admitted, and those the prefix cache held.
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
};

class ServeMetrics {
 public:
  void count_response(int http_status);
  void count_finish(const std::string& reason);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_ttft(double seconds);
  // The parts of a first token's wait the generation loop saw (TokenEvent:
  // queued_s, prefill_s); negative ones are not known and not counted.
  // What TTFT has beyond them is the hand-over to the HTTP thread.
  void observe_first_token_parts(double queued_s, double prefill_s);
  void observe_inter_token(double seconds);
  void observe_e2e(double seconds);
  // What the server runs, for the page's info families: its weights' count
  // per storage format (weight_formats(), model_source.h) and the KV
  // cache's number format (serve.kv_cache_dtype).
  void set_model(std::map<std::string, int> weights, std::string kv_cache_dtype);
  std::string render(const LoopGauges& gauges, const std::string& state) const;

 private:
  // Seconds; the last bucket is +Inf.
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,    10,   30};
  struct Histogram {
    std::array<int64_t, kBounds.size() + 1> counts{};
    double sum = 0;
    int64_t n = 0;
    void observe(double v);
  };
  void render_histogram(PrometheusText& out, const char* name, const char* help, const Histogram& h) const;

  mutable std::mutex mu_;
  std::map<int, int64_t> responses_;        // GUARDED_BY(mu_)
  std::map<std::string, int64_t> finished_; // GUARDED_BY(mu_)
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::map<std::string, int> weights_;  // GUARDED_BY(mu_)
  std::string kv_cache_dtype_;          // GUARDED_BY(mu_); "" until set_model
  Histogram ttft_, queue_, prefill_, itl_, e2e_;
};

}  // namespace cohort::infer
