// StateDb: the coordinator's durable state in SQLite (WAL), so that a
// coordinator killed with `kill -9` and started again has lost no job.
//
// Jobs (with their attempts and events) are stored as one JSON document per
// job, written on every state change; nodes as name, address, GPUs and
// drain state (with its reason); worker log lines within the LogBuffer's caps. WAL
// with synchronous=FULL: a write has reached the disk when save_job returns,
// so an acknowledged job survives a crash. open() runs PRAGMA
// integrity_check and refuses a damaged file (kFailedPrecondition, with what to do),
// and warns about a zero-length one.
//
// Not thread-safe: the coordinator's loop owns it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "coordinator/job_record.h"
#include "coordinator/log_buffer.h"
#include "coordinator/node_registry.h"
#include "protocol/messages.h"

struct sqlite3;

namespace cohort::coordinator {

class StateDb {
 public:
  // Opens (creating) DIR/coordinator.db.
  static Result<std::unique_ptr<StateDb>> open(const std::string& dir);
  ~StateDb();

  Status save_job(const Job& job);
  Status remove_job(const std::string& id);
  Status remove_node(const std::string& name);
  Result<std::vector<Job>> load_jobs();
  // Name, address, GPUs, whether it is drained (and why, when the
  // coordinator drained it) or has left.
  Status save_node(const Node& node);
  struct NodeRow {
    std::string name;
    std::string address;
    std::vector<protocol::GpuDesc> gpus;
    bool drained = false;
    std::string drain_reason;
    bool left = false;
  };
  Result<std::vector<NodeRow>> load_nodes();
  // The agent key each node name is bound to (protocol/security.h); the
  // binding goes with remove_node.
  Status save_node_key(const std::string& name, const std::string& public_key);
  Result<std::map<std::string, std::string>> load_node_keys();

  // Worker log lines (state_db_logs.cc): the LogBuffer's changes in one
  // transaction (new lines, and older ones its caps dropped), all of them
  // back at start, a removed or retired job's dropped.
  Status save_logs(const std::vector<LogBuffer::Changes>& changes);
  Status remove_logs(const std::string& job_id);
  struct JobLines {
    std::string job_id;
    std::vector<protocol::LogLine> lines;  // oldest first
  };
  Result<std::vector<JobLines>> load_logs();

 private:
  explicit StateDb(sqlite3* db) : db_(db) {}
  Status exec(const std::string& sql);
  Status create_log_table();
  // Adds `column` (with its SQL type and default) to `table` when a database
  // made by an older coordinator lacks it.
  Status add_column_if_missing(const std::string& table, const std::string& column, const std::string& decl);
  Status check_integrity(const std::string& path);
  sqlite3* db_;
};

}  // namespace cohort::coordinator
