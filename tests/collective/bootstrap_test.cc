// init_from_environment's choices and errors, and Gloo groups built inside
// one process (threads as ranks) where a real process adds nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>

#include "collective/bootstrap.h"
#include "collective/gloo/gloo_communicator.h"
#include "collective/store/store_backend.h"

namespace cohort::collective {
namespace {

using namespace std::chrono_literals;

// Clears the launcher variables for one test and restores nothing: the
// test binary never relies on them.
class Environment : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"COHORT_STORE", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                          "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                          "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_STEP_ID", "SLURM_NTASKS",
                          "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_ID", "SLURM_STEP_NODELIST",
                          "COHORT_COLLECTIVE_TIMEOUT_S"}) {
      ::unsetenv(v);
    }
  }
};

TEST_F(Environment, NothingSetGivesAWorldOfOne) {
  auto world = init_from_environment();
  ASSERT_TRUE(world.is_ok()) << world.status().to_string();
  EXPECT_EQ(world->launch, Launch::kSingle);
  EXPECT_EQ(world->cpu->size(), 1);
  int32_t x = 5;
  EXPECT_TRUE(world->cpu->all_reduce(&x, 1, DType::kI32).is_ok());
  EXPECT_EQ(x, 5);
}

TEST_F(Environment, MalformedStoreAddressIsNamed) {
  ::setenv("COHORT_STORE", "http://nowhere", 1);
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  auto world = init_from_environment();
  ASSERT_FALSE(world.is_ok());
  EXPECT_NE(world.status().message().find("COHORT_STORE"), std::string::npos)
      << world.status().to_string();
}

TEST_F(Environment, MissingRankIsNamed) {
  ::setenv("COHORT_STORE", "tcp://127.0.0.1:1", 1);
  auto world = init_from_environment();
  ASSERT_FALSE(world.is_ok());
  EXPECT_NE(world.status().message().find("RANK is not set"), std::string::npos)
      << world.status().to_string();
}

// srun without MPI: Slurm's variables are read, and a bad one is named.
TEST_F(Environment, AnSrunTaskWithABadVariableIsNamed) {
  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_STEP_ID", "0", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_NODEID", "0", 1);
  ::setenv("SLURM_LOCALID", "-1", 1);
  auto world = init_from_environment();
  ASSERT_FALSE(world.is_ok());
  EXPECT_NE(world.status().message().find("an srun task"), std::string::npos) << world.status().to_string();
  EXPECT_NE(world.status().message().find("SLURM_LOCALID='-1'"), std::string::npos)
      << world.status().to_string();
}

TEST_F(Environment, RankNotBelowWorldSizeIsRefused) {
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29999", 1);
  ::setenv("RANK", "4", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  auto world = init_from_environment();
  ASSERT_FALSE(world.is_ok());
  EXPECT_NE(world.status().message().find("WORLD_SIZE=4"), std::string::npos)
      << world.status().to_string();
}

TEST(GlooGroup, MissingRankFailsCreationWithinTheTimeout) {
  GlooOptions o;
  o.name = "lonely";
  o.timeout = 500ms;
  auto start = std::chrono::steady_clock::now();
  auto comm = GlooCommunicator::create(store::make_memory_store(), 0, 2, o);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(comm.is_ok());
  EXPECT_NE(comm.status().message().find("gloo group 'lonely'"), std::string::npos)
      << comm.status().to_string();
  EXPECT_LT(took, 5s);
}

TEST(GlooGroup, ArgumentErrorsDoNotBreakTheCommunicator) {
  auto store = store::make_memory_store();
  auto peer =
      std::async(std::launch::async, [&] { return GlooCommunicator::create(store, 1, 2, {}); });
  auto me = GlooCommunicator::create(store, 0, 2, {});
  auto other = peer.get();
  ASSERT_TRUE(me.is_ok() && other.is_ok());
  int32_t x = 1;
  auto bad = (*me)->send(&x, 1, DType::kI32, 7);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("peer rank 7"), std::string::npos);
  EXPECT_EQ((*me)->split({0, 0}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*me)->split({1}, {}).status().code(), StatusCode::kInvalidArgument);
  auto theirs = std::async(std::launch::async, [&] {
    int32_t y = 2;
    Status s = (*other)->all_reduce(&y, 1, DType::kI32);
    return s.is_ok() ? y : -1;
  });
  ASSERT_TRUE((*me)->all_reduce(&x, 1, DType::kI32).is_ok());
  EXPECT_EQ(x, 3);
  EXPECT_EQ(theirs.get(), 3);
}

}  // namespace
}  // namespace cohort::collective
