// The launch contract (DESIGN §4): every variable, both `devices` modes, CPU
// slots, and who wins when the job, the agent and cohort disagree.
#include "agent/launch_env.h"

#include <set>
#include <tuple>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

using cohort::jobs::DeviceVisibility;

// Node 1 of 2, four GPUs per node, local rank 2: global rank 6.
LaunchContext context_for_rank6() {
  LaunchContext c;
  c.job_id = "job-42";
  c.node = "node-b";
  c.attempt = 3;
  c.restart_count = 2;
  c.max_restarts = 5;
  c.run_id = "job-42";
  c.rank = 6;
  c.world_size = 8;
  c.local_rank = 2;
  c.local_world_size = 4;
  c.node_rank = 1;
  c.num_nodes = 2;
  c.master_addr = "10.0.0.1";
  c.master_port = 29500;
  c.store_endpoint = "tcp://127.0.0.1:7071";
  c.store_token = "0123456789abcdef0123456789abcdef";
  c.progress_file = "/tmp/run/progress/rank-6";
  c.gpu_indices = {4, 5, 6, 7};
  c.devices = DeviceVisibility::kOwn;
  c.inherited_env = {{"PATH", "/usr/bin:/bin"}, {"HOME", "/home/me"}};
  c.cpu_count = 32;
  return c;
}

TEST(BuildWorkerEnv, SetsEveryContractVariable) {
  EnvMap env = build_worker_env(context_for_rank6());
  const std::map<std::string, std::string> expected = {
      {"RANK", "6"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_RANK", "2"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "6"},
      {"ROLE_WORLD_SIZE", "8"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "5"},
      {"TORCHELASTIC_RUN_ID", "job-42"},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES", "6"},
      {"OMP_NUM_THREADS", "8"},
      {"COHORT_JOB_ID", "job-42"},
      {"COHORT_ATTEMPT", "3"},
      {"COHORT_NODE", "node-b"},
      {"COHORT_STORE", "tcp://127.0.0.1:7071"},
      {"COHORT_STORE_TOKEN", "0123456789abcdef0123456789abcdef"},
      {"COHORT_PROGRESS_FILE", "/tmp/run/progress/rank-6"},
      {"PATH", "/usr/bin:/bin"},
      {"HOME", "/home/me"},
  };
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(env.contains(key)) << key;
    EXPECT_EQ(env.at(key), value) << key;
  }
  for (const auto& key : reserved_worker_env_keys()) EXPECT_TRUE(env.contains(key)) << key;
}

TEST(BuildWorkerEnv, OwnModeShowsEachWorkerOnlyItsGpu) {
  LaunchContext c = context_for_rank6();
  for (int local = 0; local < 4; ++local) {
    c.local_rank = local;
    c.rank = 4 + local;
    EXPECT_EQ(build_worker_env(c).at("CUDA_VISIBLE_DEVICES"), std::to_string(4 + local));
  }
}

TEST(BuildWorkerEnv, NodeModeShowsTheNodesJobGpusSoCudaLocalRankIsOwn) {
  LaunchContext c = context_for_rank6();
  c.devices = DeviceVisibility::kNode;
  EnvMap env = build_worker_env(c);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "4,5,6,7");
  EXPECT_EQ(env.at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
  // cuda:LOCAL_RANK is the LOCAL_RANK-th entry: this worker's own GPU.
  EXPECT_EQ(c.gpu_indices[std::stoi(env.at("LOCAL_RANK"))], 6);
}

TEST(BuildWorkerEnv, CpuSlotsHideEveryGpuInBothModes) {
  for (DeviceVisibility devices : {DeviceVisibility::kOwn, DeviceVisibility::kNode}) {
    LaunchContext c = context_for_rank6();
    c.devices = devices;
    c.gpu_indices.clear();
    c.inherited_env["CUDA_VISIBLE_DEVICES"] = "0,1";
    EnvMap env = build_worker_env(c);
    ASSERT_TRUE(env.contains("CUDA_VISIBLE_DEVICES"));
    EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "");
  }
}

TEST(BuildWorkerEnv, JobEnvCannotOverrideContractVariables) {
  LaunchContext c = context_for_rank6();
  c.job_env = {{"RANK", "0"},        {"WORLD_SIZE", "1"},        {"CUDA_VISIBLE_DEVICES", "0"},
               {"MASTER_PORT", "1"}, {"COHORT_JOB_ID", "other"}, {"NCCL_DEBUG", "WARN"}};
  EnvMap env = build_worker_env(c);
  EXPECT_EQ(env.at("RANK"), "6");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "6");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("COHORT_JOB_ID"), "job-42");
  EXPECT_EQ(env.at("NCCL_DEBUG"), "WARN");
  EXPECT_TRUE(is_reserved_worker_env_key("RANK"));
  EXPECT_TRUE(is_reserved_worker_env_key("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(is_reserved_worker_env_key("NCCL_DEBUG"));
  EXPECT_FALSE(is_reserved_worker_env_key("OMP_NUM_THREADS"));
}

TEST(BuildWorkerEnv, JobEnvOverridesTheAgentsEnvironment) {
  LaunchContext c = context_for_rank6();
  c.inherited_env["NCCL_DEBUG"] = "INFO";
  c.job_env["NCCL_DEBUG"] = "WARN";
  c.job_env["PATH"] = "/opt/venv/bin:/usr/bin";
  EnvMap env = build_worker_env(c);
  EXPECT_EQ(env.at("NCCL_DEBUG"), "WARN");
  EXPECT_EQ(env.at("PATH"), "/opt/venv/bin:/usr/bin");
  EXPECT_EQ(env.at("HOME"), "/home/me");
}

TEST(BuildWorkerEnv, OmpNumThreadsIsTheCoreShareUnlessSetElsewhere) {
  LaunchContext c = context_for_rank6();
  c.cpu_count = 6;  // 6 cores, 4 workers: 1 each, never 0
  EXPECT_EQ(build_worker_env(c).at("OMP_NUM_THREADS"), "1");
  c.cpu_count = 32;
  c.inherited_env["OMP_NUM_THREADS"] = "3";
  EXPECT_EQ(build_worker_env(c).at("OMP_NUM_THREADS"), "3");
  c.job_env["OMP_NUM_THREADS"] = "2";
  EXPECT_EQ(build_worker_env(c).at("OMP_NUM_THREADS"), "2");
  c.cpu_count = 0;  // ask the OS: at least 1
  c.job_env.clear();
  c.inherited_env.erase("OMP_NUM_THREADS");
  EXPECT_GE(std::stoi(build_worker_env(c).at("OMP_NUM_THREADS")), 1);
}

TEST(BuildWorkerEnv, PythonIsUnbufferedUnlessTheJobSaysOtherwise) {
  LaunchContext c = context_for_rank6();
  EXPECT_EQ(build_worker_env(c).at("PYTHONUNBUFFERED"), "1");
  c.job_env["PYTHONUNBUFFERED"] = "";
  EXPECT_EQ(build_worker_env(c).at("PYTHONUNBUFFERED"), "");
}

TEST(BuildWorkerEnv, DropsRanksOfALauncherTheAgentRunsUnder) {
  LaunchContext c = context_for_rank6();
  c.inherited_env.insert({{"SLURM_PROCID", "3"},
                          {"SLURM_JOB_ID", "77"},
                          {"OMPI_COMM_WORLD_RANK", "3"},
                          {"PMI_RANK", "3"},
                          {"TORCHELASTIC_ERROR_FILE", "/tmp/e"},
                          {"COHORT_PROGRESS_FILE", "/x"}});
  c.progress_file.clear();
  EnvMap env = build_worker_env(c);
  for (const char* key : {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                          "TORCHELASTIC_ERROR_FILE", "COHORT_PROGRESS_FILE"}) {
    EXPECT_FALSE(env.contains(key)) << key;
  }
  EXPECT_EQ(env.at("SLURM_JOB_ID"), "77");  // not a rank: kept
  // The job itself may still set a torchelastic extra.
  c.job_env["TORCHELASTIC_ERROR_FILE"] = "/tmp/mine";
  EXPECT_EQ(build_worker_env(c).at("TORCHELASTIC_ERROR_FILE"), "/tmp/mine");
}

TEST(BuildWorkerEnv, TheNodesAddressAndInterfaceReachGlooAndNccl) {
  LaunchContext c = context_for_rank6();
  c.node_address = "10.0.0.2";
  c.node_interface = "eth1";
  EnvMap env = build_worker_env(c);
  EXPECT_EQ(env["COHORT_GLOO_HOSTNAME"], "10.0.0.2");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "=eth1");  // exactly eth1, not eth10
  c.node_interface = "";  // an address that is a name, or no interface holds it
  env = build_worker_env(c);
  EXPECT_EQ(env["COHORT_GLOO_HOSTNAME"], "10.0.0.2");
  EXPECT_FALSE(env.contains("GLOO_SOCKET_IFNAME"));
  EXPECT_FALSE(env.contains("NCCL_SOCKET_IFNAME"));
  c.node_address = "";  // a loopback node: nothing, as before
  env = build_worker_env(c);
  EXPECT_FALSE(env.contains("COHORT_GLOO_HOSTNAME"));
}

TEST(BuildWorkerEnv, ANamedNetworkOverridesTheAgentsEnvironmentADeducedOneDoesNotAndTheJobWinsBoth) {
  LaunchContext c = context_for_rank6();
  c.node_address = "10.0.0.2";
  c.node_interface = "eth1";
  c.inherited_env["NCCL_SOCKET_IFNAME"] = "ib0";
  c.node_network_named = false;  // deduced from the route: the agent's own setting stays
  EXPECT_EQ(build_worker_env(c)["NCCL_SOCKET_IFNAME"], "ib0");
  c.node_network_named = true;  // --interface eth1 said otherwise
  EXPECT_EQ(build_worker_env(c)["NCCL_SOCKET_IFNAME"], "=eth1");
  c.job_env["NCCL_SOCKET_IFNAME"] = "bond0";
  EXPECT_EQ(build_worker_env(c)["NCCL_SOCKET_IFNAME"], "bond0");
}

TEST(ValidateLaunchContext, AcceptsAGoodContext) {
  EXPECT_TRUE(validate_launch_context(context_for_rank6()).is_ok());
  LaunchContext cpu = context_for_rank6();
  cpu.gpu_indices.clear();
  EXPECT_TRUE(validate_launch_context(cpu).is_ok());
}

TEST(ValidateLaunchContext, NamesTheFieldAtFault) {
  auto message_for = [](auto mutate) {
    LaunchContext c = context_for_rank6();
    mutate(c);
    cohort::Status status = validate_launch_context(c);
    EXPECT_FALSE(status.is_ok());
    return status.message();
  };
  EXPECT_NE(message_for([](LaunchContext& c) { c.rank = 8; }).find("rank 8"), std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) { c.local_rank = 4; }).find("local_rank"),
            std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) { c.node_rank = 2; }).find("node_rank"),
            std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) {
              c.gpu_indices = {0, 1};
            }).find("GPU indices"),
            std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) { c.master_port = 0; }).find("master_port"),
            std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) { c.master_addr.clear(); }).find("master_addr"),
            std::string::npos);
  EXPECT_NE(message_for([](LaunchContext& c) { c.job_id.clear(); }).find("job_id"),
            std::string::npos);
}

// Every rank of a nodes × gpus_per_node job, in both modes: ranks distinct and
// node-major, and each worker's own GPU is cuda:0 ("own") or cuda:LOCAL_RANK ("node").
class EveryRank : public ::testing::TestWithParam<std::tuple<int, int, DeviceVisibility>> {};

TEST_P(EveryRank, GetsDistinctRanksAndItsOwnGpu) {
  auto [nodes, gpus, devices] = GetParam();
  std::set<std::string> ranks;
  for (int node = 0; node < nodes; ++node) {
    for (int local = 0; local < gpus; ++local) {
      LaunchContext c = context_for_rank6();
      c.world_size = nodes * gpus;
      c.num_nodes = nodes;
      c.node_rank = node;
      c.local_world_size = gpus;
      c.local_rank = local;
      c.rank = node * gpus + local;
      c.devices = devices;
      c.gpu_indices.clear();
      for (int g = 0; g < gpus; ++g) c.gpu_indices.push_back(g);
      EnvMap env = build_worker_env(c);
      ranks.insert(env.at("RANK"));
      EXPECT_EQ(env.at("WORLD_SIZE"), std::to_string(nodes * gpus));
      EXPECT_EQ(env.at("GROUP_RANK"), std::to_string(node));
      std::string visible = env.at("CUDA_VISIBLE_DEVICES");
      int cuda_ordinal = devices == DeviceVisibility::kOwn ? 0 : local;
      // The cuda_ordinal-th entry of the list is this worker's GPU.
      std::vector<int> list;
      for (size_t start = 0; start < visible.size();) {
        size_t comma = visible.find(',', start);
        if (comma == std::string::npos) comma = visible.size();
        list.push_back(std::stoi(visible.substr(start, comma - start)));
        start = comma + 1;
      }
      ASSERT_LT(cuda_ordinal, static_cast<int>(list.size()));
      EXPECT_EQ(list[cuda_ordinal], local);
    }
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(nodes * gpus));
}

INSTANTIATE_TEST_SUITE_P(NodesByGpus, EveryRank,
                         ::testing::Combine(::testing::Values(1, 3), ::testing::Values(1, 2, 8),
                                            ::testing::Values(DeviceVisibility::kOwn,
                                                              DeviceVisibility::kNode)));

TEST(CurrentEnvironment, ReadsThisProcess) {
  setenv("COHORT_AGENT_TEST_VAR", "a=b", 1);
  EnvMap env = current_environment();
  EXPECT_EQ(env.at("COHORT_AGENT_TEST_VAR"), "a=b");
}

}  // namespace
}  // namespace cohort::agent
