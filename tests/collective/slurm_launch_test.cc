// Slurm's task variables read into ranks and a master, as `srun cohort-worker`
// sees them (no Slurm needed: the environment is a map).
#include "collective/slurm_launch.h"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace cohort::collective {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() || it->second.empty() ? nullptr : it->second.c_str();
    };
  }
};

// Task 5 of `srun -N 2 --ntasks-per-node 4` in job 4242: node 1, local rank 1.
FakeEnv second_node_task() {
  return {{{"SLURM_JOB_ID", "4242"},
           {"SLURM_STEP_ID", "3"},
           {"SLURM_PROCID", "5"},
           {"SLURM_NTASKS", "8"},
           {"SLURM_STEP_NUM_TASKS", "8"},
           {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "1"},
           {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
           {"SLURM_STEP_NODELIST", "gpu[07-08]"},
           {"SLURM_JOB_NODELIST", "gpu[07-08]"},
           {"SLURM_LAUNCH_NODE_IPADDR", "10.1.0.7"}}};
}

TEST(SlurmTask, RanksComeFromTheTaskVariables) {
  FakeEnv env = second_node_task();
  ASSERT_TRUE(in_slurm_step(env.lookup()));
  auto t = read_slurm_task(env.lookup());
  ASSERT_TRUE(t) << t.status().to_string();
  EXPECT_EQ(t->rank, 5);
  EXPECT_EQ(t->size, 8);
  EXPECT_EQ(t->local_rank, 1);
  EXPECT_EQ(t->local_size, 4);
  EXPECT_EQ(t->node_rank, 1);
  EXPECT_EQ(t->master_addr, "gpu07");  // where srun places task 0
  EXPECT_EQ(t->master_port, 20000 + (4242 * 16 + 3) % 9500);
  EXPECT_EQ(t->master_port, slurm_default_master_port(4242, 3));
}

TEST(SlurmTask, MasterAddrAndPortSetByTheUserWin) {
  FakeEnv env = second_node_task();
  env.vars["MASTER_ADDR"] = "10.1.0.99";
  env.vars["MASTER_PORT"] = "29400";
  auto t = read_slurm_task(env.lookup());
  ASSERT_TRUE(t) << t.status().to_string();
  EXPECT_EQ(t->master_addr, "10.1.0.99");
  EXPECT_EQ(t->master_port, 29400);
}

TEST(SlurmTask, TheLaunchNodeAddressIsTheLastResort) {
  FakeEnv env = second_node_task();
  env.vars.erase("SLURM_STEP_NODELIST");
  auto from_job = read_slurm_task(env.lookup());
  ASSERT_TRUE(from_job);
  EXPECT_EQ(from_job->master_addr, "gpu07");
  env.vars.erase("SLURM_JOB_NODELIST");
  auto from_launch = read_slurm_task(env.lookup());
  ASSERT_TRUE(from_launch);
  EXPECT_EQ(from_launch->master_addr, "10.1.0.7");
}

TEST(SlurmTask, StepsOfOneJobGetDifferentPorts) {
  FakeEnv env = second_node_task();
  auto a = read_slurm_task(env.lookup());
  env.vars["SLURM_STEP_ID"].assign(1, '4');  // not = "4": a GCC 12 -Wrestrict false positive
  auto b = read_slurm_task(env.lookup());
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->master_port, b->master_port);
  EXPECT_GE(b->master_port, 20000);
  EXPECT_LT(b->master_port, 29500);
}

TEST(SlurmTask, ABatchScriptIsNotAStep) {
  FakeEnv env = second_node_task();
  env.vars.erase("SLURM_STEP_ID");
  EXPECT_FALSE(in_slurm_step(env.lookup()));
}

TEST(SlurmTask, AMissingOrMalformedVariableIsNamed) {
  FakeEnv env = second_node_task();
  env.vars.erase("SLURM_LOCALID");
  auto missing = read_slurm_task(env.lookup());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("SLURM_LOCALID is not set"), std::string::npos);
  env = second_node_task();
  env.vars["SLURM_PROCID"] = "five";
  auto bad = read_slurm_task(env.lookup());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("SLURM_PROCID='five'"), std::string::npos);
  env = second_node_task();
  env.vars["SLURM_PROCID"] = "8";
  auto beyond = read_slurm_task(env.lookup());
  ASSERT_FALSE(beyond);
  EXPECT_NE(beyond.status().message().find("not below the step's 8 tasks"), std::string::npos);
  env = second_node_task();
  env.vars["SLURM_STEP_TASKS_PER_NODE"] = "4(x";
  auto list = read_slurm_task(env.lookup());
  ASSERT_FALSE(list);
  EXPECT_NE(list.status().message().find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos);
}

TEST(SlurmTask, NoPortWithoutAJobIdOrMasterPort) {
  FakeEnv env = second_node_task();
  env.vars.erase("SLURM_JOB_ID");
  auto t = read_slurm_task(env.lookup());
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("set MASTER_PORT"), std::string::npos);
}

TEST(SlurmHostList, FirstHostExpandsTheFirstRange) {
  EXPECT_EQ(first_slurm_host("gpu[03-05,9],login1").value(), "gpu03");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[01-04]").value(), "rack1-n01");
  EXPECT_EQ(first_slurm_host("node-a,node-b").value(), "node-a");
  EXPECT_EQ(first_slurm_host("solo").value(), "solo");
  EXPECT_EQ(first_slurm_host("n[7]").value(), "n7");
  EXPECT_FALSE(first_slurm_host("gpu[03-05"));
  EXPECT_FALSE(first_slurm_host("gpu]"));
  EXPECT_FALSE(first_slurm_host("gpu[-3]"));
  EXPECT_FALSE(first_slurm_host(""));
}

TEST(SlurmTasksPerNode, CompressedListsAreIndexedByNode) {
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 0).value(), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 1).value(), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 2).value(), 3);
  EXPECT_EQ(slurm_tasks_on_node("8", 0).value(), 8);
  EXPECT_FALSE(slurm_tasks_on_node("4(x2),3", 3));
  EXPECT_FALSE(slurm_tasks_on_node("4(x0)", 0));
  EXPECT_FALSE(slurm_tasks_on_node("x", 0));
  EXPECT_FALSE(slurm_tasks_on_node("4(x2", 0));
}

}  // namespace
}  // namespace cohort::collective
