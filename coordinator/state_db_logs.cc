// StateDb: worker log lines (the LogBuffer's contents, under its byte caps),
// so that `cohort logs` still has them after a coordinator restart.
//
// One row per line; written in one transaction per flush (the coordinator
// flushes once a second, so a kill -9 loses at most that much, which the
// nodes' per-rank files still hold).
#include "coordinator/sqlite_statement.h"
#include "coordinator/state_db.h"

namespace cohort::coordinator {

Status StateDb::create_log_table() {
  return exec("CREATE TABLE IF NOT EXISTS log_lines (job_id TEXT NOT NULL, seq INTEGER NOT NULL, attempt INTEGER, "
              "rank INTEGER, text TEXT, PRIMARY KEY (job_id, seq)) WITHOUT ROWID");
}

Status StateDb::save_logs(const std::vector<LogBuffer::Changes>& changes) {
  if (changes.empty()) return Status::ok();
  COHORT_RETURN_IF_ERROR(exec("BEGIN"));
  Statement insert, trim;
  bool ok = sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO log_lines (job_id, seq, attempt, rank, text) "
                                    "VALUES (?, ?, ?, ?, ?)", -1, &insert.stmt, nullptr) == SQLITE_OK &&
            sqlite3_prepare_v2(db_, "DELETE FROM log_lines WHERE job_id = ? AND seq < ?", -1, &trim.stmt,
                               nullptr) == SQLITE_OK;
  for (size_t i = 0; ok && i < changes.size(); ++i) {
    const auto& c = changes[i];
    for (const auto& line : c.lines) {
      sqlite3_reset(insert.stmt);
      sqlite3_bind_text(insert.stmt, 1, c.job_id.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(insert.stmt, 2, int64_t(line.seq));
      sqlite3_bind_int(insert.stmt, 3, line.attempt);
      sqlite3_bind_int(insert.stmt, 4, line.rank);
      sqlite3_bind_text(insert.stmt, 5, line.text.data(), int(line.text.size()), SQLITE_TRANSIENT);
      if (sqlite3_step(insert.stmt) != SQLITE_DONE) ok = false;
      if (!ok) break;
    }
    sqlite3_reset(trim.stmt);
    sqlite3_bind_text(trim.stmt, 1, c.job_id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(trim.stmt, 2, int64_t(c.first_kept));
    if (ok && sqlite3_step(trim.stmt) != SQLITE_DONE) ok = false;
  }
  if (!ok) {
    Status s = sqlite_error(db_, "saving log lines");
    (void)exec("ROLLBACK");
    return s;
  }
  return exec("COMMIT");
}

Status StateDb::remove_logs(const std::string& job_id) {
  Statement s;
  if (sqlite3_prepare_v2(db_, "DELETE FROM log_lines WHERE job_id = ?", -1, &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "removing the log lines of " + job_id);
  }
  sqlite3_bind_text(s.stmt, 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s.stmt) != SQLITE_DONE) return sqlite_error(db_, "removing the log lines of " + job_id);
  return Status::ok();
}

Result<std::vector<StateDb::JobLines>> StateDb::load_logs() {
  Statement s;
  if (sqlite3_prepare_v2(db_, "SELECT job_id, seq, attempt, rank, text FROM log_lines ORDER BY job_id, seq", -1,
                         &s.stmt, nullptr) != SQLITE_OK) {
    return sqlite_error(db_, "loading log lines");
  }
  std::vector<JobLines> out;
  int rc;
  while ((rc = sqlite3_step(s.stmt)) == SQLITE_ROW) {
    const char* job = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 0));
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(s.stmt, 4));
    std::string id = job ? job : "";
    if (out.empty() || out.back().job_id != id) out.push_back({id, {}});
    protocol::LogLine line;
    line.seq = uint64_t(sqlite3_column_int64(s.stmt, 1));
    line.attempt = sqlite3_column_int(s.stmt, 2);
    line.rank = sqlite3_column_int(s.stmt, 3);
    line.text.assign(text ? text : "", size_t(sqlite3_column_bytes(s.stmt, 4)));
    out.back().lines.push_back(std::move(line));
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, "loading log lines");
  return out;
}

}  // namespace cohort::coordinator
