// Private to the state database (state_db*.cc): a prepared statement that is
// finalized on every path, and SQLite's own message as a Status.
#pragma once

#include <string>

#include <sqlite3.h>

#include "base/status.h"

namespace cohort::coordinator {

struct Statement {
  sqlite3_stmt* stmt = nullptr;
  ~Statement() { sqlite3_finalize(stmt); }
};

inline Status sqlite_error(sqlite3* db, const std::string& what) {
  return io_error(what + ": " + sqlite3_errmsg(db));
}

}  // namespace cohort::coordinator
