// The coordinator raises its soft open-files limit to the hard one at start,
// so a large cluster does not stop at "Too many open files".
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "coordinator/coordinator.h"
#include "coordinator/open_files_limit.h"

namespace cohort::coordinator {
namespace {

// Lowers the soft limit for one test and puts the original back after.
class LowSoftLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &original_), 0);
    if (original_.rlim_max != RLIM_INFINITY && original_.rlim_max <= 256) {
      GTEST_SKIP() << "the hard open-files limit here is " << original_.rlim_max
                   << ", too low to lower the soft one under it";
    }
    struct rlimit low = original_;
    low.rlim_cur = 256;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  }
  void TearDown() override { ::setrlimit(RLIMIT_NOFILE, &original_); }
  static rlim_t soft() {
    struct rlimit now {};
    ::getrlimit(RLIMIT_NOFILE, &now);
    return now.rlim_cur;
  }
  struct rlimit original_ {};
};

TEST_F(LowSoftLimit, RaisingTakesTheSoftLimitToTheHardOne) {
  auto limit = raise_open_files_limit();
  ASSERT_TRUE(limit) << limit.status().to_string();
  EXPECT_EQ(limit->before, 256u);
  EXPECT_GT(limit->after, 256u);
  EXPECT_EQ(soft(), rlim_t(limit->after));
  if (original_.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(limit->after, uint64_t(original_.rlim_max));
  }
  // A second call finds nothing to raise and lowers nothing.
  auto again = raise_open_files_limit();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->before, limit->after);
  EXPECT_EQ(again->after, limit->after);
}

TEST_F(LowSoftLimit, StartingACoordinatorRaisesIt) {
  boost::asio::io_context io;
  CoordinatorOptions options;
  options.listen = "tcp://127.0.0.1:0";
  auto coordinator = Coordinator::start(io, options);
  ASSERT_TRUE(coordinator) << coordinator.status().to_string();
  EXPECT_GT(soft(), rlim_t(256));
  if (original_.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(soft(), original_.rlim_max);
  }
}

}  // namespace
}  // namespace cohort::coordinator
