// The shared-storage check and the node-local resume rule.
#include "train/checkpoint_storage.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/env_knobs.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
constexpr size_t kNameRecord = 128;  // bytes per rank when node names are gathered

std::string this_node() {
  if (const char* node = read_env_knob(EnvKnob::kNode)) return node;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
}

// "node-a, node-b": the distinct nodes of `ranks`, first seen first.
std::string node_list(const std::vector<std::string>& rank_nodes, const std::vector<int>& ranks) {
  std::vector<std::string> seen;
  for (int r : ranks) {
    if (std::find(seen.begin(), seen.end(), rank_nodes[size_t(r)]) == seen.end()) seen.push_back(rank_nodes[size_t(r)]);
  }
  std::string out;
  for (const auto& n : seen) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string node_list(const std::vector<std::string>& rank_nodes) {
  std::vector<int> all(rank_nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  return node_list(rank_nodes, all);
}

// Every rank's flag, in rank order.
Result<std::vector<uint8_t>> gather_flags(collective::Communicator& world, bool flag) {
  uint8_t mine = flag ? 1 : 0;
  std::vector<uint8_t> all(size_t(world.size()));
  COHORT_RETURN_IF_ERROR(world.all_gather(&mine, all.data(), 1, collective::DType::kU8));
  return all;
}

}  // namespace

Result<parallel::CheckpointStorage> describe_storage(const jobs::JobSpec& spec, const collective::World& world) {
  parallel::CheckpointStorage storage;
  storage.node_local = spec.train.checkpoint_storage == "node-local";
  storage.node = this_node();
  storage.local_rank = world.local_rank;
  std::vector<char> mine(kNameRecord, '\0'), all(kNameRecord * size_t(world.size));
  std::memcpy(mine.data(), storage.node.data(), std::min(storage.node.size(), kNameRecord - 1));
  COHORT_RETURN_IF_ERROR(world.cpu->all_gather(mine.data(), all.data(), kNameRecord, collective::DType::kU8)
                             .with_context("gathering the ranks' node names"));
  for (int r = 0; r < world.size; ++r) storage.rank_nodes.emplace_back(all.data() + size_t(r) * kNameRecord);
  return storage;
}

Status check_shared_output_dir(const std::string& output_dir, const parallel::CheckpointStorage& storage,
                               collective::Communicator& world) {
  // A fresh name per attempt: a file left by an earlier attempt, or a stale
  // negative lookup cached by an NFS client, cannot answer for this one.
  char nonce[17] = {};
  if (world.rank() == 0) {
    std::random_device random;
    for (int i = 0; i < 2; ++i) std::snprintf(nonce + 8 * i, 9, "%08x", unsigned(random()));
  }
  COHORT_RETURN_IF_ERROR(world.broadcast(nonce, 16, collective::DType::kU8).with_context("storage check"));
  fs::path marker = fs::path(output_dir) / ".cohort-storage" / (std::string("rank0-") + nonce);
  const std::string expected = "written by rank 0 on " + storage.rank_nodes.front() + "\n";
  Status written = Status::ok();
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(marker.parent_path(), ec);
    std::ofstream(marker) << expected;
    if (ec || !fs::exists(marker)) written = io_error("cannot write the storage marker " + marker.string());
  }
  auto wrote = gather_flags(world, written.is_ok());
  if (!wrote) return wrote.status().with_context("storage check");
  if (!(*wrote)[0]) return written.is_ok() ? io_error("rank 0 could not write " + marker.string()) : written;
  std::string seen;
  {
    std::ifstream in(marker);
    std::getline(in, seen);
  }
  auto sees = gather_flags(world, seen + "\n" == expected);
  if (!sees) return sees.status().with_context("storage check");
  if (world.rank() == 0) {
    std::error_code ec;
    fs::remove(marker, ec);
  }
  std::vector<int> blind;
  for (int r = 0; r < world.size(); ++r) {
    if (!(*sees)[size_t(r)]) blind.push_back(r);
  }
  if (blind.empty()) return Status::ok();
  std::string who = fmt::format("rank {} on {}", blind.front(), storage.rank_nodes[size_t(blind.front())]);
  if (blind.size() > 1) who += fmt::format(" (and {} more rank(s), on {})", blind.size() - 1, node_list(storage.rank_nodes, blind));
  return failed_precondition(fmt::format(
      "output_dir {} is not storage every node shares: {} cannot see {}, which rank 0 wrote on {}. Every rank "
      "writes its checkpoint shards there and a resume reads any of them: put output_dir on a filesystem all "
      "nodes mount at the same path (NFS, Lustre, ...), or set train.checkpoint_storage = \"node-local\" (each "
      "node keeps its own shards; a resume then needs the same nodes)",
      output_dir, who, marker.string(), storage.rank_nodes.front()));
}

Result<std::string> resume_checkpoint(const std::string& output_dir, const parallel::CheckpointStorage& storage,
                                      collective::Communicator& world) {
  if (!storage.node_local) return parallel::latest_checkpoint(output_dir);
  std::string dir = parallel::latest_checkpoint_in(parallel::checkpoint_root(output_dir, storage));
  int64_t step = -1;
  std::vector<std::string> saved_nodes;
  if (!dir.empty()) {
    std::ifstream in(fs::path(dir) / "index.json");
    auto index = nlohmann::json::parse(in, nullptr, false);
    if (index.is_object() && index.contains("step") && index.contains("rank_nodes")) {
      step = index.value("step", int64_t(-1));
      for (const auto& n : index["rank_nodes"]) saved_nodes.push_back(n.is_string() ? n.get<std::string>() : "");
    }
  }
  std::vector<int64_t> steps(size_t(world.size()));
  COHORT_RETURN_IF_ERROR(world.all_gather(&step, steps.data(), 1, collective::DType::kI64)
                             .with_context("agreeing on the checkpoint to resume from"));
  bool none = std::all_of(steps.begin(), steps.end(), [](int64_t s) { return s < 0; });
  if (none) return std::string();
  const std::string rule =
      "node-local checkpoints (train.checkpoint_storage = \"node-local\") resume only on the nodes that wrote "
      "them, with the same ranks on each";
  if (std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != steps.front(); })) {
    // Per node, the step it holds.
    std::string held;
    std::set<std::string> listed;
    for (int r = 0; r < world.size(); ++r) {
      const std::string& node = storage.rank_nodes[size_t(r)];
      if (!listed.insert(node).second) continue;
      held += (held.empty() ? "" : ", ") + node + ": " +
              (steps[size_t(r)] < 0 ? std::string("none") : "step-" + std::to_string(steps[size_t(r)]));
    }
    return failed_precondition(fmt::format(
        "{}; this attempt's nodes hold different ones in {}/checkpoints/<node> ({}). Run the job on the nodes "
        "that saved the newest one, or set train.resume = false to start afresh",
        rule, output_dir, held));
  }
  auto matches = gather_flags(world, saved_nodes == storage.rank_nodes);
  if (!matches) return matches.status();
  auto mismatch = std::find(matches->begin(), matches->end(), uint8_t(0));
  if (mismatch == matches->end()) return dir;
  // Every rank says the same: what the first rank that disagrees has on disk.
  collective::BroadcastOptions from;
  from.root = int(mismatch - matches->begin());
  char saved[4096] = {};
  if (world.rank() == from.root) {
    std::string text = saved_nodes.empty() ? std::string("unknown nodes")
                                           : node_list(saved_nodes) + " (" + std::to_string(saved_nodes.size()) +
                                                 " ranks)";
    std::memcpy(saved, text.data(), std::min(text.size(), sizeof saved - 1));
  }
  COHORT_RETURN_IF_ERROR(world.broadcast(saved, sizeof saved, collective::DType::kU8, from));
  return failed_precondition(fmt::format(
      "{}; step-{} on {} was saved with ranks on {}, and this attempt runs on {} ({} ranks). Run the job on "
      "those nodes again, or set train.resume = false to start afresh",
      rule, steps.front(), storage.rank_nodes[size_t(from.root)], saved, node_list(storage.rank_nodes),
      storage.rank_nodes.size()));
}

}  // namespace cohort::train
