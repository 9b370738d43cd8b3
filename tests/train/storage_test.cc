// Checkpoint storage with ranks that stand for two nodes (COHORT_NODE) on
// two "disks" (each rank's own output_dir): shared storage that is not shared
// is refused at start naming the node and the path; node-local checkpoints
// keep each node's shards on its own disk, resume on the same nodes exactly
// as an uninterrupted run, and are refused on another node set.
#include <gtest/gtest.h>

#include "parallel/checkpoint.h"
#include "tests/train/train_fixture.h"

namespace cohort::testing {
namespace {

// Rank r runs as `nodes[r]` with `disks[r]`'s job file: one rank per node.
RankGroup start_on(const std::vector<fs::path>& disks, const std::vector<std::string>& nodes) {
  return start_ranks_each(worker_binary(), int(nodes.size()), [&](int rank) {
    auto env = worker_env();
    env.push_back({"COHORT_LOG", "info"});  // "resumed from ..." is an info line
    env.push_back({"COHORT_NODE", nodes[size_t(rank)]});
    env.push_back({"LOCAL_RANK", "0"});
    env.push_back({"LOCAL_WORLD_SIZE", "1"});
    env.push_back({"GROUP_RANK", std::to_string(rank)});
    return RankSetup{{(disks[size_t(rank)] / "job.toml").string()}, env,
                     (disks[size_t(rank)] / ("rank-" + std::to_string(rank) + ".log")).string()};
  });
}

TrainJob sharded(int steps, const std::string& storage, const std::string& strategy = "zero2") {
  TrainJob j;
  j.strategy = strategy;
  j.steps = steps;
  j.checkpoint_every = 4;
  // min_lr = lr: a schedule that does not depend on the total steps, so 4
  // steps and 4 more follow an 8-step run exactly.
  j.extra = "min_lr = 1e-3\ncheckpoint_storage = \"" + storage + "\"\n";
  return j;
}

TEST(CheckpointStorage, SharedStorageThatIsNotSharedIsRefusedNamingTheNodeAndPath) {
  fs::path a = make_scratch("unshared-a"), b = make_scratch("unshared-b");
  write_job(a, sharded(4, "shared"));
  write_job(b, sharded(4, "shared"));
  RankGroup group = start_on({a, b}, {"node-a", "node-b"});
  EXPECT_NE(wait_ranks(group, std::chrono::seconds(60), /*expect_failure=*/true), "");
  std::string log = read_text(b / "rank-1.log");
  EXPECT_NE(log.find("output_dir " + (b / "out").string() + " is not storage every node shares: rank 1 on node-b "
                     "cannot see " + (b / "out/.cohort-storage/rank0-").string()),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("which rank 0 wrote on node-a"), std::string::npos) << log;
  EXPECT_NE(log.find("train.checkpoint_storage = \"node-local\""), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(a / "out/checkpoints"));
}

class NodeLocal : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeLocal, ShardsStayOnEachNodeAndResumeThereAsIfNeverStopped) {
  const std::string strategy = GetParam();
  fs::path a = make_scratch("local-a-" + strategy), b = make_scratch("local-b-" + strategy);
  write_job(a, sharded(4, "node-local", strategy));
  write_job(b, sharded(4, "node-local", strategy));
  RankGroup first = start_on({a, b}, {"node-a", "node-b"});
  ASSERT_EQ(wait_ranks(first), "") << read_text(a / "rank-0.log") << read_text(b / "rank-1.log");
  fs::path on_a = a / "out/checkpoints/node-a/step-4", on_b = b / "out/checkpoints/node-b/step-4";
  EXPECT_TRUE(fs::exists(on_a / "rank-0.bin") && fs::exists(on_a / "index.json"));
  EXPECT_TRUE(fs::exists(on_b / "rank-1.bin") && fs::exists(on_b / "index.json"));
  EXPECT_FALSE(fs::exists(on_a / "rank-1.bin"));  // each disk holds its own node's shards only
  EXPECT_FALSE(fs::exists(b / "out/checkpoints/node-a"));
  // The same two nodes carry on from step 4 to 8.
  write_job(a, sharded(8, "node-local", strategy));
  write_job(b, sharded(8, "node-local", strategy));
  RankGroup second = start_on({a, b}, {"node-a", "node-b"});
  ASSERT_EQ(wait_ranks(second), "") << read_text(a / "rank-0.log") << read_text(b / "rank-1.log");
  EXPECT_NE(read_text(a / "rank-0.log").find("resumed from " + on_a.string()), std::string::npos)
      << read_text(a / "rank-0.log");
  // ... on the loss curve of a run on shared storage that never stopped.
  fs::path shared = make_scratch("local-reference-" + strategy);
  fs::path job = write_job(shared, sharded(8, "shared", strategy));
  RankGroup reference = start_ranks(worker_binary(), {job.string()}, 2, worker_env());
  ASSERT_EQ(wait_ranks(reference), "");
  auto expected = read_losses(shared / "out"), got = read_losses(a / "out");
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [step, loss] : expected) EXPECT_NEAR(got[step], loss, 1e-5 * loss) << "step " << step;
}

// DDP: each node's first replica writes a whole copy; ZeRO-2 and FSDP2:
// each rank its own shard.
INSTANTIATE_TEST_SUITE_P(Strategies, NodeLocal, ::testing::Values("zero2", "ddp", "fsdp2"));

TEST(CheckpointStorage, NodeLocalResumeOnOtherNodesIsRefusedWithBothNodeLists) {
  fs::path a = make_scratch("moved-a"), b = make_scratch("moved-b"), c = make_scratch("moved-c");
  for (const auto& d : {a, b, c}) write_job(d, sharded(4, "node-local"));
  RankGroup first = start_on({a, b}, {"node-a", "node-b"});
  ASSERT_EQ(wait_ranks(first), "") << read_text(a / "rank-0.log") << read_text(b / "rank-1.log");
  for (const auto& d : {a, b, c}) write_job(d, sharded(8, "node-local"));
  // node-b replaced by node-c, whose disk has no checkpoint.
  RankGroup replaced = start_on({a, c}, {"node-a", "node-c"});
  EXPECT_NE(wait_ranks(replaced, std::chrono::seconds(60), true), "");
  std::string log = read_text(a / "rank-0.log");
  EXPECT_NE(log.find("node-local checkpoints (train.checkpoint_storage = \"node-local\") resume only on the nodes "
                     "that wrote them"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("(node-a: step-4, node-c: none)"), std::string::npos) << log;
  // The same nodes with their ranks swapped: each holds step 4, saved by other ranks.
  RankGroup swapped = start_on({b, a}, {"node-b", "node-a"});
  EXPECT_NE(wait_ranks(swapped, std::chrono::seconds(60), true), "");
  log = read_text(b / "rank-0.log");
  EXPECT_NE(log.find("step-4 on node-b was saved with ranks on node-a, node-b (2 ranks), and this attempt runs on "
                     "node-b, node-a (2 ranks)"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace cohort::testing
