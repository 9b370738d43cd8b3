// The scheduling keys of [job]: time_limit and depends_on load, and a
// malformed dependency is an error at its key with what to write instead.
#include <gtest/gtest.h>

#include "tests/jobs/job_text.h"

namespace cohort::jobs {
namespace {
using testing::error_with;
using testing::load;

const char* kCommand = "[job]\nname = \"x\"\nkind = \"command\"\n";

TEST(SchedulingKeys, TimeLimitAndDependenciesLoad) {
  auto r = load(std::string(kCommand) +
                "time_limit = 3600\ndepends_on = [\"job-3\", \"job-4:any\", \"job-5:notok\"]\n"
                "[command]\nargv = [\"true\"]\n");
  ASSERT_TRUE(r.ok()) << r.error_text();
  EXPECT_EQ(r.spec.job.time_limit_s, 3600);
  EXPECT_EQ(r.spec.job.depends_on, (std::vector<std::string>{"job-3", "job-4:any", "job-5:notok"}));
  Dependency d;
  std::string why;
  ASSERT_TRUE(parse_dependency("job-5:notok", &d, &why));
  EXPECT_EQ(d.job_id, "job-5");
  EXPECT_EQ(d.kind, DependencyKind::kNotOk);
  ASSERT_TRUE(parse_dependency("job-3", &d, &why));
  EXPECT_EQ(d.kind, DependencyKind::kOk);
}

TEST(SchedulingKeys, AMalformedDependencyIsAnErrorAtItsKey) {
  auto r = load(std::string(kCommand) + "depends_on = [\"job-3:afterok\"]\n[command]\nargv = [\"true\"]\n");
  auto e = error_with(r, "job.depends_on[0]: 'job-3:afterok': after the ':' comes ok");
  EXPECT_EQ(e.line, 4);
  r = load(std::string(kCommand) + "depends_on = [\"train-run\"]\n[command]\nargv = [\"true\"]\n");
  error_with(r, "job.depends_on[0]: 'train-run' does not name a job id");
  r = load(std::string(kCommand) + "time_limit = -1\n[command]\nargv = [\"true\"]\n");
  error_with(r, "job.time_limit: -1 is out of range");
}

}  // namespace
}  // namespace cohort::jobs
