// StateDb over the SQLite C API.
#include "coordinator/state_db.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "coordinator/sqlite_statement.h"
#include "protocol/codec.h"

namespace cohort::coordinator {

Result<std::unique_ptr<StateDb>> StateDb::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create state directory " + dir + ": " + ec.message());
  // The database holds [job.env] values and serve api_keys: the folder is
  // 0700 and the file 0600 (SQLite gives its -wal and -shm files the
  // database file's mode).
  if (::chmod(dir.c_str(), 0700) != 0) return errno_error("cannot chmod 0700 state directory " + dir);
  std::string path = (std::filesystem::path(dir) / "coordinator.db").string();
  if (std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec) {
    // Empty is what a fresh database looks like too, but one that is there
    // and empty was usually truncated: say so rather than start quietly.
    spdlog::warn("{} is empty (0 bytes): starting with no jobs and no nodes. If this coordinator "
                 "had state before, restore the file from a backup before submitting",
                 path);
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return errno_error("cannot open " + path);
  bool private_mode = ::fchmod(fd, 0600) == 0;
  ::close(fd);
  if (!private_mode) return errno_error("cannot chmod 0600 " + path);
  for (const char* suffix : {"-wal", "-shm"}) {
    std::string side = path + suffix;
    if (std::filesystem::exists(side, ec)) (void)::chmod(side.c_str(), 0600);  // made by an older coordinator
  }
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    Status s = io_error("cannot open " + path + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<StateDb> state(new StateDb(db));
  // A damaged file is refused at start: running on would acknowledge jobs
  // it cannot store (seen: "database disk image is malformed" per submit).
  COHORT_RETURN_IF_ERROR(state->check_integrity(path));
  COHORT_RETURN_IF_ERROR(state->exec("PRAGMA journal_mode=WAL"));
  // FULL: a job is acknowledged only once its row is on disk, WAL included.
  COHORT_RETURN_IF_ERROR(state->exec("PRAGMA synchronous=FULL"));
  COHORT_RETURN_IF_ERROR(state->exec(
      "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, seq INTEGER, doc TEXT NOT NULL)"));
  COHORT_RETURN_IF_ERROR(state->exec(
      "CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, address TEXT, gpus TEXT)"));
  COHORT_RETURN_IF_ERROR(state->add_column_if_missing("nodes", "drained", "INTEGER NOT NULL DEFAULT 0"));
  COHORT_RETURN_IF_ERROR(state->add_column_if_missing("nodes", "left_cluster", "INTEGER NOT NULL DEFAULT 0"));
  COHORT_RETURN_IF_ERROR(state->add_column_if_missing("nodes", "drain_reason", "TEXT NOT NULL DEFAULT ''"));
  COHORT_RETURN_IF_ERROR(state->exec(
      "CREATE TABLE IF NOT EXISTS node_keys (name TEXT PRIMARY KEY, public_key TEXT NOT NULL)"));
  COHORT_RETURN_IF_ERROR(state->create_log_table());
  return state;
}

StateDb::~StateDb() { sqlite3_close(db_); }

Status StateDb::check_integrity(const std::string& path) {
  Statement s;
  std::string verdict;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA integrity_check", -1, &s.stmt, nullptr);
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
      const char* t = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
      if (verdict.size() < 400) verdict += std::string(verdict.empty() ? "" : "; ") + (t ? t : "");
    }
  }
  if ((rc == SQLITE_DONE && verdict == "ok")) return Status::ok();
  if (verdict.empty()) verdict = sqlite3_errmsg(db_);
  return failed_precondition(path + " is damaged (" + verdict +
                   "). The coordinator will not start on it: restore it from a backup, or move it "
                   "aside (mv " + path + " " + path + ".damaged) to start with no state; agents "
                   "re-register and report the workers they still run");
}

Status StateDb::remove_job(const std::string& id) {
  Statement s;
  if (sqlite3_prepare_v2(db_, "DELETE FROM jobs WHERE id = ?", -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "removing job " + id);
  }
  sqlite3_bind_text(s.stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "removing job " + id);
  return Status::ok();
}

Status StateDb::remove_node(const std::string& name) {
  Statement s;
  if (sqlite3_prepare_v2(db_, "DELETE FROM nodes WHERE name = ?", -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "removing node " + name);
  }
  sqlite3_bind_text(s.stmt, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "removing node " + name);
  Statement k;
  if (sqlite3_prepare_v2(db_, "DELETE FROM node_keys WHERE name = ?", -1, &k.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "unbinding node " + name + " from its key");
  }
  sqlite3_bind_text(k.stmt, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(k.stmt) != SQLITE_DONE) return sqlite_error(db_, "unbinding node " + name + " from its key");
  return Status::ok();
}

Status StateDb::save_node_key(const std::string& name, const std::string& public_key) {
  Statement s;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO node_keys (name, public_key) VALUES (?, ?)", -1, &s.stmt,
                         nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "binding node " + name + " to its key");
  }
  sqlite3_bind_text(s.stmt, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.stmt, 2, public_key.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "binding node " + name + " to its key");
  return Status::ok();
}

Result<std::map<std::string, std::string>> StateDb::load_node_keys() {
  Statement s;
  if (sqlite3_prepare_v2(db_, "SELECT name, public_key FROM node_keys", -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "loading node keys");
  }
  std::map<std::string, std::string> keys;
  int rc;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    const char* n = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
    const char* k = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
    if (n && k) keys[n] = k;
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, "loading node keys");
  return keys;
}

Status StateDb::add_column_if_missing(const std::string& table, const std::string& column,
                                     const std::string& decl) {
  Statement s;
  std::string sql = "PRAGMA table_info(" + table + ")";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "reading the columns of " + table);
  }
  while (sqlite3_step(s.stmt) == SQLITE_ROW) {
    const char* name = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 1));
    if (name && column == name) return Status::ok();
  }
  return exec("ALTER TABLE " + table + " ADD COLUMN " + column + " " + decl);
}

Status StateDb::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string text = error ? error : "unknown error";
    sqlite3_free(error);
    return io_error("sqlite: " + sql + ": " + text);
  }
  return Status::ok();
}

Status StateDb::save_job(const Job& job) {
  Statement s;
  const char* sql = "INSERT OR REPLACE INTO jobs (id, seq, doc) VALUES (?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "saving job " + job.id);
  }
  std::string doc = job_to_json(job).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_text(s.stmt, 1, job.id.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s.stmt, 2, int64_t(job.seq));
  sqlite3_bind_text(s.stmt, 3, doc.c_str(), int(doc.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "saving job " + job.id);
  return Status::ok();
}

Result<std::vector<Job>> StateDb::load_jobs() {
  Statement s;
  if (sqlite3_prepare_v2(db_, "SELECT doc FROM jobs ORDER BY seq", -1, &s.stmt, nullptr) !=
      SQLITE_OK) {
    return sqlite_error(db_, "loading jobs");
  }
  std::vector<Job> jobs;
  int rc;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
    auto j = nlohmann::json::parse(text ? text : "", nullptr, false);
    if (j.is_discarded()) return invalid_argument("a job record in the state database is not JSON");
    COHORT_ASSIGN_OR_RETURN(Job job, job_from_json(j));
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, "loading jobs");
  return jobs;
}

Status StateDb::save_node(const Node& node) {
  Statement s;
  const char* sql =
      "INSERT OR REPLACE INTO nodes (name, address, gpus, drained, left_cluster, drain_reason) "
      "VALUES (?, ?, ?, ?, ?, ?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "saving node " + node.name);
  }
  std::string doc = nlohmann::json(node.gpus).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_text(s.stmt, 1, node.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.stmt, 2, node.address.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s.stmt, 3, doc.c_str(), int(doc.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int(s.stmt, 4, node.drained ? 1 : 0);
  sqlite3_bind_int(s.stmt, 5, node.state == NodeState::kLeft ? 1 : 0);
  sqlite3_bind_text(s.stmt, 6, node.drain_reason.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "saving node " + node.name);
  return Status::ok();
}

Result<std::vector<StateDb::NodeRow>> StateDb::load_nodes() {
  Statement s;
  if (sqlite3_prepare_v2(db_, "SELECT name, address, gpus, drained, left_cluster, drain_reason FROM nodes ORDER BY name",
                         -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "loading nodes");
  }
  std::vector<NodeRow> rows;
  int rc;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    NodeRow row;
    auto column = [&](int i) {
      const char* t = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, i));
      return std::string(t ? t : "");
    };
    row.name = column(0);
    row.address = column(1);
    row.drained = sqlite3_column_int(s.stmt, 3) != 0;
    row.left = sqlite3_column_int(s.stmt, 4) != 0;
    row.drain_reason = column(5);
    auto j = nlohmann::json::parse(column(2), nullptr, false);
    if (j.is_array()) {
      try {
        row.gpus = j.get<std::vector<protocol::GpuDesc>>();
      } catch (const std::exception&) {
        // A node whose GPU list is unreadable is re-learned when it registers.
      }
    }
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, "loading nodes");
  return rows;
}

}  // namespace cohort::coordinator
