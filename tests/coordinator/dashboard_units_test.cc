// The dashboard's pure parts: the bounded training series, the Prometheus
// exposition and the SVG charts.
#include <gtest/gtest.h>

#include "coordinator/job_record.h"
#include "coordinator/job_view.h"
#include "coordinator/prometheus_text.h"
#include "coordinator/svg_chart.h"
#include "coordinator/training_series.h"

namespace cohort::coordinator {
namespace {

protocol::MetricRow row(int64_t step, double loss, double time = 0) {
  return {step, time, {{"loss", loss}, {"lr", 1e-3}, {"tokens_per_s", 1000.0 + double(step)}}};
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(TrainingSeries, KeepsAtMostMaxPointsSpreadOverTheWholeRunAndTheNewestRow) {
  TrainingSeries s(100);
  for (int step = 1; step <= 10000; ++step) s.add(row(step, 1.0 / step));
  EXPECT_LE(s.training().size(), 100u);
  EXPECT_GE(s.training().size(), 40u);
  EXPECT_EQ(s.training().front().step, 1);
  EXPECT_GT(s.training().back().step, 9000);
  EXPECT_EQ(s.latest()->step, 10000);
  for (size_t i = 1; i < s.training().size(); ++i) EXPECT_LT(s.training()[i - 1].step, s.training()[i].step);
}

TEST(TrainingSeries, AStepNotPastTheLastRewindsTheSeriesAsAResumedAttemptDoes) {
  TrainingSeries s;
  for (int step = 1; step <= 50; ++step) s.add(row(step, 5.0));
  for (int step = 31; step <= 40; ++step) s.add(row(step, 2.0));  // resumed from the step-30 checkpoint
  ASSERT_EQ(s.training().size(), 40u);
  EXPECT_EQ(s.training().back().step, 40);
  EXPECT_EQ(s.training()[29].get(Figure::kLoss), 5.0);
  EXPECT_EQ(s.training()[30].get(Figure::kLoss), 2.0);
  EXPECT_EQ(s.latest()->step, 40);
}

TEST(TrainingSeries, KeepsEvaluationsApartAndIgnoresEventsAndNonFiniteValues) {
  TrainingSeries s;
  s.add(row(1, 4.0));
  s.add({10, 0, {{"eval_loss", 3.5}}});
  s.add({10, 0, {{"checkpoint_bytes", 1e6}}});  // an event row: no loss, no eval_loss
  s.add({11, 0, {{"loss", std::nan("")}, {"lr", 1.0}}});
  EXPECT_EQ(s.training().size(), 1u);
  ASSERT_EQ(s.evaluation().size(), 1u);
  EXPECT_EQ(s.latest_eval()->get(Figure::kEvalLoss), 3.5);
  EXPECT_FALSE(s.training()[0].has(Figure::kEvalLoss));
  EXPECT_FALSE(s.training()[0].has(Figure::kMfu));
}

JobView view_of(const Job& job) { return make_job_view(job); }

TEST(PrometheusText, ExportsPerJobSeriesWithJobAndNodeLabels) {
  Job job;
  job.id = "job-7";
  job.control.name = "tiny \"quoted\"";
  job.control.kind = jobs::JobKind::kTrain;
  job.control.gpus_per_node = 2;
  job.state = JobState::kRunning;
  job.submitted_ms = 1000;
  job.restarts_used = 1;
  Attempt a0;
  a0.number = 0;
  a0.state = AttemptState::kFailed;
  a0.started_ms = 3000;
  a0.ended_ms = 48000;  // 45 s
  Attempt a1;
  a1.number = 1;
  a1.nodes = {"node-a"};
  a1.gpus = {{"node-a", {2, 3}}};
  a1.gpus_per_node = 2;
  a1.started_ms = 50000;
  a1.ranks = {RankRecord{"node-a"}, RankRecord{"node-a"}};
  job.attempts = {a0, a1};
  job.training.add({12, 0, {{"loss", 2.5}, {"mfu", 0.4}, {"tokens_per_s", 5e4}, {"lr", 3e-4}}});
  job.training.add({10, 0, {{"eval_loss", 2.75}}});
  job.total_steps = 100;
  protocol::NodeInfo node;
  node.name = "node-a";
  node.state = "alive";
  node.gpus = {{2, "GPU-2", "", "H200", 1ull << 37}, {3, "GPU-3", "", "H200", 1ull << 37}};
  node.gpu_samples = {{2, 0.75, 1ull << 30, ""}};
  std::string text = prometheus_text({view_of(job)}, {node}, 60000);
  for (const char* want : {
           "cohort_job_info{job=\"job-7\",name=\"tiny \\\"quoted\\\"\",kind=\"train\"} 1",
           "cohort_job_state{job=\"job-7\",state=\"running\"} 1",
           "cohort_job_state{job=\"job-7\",state=\"queued\"} 0",
           "# TYPE cohort_job_restarts_total counter", "cohort_job_restarts_total{job=\"job-7\"} 1",
           "cohort_job_attempts_total{job=\"job-7\"} 2", "cohort_job_queue_wait_seconds{job=\"job-7\"} 2",
           "# TYPE cohort_job_attempt_duration_seconds histogram",
           "cohort_job_attempt_duration_seconds_bucket{job=\"job-7\",le=\"30\"} 0",
           "cohort_job_attempt_duration_seconds_bucket{job=\"job-7\",le=\"60\"} 1",
           "cohort_job_attempt_duration_seconds_bucket{job=\"job-7\",le=\"+Inf\"} 1",
           "cohort_job_attempt_duration_seconds_sum{job=\"job-7\"} 45",
           "cohort_job_attempt_duration_seconds_count{job=\"job-7\"} 1",
           "cohort_job_step{job=\"job-7\"} 12", "cohort_job_steps{job=\"job-7\"} 100",
           "cohort_job_loss{job=\"job-7\"} 2.5", "cohort_job_eval_loss{job=\"job-7\"} 2.75",
           "cohort_job_mfu_ratio{job=\"job-7\"} 0.4", "cohort_job_tokens_per_second{job=\"job-7\"} 50000",
           "cohort_job_ranks{job=\"job-7\",node=\"node-a\"} 2",
           "cohort_gpu_job{node=\"node-a\",gpu=\"3\",job=\"job-7\"} 1",
           "cohort_gpu_utilization_ratio{node=\"node-a\",gpu=\"2\"} 0.75",
           "cohort_gpu_memory_used_bytes{node=\"node-a\",gpu=\"2\"} 1073741824",
           "cohort_gpu_memory_total_bytes{node=\"node-a\",gpu=\"2\",name=\"H200\"} 137438953472",
       }) {
    EXPECT_TRUE(contains(text, want)) << "missing: " << want << "\n" << text;
  }
  // Each family is declared once, before its samples.
  EXPECT_EQ(text.find("# TYPE cohort_job_loss gauge"), text.rfind("# TYPE cohort_job_loss gauge"));
}

TEST(SvgChart, DrawsEachLineWithItsPointCountAndAPlaceholderWithoutData) {
  ChartOptions o;
  o.id = "plot-loss";
  o.title = "loss <&>";
  std::string svg = svg_line_chart(o, {{"loss", "#00f", {{1, 5.0}, {2, 4.0}, {3, 3.5}}}, {"eval loss", "#f00", {}}});
  EXPECT_TRUE(contains(svg, "<svg id=\"plot-loss\""));
  EXPECT_TRUE(contains(svg, "data-label=\"loss\" data-points=\"3\""));
  EXPECT_FALSE(contains(svg, "data-label=\"eval loss\""));
  EXPECT_TRUE(contains(svg, "loss &lt;&amp;&gt;"));
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n'), 0);
  std::string empty = svg_line_chart(o, {{"loss", "#00f", {}}});
  EXPECT_TRUE(contains(empty, "data-points=\"0\""));
  EXPECT_TRUE(contains(empty, "none reported yet"));
  o.x_is_time = true;
  std::string timed = svg_line_chart(o, {{"loss", "#00f", {{1764577200, 2.0}, {1764577260, 1.0}}}});
  EXPECT_TRUE(contains(timed, "time (UTC)"));
  EXPECT_TRUE(contains(timed, "08:20:00"));
}

}  // namespace
}  // namespace cohort::coordinator
