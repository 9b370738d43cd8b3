// Expert parallelism (parallel.expert_parallel): a mixture of experts whose
// experts split over the ranks of an expert group, tokens travelling to
// them by all-to-all, trains as one rank does: the same per-step losses and
// final parameters (every expert's, gathered from the ranks that hold it),
// for EP 2, EP 2 × DP 2 and EP 2 × TP 2 over Gloo, EP 2 over MPI, under
// DDP, ZeRO-1/2/3 and FSDP2 (the dense parameters sharded over the
// data-parallel axis, the experts over their replicas), and with the
// load-balancing loss beside the DDP run that splits the data as it does.
// Ranks are real processes.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <ostream>

#include <gtest/gtest.h>

#include "models/config.h"
#include "models/param_layout.h"
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
  std::string strategy = "ddp";
};
void PrintTo(const Mesh& m, std::ostream* os) { *os << m.name << " (" << m.strategy << ")"; }

class ExpertParallelMesh : public ::testing::TestWithParam<Mesh> {};

// ep 2: two ranks of four experts each; ep 2 x dp 2: two expert groups,
// whose experts reduce over their replica only; ep 2 x tp 2 with two
// micro-steps a step; ep 2 over MPI. The sharded strategies: their dense
// parameters shard over all dp ranks, the experts over their replicas (two
// ranks at ep 2 x dp 2, one at ep 2 on two ranks).
TEST_P(ExpertParallelMesh, FollowsOneRank) {
  const Mesh& m = GetParam();
  const Env env = with_ep(kNoAux, 2);
  const WorkerRun run =
      m.mpi ? testing::run_worker_mpi("moe_" + m.name, m.strategy, m.world, m.tp, kGlobalBatch, m.micro, kSteps, env)
            : testing::run_worker("moe_" + m.name, m.strategy, m.world, m.tp, kGlobalBatch, m.micro, kSteps, env);
  expect_follows_one_rank(run, m.name);
}

INSTANTIATE_TEST_SUITE_P(ExpertParallel, ExpertParallelMesh,
                         ::testing::Values(Mesh{"ep2", 2, 1, kGlobalBatch / 2}, Mesh{"ep2_dp2", 4, 1, kGlobalBatch / 4},
                                           Mesh{"ep2_tp2_accumulating", 4, 2, kGlobalBatch / 4},
                                           Mesh{"ep2_mpi", 2, 1, kGlobalBatch / 2, true},
                                           Mesh{"ep2_dp2_mpi", 4, 1, kGlobalBatch / 4, true},
                                           Mesh{"zero1_ep2_dp2", 4, 1, kGlobalBatch / 4, false, "zero1"},
                                           Mesh{"zero2_ep2_dp2_accumulating", 4, 1, kGlobalBatch / 8, false, "zero2"},
                                           Mesh{"zero3_ep2", 2, 1, kGlobalBatch / 2, false, "zero3"},
                                           Mesh{"zero3_ep2_dp2", 4, 1, kGlobalBatch / 4, false, "zero3"},
                                           Mesh{"fsdp2_ep2_dp2", 4, 1, kGlobalBatch / 4, false, "fsdp2"},
                                           Mesh{"fsdp2_ep2_tp2_accumulating", 4, 2, kGlobalBatch / 4, false, "fsdp2"},
                                           Mesh{"fsdp2_ep2_mpi", 2, 1, kGlobalBatch / 2, true, "fsdp2"}),
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

TEST(ExpertParallel, Bf16ParameterGathersFollowOneRankGatheringTheSameWay) {
  // Each part (dense, experts) gathers halves and widens them into its
  // range; rounding is elementwise, so the split must not change it. The
  // parameter tolerance is mixed_precision_test's (a master on a bf16
  // rounding boundary may round the other way on N ranks).
  Env bf16 = kNoAux;
  bf16.push_back({"COHORT_TEST_PARAM_DTYPE", "bf16"});
  const WorkerRun reference = testing::run_worker("moe1_bf16", "zero3", 1, 1, kGlobalBatch, kGlobalBatch, kSteps, bf16);
  for (std::string strategy : {"zero3", "fsdp2"}) {
    const WorkerRun run =
        testing::run_worker("moe_bf16_ep2_dp2", strategy, 4, 1, kGlobalBatch, kGlobalBatch / 4, kSteps, with_ep(bf16, 2));
    ASSERT_EQ(run.params.size(), reference.params.size());
    testing::expect_same_training(reference, run, 1e-5, 1e-3, strategy + " ep 2 x dp 2 bf16 gathers");
  }
  const WorkerRun fp32 = one_rank();
  double largest = 0;
  for (size_t s = 0; s < fp32.losses.size(); ++s)
    largest = std::max(largest, std::abs(fp32.losses[s] - reference.losses[s]) / std::abs(fp32.losses[s]));
  EXPECT_GT(largest, 1e-6) << "bf16-rounded parameters should change the losses";
}

// LoRA on a mixture of experts (adapters on the attention projections,
// the experts frozen): its adapters train as on one rank when the frozen
// experts split over 2 ranks (DDP), over 2 of 4 ranks (FSDP2) and beside
// tensor parallelism 2 (ZeRO-2), the
// exchanges carrying the activations' gradients through experts that keep
// none of their own.
TEST(ExpertParallel, LoraAdaptersOnASplitMixtureOfExpertsFollowOneRank) {
  Env lora = kNoAux;
  lora.push_back({"COHORT_TEST_LORA", "4"});
  const WorkerRun reference = testing::run_worker("moe_lora1", "ddp", 1, 1, kGlobalBatch, kGlobalBatch, kSteps, lora);
  ASSERT_FALSE(reference.params.empty());
  const WorkerRun ddp = testing::run_worker("moe_lora_ep2", "ddp", 2, 1, kGlobalBatch, kGlobalBatch / 2, kSteps,
                                            with_ep(lora, 2));
  testing::expect_same_training(reference, ddp, 1e-5, 1e-5, "LoRA, ep 2 (ddp)");
  const WorkerRun fsdp2 = testing::run_worker("moe_lora_ep2_dp2", "fsdp2", 4, 1, kGlobalBatch, kGlobalBatch / 4,
                                              kSteps, with_ep(lora, 2));
  testing::expect_same_training(reference, fsdp2, 1e-5, 1e-5, "LoRA, ep 2 x dp 2 (fsdp2)");
  const WorkerRun tp2 = testing::run_worker("moe_lora_ep2_tp2", "zero2", 4, 2, kGlobalBatch, kGlobalBatch / 2,
                                            kSteps, with_ep(lora, 2));
  testing::expect_same_training(reference, tp2, 1e-5, 1e-5, "LoRA, ep 2 x tp 2 (zero2)");
  // The adapters moved: a run that trained nothing would pass the above.
  EXPECT_NE(reference.losses.front(), reference.losses.back());
}

TEST(ExpertParallel, AGroupSizeThatDoesNotDivideTheRanksIsRefused) {
  // ep 3 on 2 ranks: the worker names the problem and exits non-zero.
  auto group = testing::start_ranks(testing::parallel_worker_path(),
                                    {"zero3", "1", std::to_string(kGlobalBatch), "4", "1",
                                     testing::worker_scratch("moe_refused").string()},
                                    2, with_ep(kNoAux, 3));
  EXPECT_NE(testing::wait_ranks(group, std::chrono::seconds(60), true), "");
}

// zero3 on 4 ranks at ep 2: each rank keeps ceil(dense / 4) of a group's
// dense floats and ceil(experts / 2) of its expert group's experts (the
// two ranks holding them), for parameters, gradients and each AdamW moment.
TEST(ExpertParallel, ZeroThreeKeepsAShareOfTheDenseParametersAndOfItsExperts) {
  auto config = models::preset_config("tiny-moe");
  ASSERT_TRUE(config.is_ok());
  const int dp = 4, ep = 2;
  size_t want[2] = {0, 0};  // floats per rank, by ep rank
  for (int ep_rank = 0; ep_rank < ep; ++ep_rank) {
    auto layout = models::make_param_layout(*config, models::ShardSpec{0, 1, ep_rank, ep});
    ASSERT_TRUE(layout.is_ok());
    for (const auto& g : layout->groups) {
      size_t experts = 0;
      for (const auto& p : g.params) experts += p.expert_parallel ? p.numel : 0;
      want[ep_rank] += (g.numel - experts + dp - 1) / dp + (experts + dp / ep - 1) / (dp / ep);
    }
  }
  const std::string prefix = testing::worker_scratch("moe_memory_zero3").string();
  auto group = testing::start_ranks(testing::parallel_worker_path(),
                                    {"zero3", "1", std::to_string(kGlobalBatch), "2", "1", prefix}, dp,
                                    with_ep(kNoAux, ep));
  ASSERT_EQ(testing::wait_ranks(group), "");
  for (int rank = 0; rank < dp; ++rank) {
    std::ifstream in(prefix + ".rank" + std::to_string(rank) + ".memory");
    size_t params = 0, grads = 0, optimizer = 0;
    ASSERT_TRUE(in >> params >> grads >> optimizer) << "rank " << rank;
    const size_t floats = want[rank % ep];
    EXPECT_EQ(params, floats * sizeof(float)) << "rank " << rank;
    EXPECT_EQ(grads, floats * sizeof(float)) << "rank " << rank;
    EXPECT_EQ(optimizer, 2 * floats * sizeof(float)) << "rank " << rank;
  }
}

}  // namespace
}  // namespace cohort::parallel
