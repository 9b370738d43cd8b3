// Slurm's task variables → a torchrun-style world (see slurm_launch.h).
#include "collective/slurm_launch.h"

#include <cstdlib>

namespace cohort::collective {

namespace {

// A non-negative integer that fits `max`, from variable `name`.
Result<unsigned long long> parse_count(const std::string& name, const std::string& v,
                                       unsigned long long max) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19) {
    return invalid_argument(name + "='" + v + "' is not a non-negative integer");
  }
  unsigned long long x = std::stoull(v);
  if (x > max) return invalid_argument(name + "='" + v + "' is out of range");
  return x;
}

Result<int> required_int(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (v == nullptr) return invalid_argument(std::string(name) + " is not set; srun sets it for every task");
  COHORT_ASSIGN_OR_RETURN(auto x, parse_count(name, v, 1u << 30));
  return int(x);
}

Result<std::string> master_address(const EnvLookup& env) {
  if (const char* addr = env("MASTER_ADDR")) return std::string(addr);
  for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (const char* list = env(var)) {
      auto host = first_slurm_host(list);
      if (!host) return host.status().with_context(var);
      return host;
    }
  }
  if (const char* ip = env("SLURM_LAUNCH_NODE_IPADDR")) return std::string(ip);
  return invalid_argument(
      "no master address: set MASTER_ADDR, or run under srun (SLURM_STEP_NODELIST)");
}

Result<int> master_port(const EnvLookup& env) {
  if (const char* port = env("MASTER_PORT")) {
    COHORT_ASSIGN_OR_RETURN(auto p, parse_count("MASTER_PORT", port, 65535));
    if (p == 0) return invalid_argument("MASTER_PORT='0' is not a port");
    return int(p);
  }
  const char* job = env("SLURM_JOB_ID");
  if (job == nullptr) job = env("SLURM_JOBID");
  if (job == nullptr) return invalid_argument("SLURM_JOB_ID is not set: set MASTER_PORT");
  COHORT_ASSIGN_OR_RETURN(auto job_id, parse_count("SLURM_JOB_ID", job, ~0ull >> 8));
  unsigned long long step_id = 0;
  if (const char* step = env("SLURM_STEP_ID")) {
    COHORT_ASSIGN_OR_RETURN(step_id, parse_count("SLURM_STEP_ID", step, ~0u));
  }
  return slurm_default_master_port(job_id, step_id);
}

}  // namespace

EnvLookup process_environment() {
  return [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
}

int slurm_default_master_port(unsigned long long job_id, unsigned long long step_id) {
  return int(20000 + (job_id * 16 + step_id) % 9500);
}

bool in_slurm_step(const EnvLookup& env) {
  return env("SLURM_PROCID") != nullptr && env("SLURM_STEP_ID") != nullptr &&
         env("SLURM_NTASKS") != nullptr;
}

Result<std::string> first_slurm_host(const std::string& nodelist) {
  std::string host;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    char c = nodelist[i];
    if (c == ']') return invalid_argument("host list '" + nodelist + "' has a ']' without '['");
    if (c != '[') {
      host += c;
      ++i;
      continue;
    }
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) {
      return invalid_argument("host list '" + nodelist + "' has a '[' without ']'");
    }
    // The first number of the first range keeps its zero padding: "03-05" → "03".
    std::string range = nodelist.substr(i + 1, close - i - 1);
    size_t end = range.find_first_not_of("0123456789");
    std::string first = range.substr(0, end);
    if (first.empty()) return invalid_argument("host list '" + nodelist + "': '[" + range + "]' is not a range");
    host += first;
    i = close + 1;
  }
  if (host.empty()) return invalid_argument("host list '" + nodelist + "' names no host");
  return host;
}

Result<int> slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  auto malformed = [&] {
    return invalid_argument("tasks per node '" + tasks_per_node + "' is not a list like 4(x2),3");
  };
  int first = 0;  // the first node the current entry covers
  size_t i = 0;
  while (i < tasks_per_node.size()) {
    size_t comma = tasks_per_node.find(',', i);
    std::string entry = tasks_per_node.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    i = comma == std::string::npos ? tasks_per_node.size() : comma + 1;
    unsigned long long repeat = 1;
    size_t paren = entry.find("(x");
    if (paren != std::string::npos) {
      if (entry.back() != ')') return malformed();
      auto r = parse_count("repeat", entry.substr(paren + 2, entry.size() - paren - 3), 1u << 20);
      if (!r || *r == 0) return malformed();
      repeat = *r;
      entry = entry.substr(0, paren);
    }
    auto tasks = parse_count("tasks", entry, 1u << 20);
    if (!tasks || *tasks == 0) return malformed();
    if (node < first + int(repeat)) return int(*tasks);
    first += int(repeat);
  }
  return invalid_argument("tasks per node '" + tasks_per_node + "' has no entry for node " +
                          std::to_string(node));
}

Result<SlurmTask> read_slurm_task(const EnvLookup& env) {
  SlurmTask t;
  COHORT_ASSIGN_OR_RETURN(t.rank, required_int(env, "SLURM_PROCID"));
  COHORT_ASSIGN_OR_RETURN(t.size, required_int(env, env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                                                                                : "SLURM_NTASKS"));
  COHORT_ASSIGN_OR_RETURN(t.local_rank, required_int(env, "SLURM_LOCALID"));
  COHORT_ASSIGN_OR_RETURN(t.node_rank, required_int(env, "SLURM_NODEID"));
  if (t.size < 1 || t.rank >= t.size) {
    return invalid_argument("SLURM_PROCID=" + std::to_string(t.rank) + " is not below the step's " +
                            std::to_string(t.size) + " tasks");
  }
  const char* per_node_var = env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  if (const char* per_node = env(per_node_var)) {
    auto n = slurm_tasks_on_node(per_node, t.node_rank);
    if (!n) return n.status().with_context(per_node_var);
    t.local_size = *n;
  } else {
    t.local_size = t.size;  // one node: every task is local
  }
  if (t.local_rank >= t.local_size) {
    return invalid_argument("SLURM_LOCALID=" + std::to_string(t.local_rank) + " is not below " +
                            per_node_var + "'s " + std::to_string(t.local_size) + " tasks on node " +
                            std::to_string(t.node_rank));
  }
  COHORT_ASSIGN_OR_RETURN(t.master_addr, master_address(env));
  COHORT_ASSIGN_OR_RETURN(t.master_port, master_port(env));
  return t;
}

}  // namespace cohort::collective
