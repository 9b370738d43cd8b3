// One job per output folder: a job whose output_dir a queued or running job
// uses is refused at submit, naming that job; once it has ended, the folder
// is free again.
#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;

TEST_F(CoordinatorTest, ASecondJobOnALiveJobsOutputFolderIsRefusedWithItsId) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  auto spec = command_job("first", 1, 1);
  spec.job.output_dir = "/tmp/cohort-shared-out";
  std::string first = submit(spec);
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  auto again = command_job("second", 1, 1);
  again.job.output_dir = "/tmp/cohort-shared-out/";  // the same folder, spelled otherwise
  auto r = client_->request<protocol::SubmitReply>(submit_of(again), 5s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("output_dir /tmp/cohort-shared-out"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("is in use by " + first), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("job.output_dir"), std::string::npos);
  // Another folder is fine, and so is this one once the first job has ended.
  auto elsewhere = command_job("third", 1, 1);
  EXPECT_FALSE(submit(elsewhere).empty());
  n.exit_all(*l, 0);
  ASSERT_TRUE(wait_for_state(first, "succeeded"));
  auto later = client_->request<protocol::SubmitReply>(submit_of(again), 5s);
  EXPECT_TRUE(later) << later.status().message();
}

TEST_F(CoordinatorTest, AQueuedJobHoldsItsOutputFolderToo) {
  start();  // no nodes: everything stays queued
  std::string first = submit(command_job("queued", 1, 1));
  auto r = client_->request<protocol::SubmitReply>(submit_of(command_job("queued", 1, 1)), 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find(first), std::string::npos) << r.status().message();
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{first}, 5s));
  EXPECT_FALSE(submit(command_job("queued", 1, 1)).empty());
}

}  // namespace
}  // namespace cohort::coordinator::testing
