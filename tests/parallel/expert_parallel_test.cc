// Expert parallelism (parallel.expert_parallel): a mixture of experts whose
// experts split over the ranks of an expert group, tokens travelling to
// them by all-to-all, trains as one rank does: the same per-step losses and
// final parameters (every expert's, gathered from the ranks that hold it),
// for EP 2, EP 2 × DP 2 and EP 2 × TP 2 over Gloo, EP 2 over MPI, and with
// the load-balancing loss beside the DDP run that splits the data as it
// does. Ranks are real processes.
#include <gtest/gtest.h>

#include "tests/parallel/worker_run.h"

namespace cohort::parallel {
namespace {

using testing::Env;
using testing::WorkerRun;

constexpr int kSteps = 6;
constexpr int kGlobalBatch = 8;

// tiny-moe: 8 experts of 32, top 2. Without the load-balancing loss a
// run's loss is a sum over tokens, whatever splits them.
const Env kNoAux = {{"COHORT_TEST_PRESET", "tiny-moe"}, {"COHORT_TEST_NO_AUX", "1"}};

Env with_ep(Env env, int ep) {
  env.push_back({"COHORT_TEST_EP", std::to_string(ep)});
  return env;
}

const WorkerRun& one_rank() {
  static WorkerRun r = testing::run_worker("moe1", "ddp", 1, 1, kGlobalBatch, kGlobalBatch, kSteps, kNoAux);
  return r;
}

void expect_follows_one_rank(const WorkerRun& got, const std::string& what) {
  ASSERT_EQ(got.params.size(), one_rank().params.size()) << what << ": every expert's parameters came back";
  testing::expect_same_training(one_rank(), got, 1e-5, 1e-5, what);
}

struct Mesh {
  std::string name;
  int world, tp, micro;
  bool mpi = false;
};

class ExpertParallelMesh : public ::testing::TestWithParam<Mesh> {};

// ep 2: two ranks of four experts each; ep 2 x dp 2: two expert groups,
// whose experts reduce over their replica only; ep 2 x tp 2 with two
// micro-steps a step; ep 2 over MPI.
TEST_P(ExpertParallelMesh, FollowsOneRank) {
  const Mesh& m = GetParam();
  const Env env = with_ep(kNoAux, 2);
  const WorkerRun run =
      m.mpi ? testing::run_worker_mpi("moe_" + m.name, "ddp", m.world, m.tp, kGlobalBatch, m.micro, kSteps, env)
            : testing::run_worker("moe_" + m.name, "ddp", m.world, m.tp, kGlobalBatch, m.micro, kSteps, env);
  expect_follows_one_rank(run, m.name);
}

INSTANTIATE_TEST_SUITE_P(ExpertParallel, ExpertParallelMesh,
                         ::testing::Values(Mesh{"ep2", 2, 1, kGlobalBatch / 2}, Mesh{"ep2_dp2", 4, 1, kGlobalBatch / 4},
                                           Mesh{"ep2_tp2_accumulating", 4, 2, kGlobalBatch / 4},
                                           Mesh{"ep2_mpi", 2, 1, kGlobalBatch / 2, true}),
                         [](const ::testing::TestParamInfo<Mesh>& info) { return info.param.name; });

TEST(ExpertParallel, WithTheLoadBalancingLossFollowsDdpOnTheSameSplit) {
  // The load-balancing loss is each rank's own tokens' (as transformers'),
  // so the reference splits the data over as many ranks.
  const Env aux = {{"COHORT_TEST_PRESET", "tiny-moe"}};
  const WorkerRun ddp = testing::run_worker("moe_aux_ddp", "ddp", 2, 1, kGlobalBatch, kGlobalBatch / 2, kSteps, aux);
  const WorkerRun ep = testing::run_worker("moe_aux_ep2", "ddp", 2, 1, kGlobalBatch, kGlobalBatch / 2, kSteps,
                                           with_ep(aux, 2));
  testing::expect_same_training(ddp, ep, 1e-5, 1e-5, "ep 2 with the load-balancing loss");
}

TEST(ExpertParallel, OtherStrategiesAndBadGroupSizesAreRefused) {
  // zero3 with expert_parallel, and ep 3 on 2 ranks: the worker names the problem and exits non-zero.
  auto group = testing::start_ranks(testing::parallel_worker_path(),
                                    {"zero3", "1", std::to_string(kGlobalBatch), "4", "1",
                                     testing::worker_scratch("moe_refused").string()},
                                    2, with_ep(kNoAux, 2));
  EXPECT_NE(testing::wait_ranks(group, std::chrono::seconds(60), true), "");
}

}  // namespace
}  // namespace cohort::parallel
