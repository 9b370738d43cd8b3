// Sweeps: --sweep arguments, the grid of their points, and each point's own
// name and output folder.
#include "jobs/sweep.h"

#include <gtest/gtest.h>

namespace cohort::jobs {
namespace {

TEST(Sweep, ListsAndIntegerRangesParse) {
  auto lr = parse_sweep("train.lr=1e-4,3e-4");
  ASSERT_TRUE(lr) << lr.status().message();
  EXPECT_EQ(lr->key, "train.lr");
  EXPECT_EQ(lr->values, (std::vector<std::string>{"1e-4", "3e-4"}));
  auto seed = parse_sweep("train.seed=1..4");
  ASSERT_TRUE(seed);
  EXPECT_EQ(seed->values, (std::vector<std::string>{"1", "2", "3", "4"}));
}

TEST(Sweep, BadArgumentsAreErrorsThatShowTheForm) {
  for (const char* bad : {"train.lr", "=1,2", "train.lr=1,,2", "train.seed=4..1", "train.seed=a..b",
                          "train.seed=1..100000"}) {
    auto r = parse_sweep(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.status().message().find(std::string("--sweep ") + bad + ": "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("KEY=V1,V2,... or KEY=LO..HI"), std::string::npos);
  }
}

TEST(Sweep, ThePointsAreTheProductFirstAxisSlowest) {
  auto points = sweep_points({*parse_sweep("train.lr=1e-4,3e-4"), *parse_sweep("train.seed=1..2")});
  ASSERT_TRUE(points);
  ASSERT_EQ(points->size(), 4u);
  auto text = [](const std::vector<Override>& p) {
    std::string out;
    for (const auto& o : p) out += o.text() + " ";
    return out;
  };
  EXPECT_EQ(text((*points)[0]), "train.lr=1e-4 train.seed=1 ");
  EXPECT_EQ(text((*points)[1]), "train.lr=1e-4 train.seed=2 ");
  EXPECT_EQ(text((*points)[3]), "train.lr=3e-4 train.seed=2 ");
  auto huge = sweep_points({*parse_sweep("a.b=1..100"), *parse_sweep("a.c=1..100")});
  EXPECT_FALSE(huge);
}

TEST(Sweep, EachPointGetsItsOwnNameAndOutputFolder) {
  JobSpec spec;
  spec.job.name = "lr";
  spec.job.output_dir = "/runs/lr";
  apply_sweep_point(3, &spec);
  EXPECT_EQ(spec.job.name, "lr-3");
  EXPECT_EQ(spec.job.output_dir, "/runs/lr/sweep-3");
}

}  // namespace
}  // namespace cohort::jobs

#include "jobs/command_line_job.h"

namespace cohort::jobs {
namespace {

TEST(CommandLineJob, TheJobIsACommandJobNamedAfterTheScriptWithItsArgvQuoted) {
  std::string text = command_line_job_toml({"python3", "my train.py", "--note", "say \"hi\"\\"}, 4, 1);
  LoadOptions options{.overrides = {}, .base_dir = "/tmp", .file_dir = "/tmp"};
  auto r = load_job_text(text, "cohort run --nproc-per-node", options);
  ASSERT_TRUE(r.ok()) << r.error_text() << text;
  EXPECT_EQ(r.spec.job.kind, JobKind::kCommand);
  EXPECT_EQ(r.spec.job.name, "my-train");
  EXPECT_EQ(r.spec.job.gpus_per_node, 4);
  EXPECT_EQ(r.spec.job.devices, DeviceVisibility::kNode) << "cuda:LOCAL_RANK, as torchrun scripts expect";
  EXPECT_EQ(r.spec.command.argv, (std::vector<std::string>{"python3", "my train.py", "--note", "say \"hi\"\\"}));
  EXPECT_EQ(r.spec.job.output_dir, "/tmp/runs/my-train");
  auto plain = load_job_text(command_line_job_toml({"./bench"}, 1, 1), "x", options);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.spec.job.name, "bench");
}

}  // namespace
}  // namespace cohort::jobs
