// The job page shows the scheduling keys a job set: priority and
// preemptible, time_limit and depends_on.
#include <gtest/gtest.h>

#include "coordinator/dashboard_page.h"
#include "coordinator/job_record.h"
#include "coordinator/job_view.h"

namespace cohort::coordinator {
namespace {

TEST(JobPage, ShowsTheSchedulingKeysTheJobSet) {
  Job job;
  job.id = "job-7";
  job.control.name = "sched";
  job.control.priority = 5;
  job.control.preemptible = true;
  job.control.time_limit_s = 3600;
  job.control.depends_on = {{"job-3", jobs::DependencyKind::kOk}, {"job-4", jobs::DependencyKind::kAny}};
  std::string page = job_page(make_job_view(job), protocol::LogReply{}, JobPageOptions{}, PageContext{});
  EXPECT_NE(page.find("<tr><th>priority<td>5, preemptible"), std::string::npos) << page;
  EXPECT_NE(page.find("<tr><th>time limit<td>3600 s"), std::string::npos);
  EXPECT_NE(page.find("<tr><th>depends on<td>job-3:ok, job-4:any"), std::string::npos);
  Job plain;
  plain.id = "job-8";
  std::string quiet = job_page(make_job_view(plain), protocol::LogReply{}, JobPageOptions{}, PageContext{});
  EXPECT_EQ(quiet.find("time limit"), std::string::npos);
  EXPECT_EQ(quiet.find("<th>priority"), std::string::npos);
}

TEST(ClusterPage, ADrainedNodeShowsWhy) {
  protocol::NodeInfo n;
  n.name = "node-a";
  n.state = "draining";
  n.drain_reason = "unhealthy GPU: GPU 1: Xid 79";
  std::string page = cluster_page({}, {n}, PageContext{});
  EXPECT_NE(page.find("unhealthy GPU: GPU 1: Xid 79"), std::string::npos) << page;
}

}  // namespace
}  // namespace cohort::coordinator
