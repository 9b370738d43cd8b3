// The server's /metrics page: every sample line is Prometheus text under a
// HELP and TYPE of its family, the gauges carry the loop's figures (KV use
// and reservation as shares of the cache), and histograms are cumulative.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "infer/serve/serve_metrics.h"

namespace cohort::infer {
namespace {

std::map<std::string, std::string> samples(const std::string& page, std::set<std::string>* typed) {
  std::map<std::string, std::string> out;
  const std::regex sample(R"(^([a-z][a-z0-9_]*)(\{[a-z]+="[^"]*"\})? (\S+)$)");
  const std::regex type(R"(^# TYPE ([a-z][a-z0-9_]*) (counter|gauge|histogram)$)");
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, m, type)) {
      typed->insert(m[1]);
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    if (m.empty()) continue;
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          typed->count(family.substr(0, family.size() - s.size()))) {
        family.resize(family.size() - s.size());
      }
    }
    EXPECT_TRUE(typed->count(family)) << line << ": no TYPE before it";
    out[std::string(m[1]) + std::string(m[2])] = m[3];
  }
  return out;
}

TEST(ServeMetrics, ThePageIsPrometheusTextWithTheLoopsGauges) {
  ServeMetrics metrics;
  metrics.count_response(200);
  metrics.count_response(200);
  metrics.count_response(429);
  metrics.count_finish("length");
  metrics.add_tokens(12, 30);
  metrics.observe_ttft(0.003);
  metrics.observe_ttft(0.2);
  metrics.observe_first_token_parts(0.0004, 0.002);
  metrics.observe_first_token_parts(-1, 0.15);  // the arrival not known
  metrics.observe_inter_token(0.004);
  metrics.observe_e2e(1.5);
  metrics.set_model({{"bf16", 9}, {"fp8-block", 14}}, "fp8");
  LoopGauges g;
  g.running = 3, g.waiting = 2, g.kv_used = 100, g.kv_total = 400, g.preemptions = 2, g.steps = 7;
  std::set<std::string> typed;
  const auto s = samples(metrics.render(g, "ready"), &typed);
  EXPECT_EQ(s.at("cohort_serve_requests_total{status=\"200\"}"), "2");
  EXPECT_EQ(s.at("cohort_serve_requests_total{status=\"429\"}"), "1");
  EXPECT_EQ(s.at("cohort_serve_finished_total{reason=\"length\"}"), "1");
  EXPECT_EQ(s.at("cohort_serve_running"), "3");
  EXPECT_EQ(s.at("cohort_serve_waiting"), "2");
  EXPECT_EQ(s.at("cohort_serve_kv_cache_usage"), "0.25");
  EXPECT_EQ(s.at("cohort_serve_preemptions_total"), "2");
  EXPECT_EQ(s.at("cohort_serve_steps_total"), "7");
  EXPECT_EQ(s.at("cohort_serve_ready"), "1");
  EXPECT_EQ(s.at("cohort_serve_prompt_tokens_total"), "12");
  EXPECT_EQ(s.at("cohort_serve_generation_tokens_total"), "30");
  EXPECT_EQ(s.at("cohort_serve_weight_tensors{format=\"fp8-block\"}"), "14");
  EXPECT_EQ(s.at("cohort_serve_weight_tensors{format=\"bf16\"}"), "9");
  EXPECT_EQ(s.at("cohort_serve_kv_cache_dtype_info{dtype=\"fp8\"}"), "1");
  // Cumulative buckets: 3 ms lands in le=0.005 and every bucket above it.
  EXPECT_EQ(s.at("cohort_serve_time_to_first_token_seconds_bucket{le=\"0.0025\"}"), "0");
  EXPECT_EQ(s.at("cohort_serve_time_to_first_token_seconds_bucket{le=\"0.005\"}"), "1");
  EXPECT_EQ(s.at("cohort_serve_time_to_first_token_seconds_bucket{le=\"0.25\"}"), "2");
  EXPECT_EQ(s.at("cohort_serve_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), "2");
  EXPECT_EQ(s.at("cohort_serve_time_to_first_token_seconds_count"), "2");
  EXPECT_EQ(s.at("cohort_serve_e2e_latency_seconds_count"), "1");
  EXPECT_EQ(s.at("cohort_serve_request_queue_time_seconds_count"), "1");
  EXPECT_EQ(s.at("cohort_serve_request_queue_time_seconds_bucket{le=\"0.001\"}"), "1");
  EXPECT_EQ(s.at("cohort_serve_request_prefill_time_seconds_count"), "2");
  EXPECT_EQ(s.at("cohort_serve_request_prefill_time_seconds_bucket{le=\"0.0025\"}"), "1");
  EXPECT_EQ(s.at("cohort_serve_request_prefill_time_seconds_bucket{le=\"0.25\"}"), "2");
  // Draining or loading: not ready; an empty cache reads as no use.
  const auto draining = samples(metrics.render(LoopGauges{}, "draining"), &typed);
  EXPECT_EQ(draining.at("cohort_serve_ready"), "0");
  EXPECT_EQ(draining.at("cohort_serve_preemptions_total"), "0");
}

}  // namespace
}  // namespace cohort::infer
