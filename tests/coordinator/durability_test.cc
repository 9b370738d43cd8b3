// Durability findings of issue 19: a damaged database is refused at start,
// an empty one is warned about, and a job the database did not take is not
// acknowledged. Job records of the format before the job file was the job's
// one copy ("control": its fields and the file together) still load.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;

std::string temp_dir() {
  char templ[] = "/tmp/cohort-durable-XXXXXX";
  return ::mkdtemp(templ);
}

// Why a coordinator on the state in `dir` does not start (ok when it does).
Status start_status(const std::string& dir) {
  CoordinatorOptions options;
  options.listen = "tcp://127.0.0.1:0";
  options.state_dir = dir;
  boost::asio::io_context io;
  return status_of(Coordinator::start(io, options));
}

// Rewrites every job record of the database in `dir` with `edit`.
void rewrite_job_records(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
  std::vector<std::pair<std::string, std::string>> rows;
  sqlite3_stmt* select = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT id, doc FROM jobs", -1, &select, nullptr), SQLITE_OK);
  while (sqlite3_step(select) == SQLITE_ROW) {
    rows.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(select, 0)),
                      reinterpret_cast<const char*>(sqlite3_column_text(select, 1)));
  }
  sqlite3_finalize(select);
  for (auto& [id, doc] : rows) {
    auto j = nlohmann::json::parse(doc);
    edit(j);
    const std::string text = j.dump();
    sqlite3_stmt* update = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE jobs SET doc = ? WHERE id = ?", -1, &update, nullptr), SQLITE_OK);
    sqlite3_bind_text(update, 1, text.c_str(), int(text.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(update, 2, id.c_str(), int(id.size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(update), SQLITE_DONE);
    sqlite3_finalize(update);
  }
  sqlite3_close(db);
}

// A record as the format before wrote it: the control fields and, among
// them, the resolved job file.
void to_previous_format(nlohmann::json& record, bool with_file) {
  nlohmann::json control = {{"name", "ignored"}, {"kind", "command"}, {"nodes_min", 1},
                            {"nodes_max", 1},     {"gpus_per_node", 1},  {"argv", {"true"}},
                            {"output_dir", "/tmp/x"}};
  if (with_file) control["job_toml"] = record.at("job_toml");
  record.erase("job_toml");
  record["control"] = control;
}

TEST_F(CoordinatorTest, ARecordOfThePreviousFormatLoadsThroughItsJobFile) {
  std::string dir = temp_dir();
  start(dir);
  auto spec = command_job("older", 1, 2);
  spec.job.env["KEPT"] = "yes";
  const std::string id = submit(spec);  // no node: it stays queued
  stop();
  rewrite_job_records(dir, [](nlohmann::json& j) { to_previous_format(j, /*with_file=*/true); });
  start(dir);
  const protocol::JobInfo info = job(id);
  EXPECT_EQ(info.name, "older");
  EXPECT_EQ(info.gpus_per_node, 2);
  EXPECT_EQ(info.state, "queued");
  FakeAgent n(endpoint_, "node-1", 2);
  auto order = n.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(order);
  EXPECT_EQ(order->job_toml, jobs::to_toml(spec));
  auto control = protocol::job_control_from_toml(order->job_toml);
  ASSERT_TRUE(control) << control.status().message();
  EXPECT_EQ(control->env.at("KEPT"), "yes");
  stop();
  fs::remove_all(dir);
}

TEST_F(CoordinatorTest, ARecordWithoutItsJobFileIsRefusedWithAWayForward) {
  std::string dir = temp_dir();
  start(dir);
  const std::string id = submit(command_job("fileless", 1, 1));
  stop();
  rewrite_job_records(dir, [](nlohmann::json& j) { to_previous_format(j, /*with_file=*/false); });
  Status c = start_status(dir);
  ASSERT_FALSE(c);
  EXPECT_NE(c.message().find("job record " + id + " cannot be read"), std::string::npos)
      << c.message();
  EXPECT_NE(c.message().find("DELETE FROM jobs WHERE id='" + id + "'"), std::string::npos)
      << c.message();
  fs::remove_all(dir);
}

TEST_F(CoordinatorTest, ADamagedDatabaseIsRefusedWithAWayForward) {
  std::string dir = temp_dir();
  start(dir);
  for (int i = 0; i < 40; ++i) submit(command_job("fill" + std::to_string(i), 1, 1));
  stop();
  std::string db = dir + "/coordinator.db";
  // Fold the WAL into the file, as a clean shutdown would, then damage it.
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_exec(handle, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_close(handle);
  ASSERT_GT(fs::file_size(db), 12288u);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8192);
    std::string garbage(4096, '\x5a');
    f.write(garbage.data(), std::streamsize(garbage.size()));
  }
  Status c = start_status(dir);
  ASSERT_FALSE(c);
  EXPECT_NE(c.message().find("is damaged"), std::string::npos) << c.message();
  EXPECT_NE(c.message().find("restore it from a backup"), std::string::npos);
  fs::remove_all(dir);
}

TEST_F(CoordinatorTest, AnEmptyDatabaseStartsEmpty) {
  std::string dir = temp_dir();
  std::ofstream(dir + "/coordinator.db").close();  // zero bytes
  start(dir);
  auto list = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  ASSERT_TRUE(list);
  EXPECT_TRUE(list->jobs.empty());
  stop();
  fs::remove_all(dir);
}

TEST_F(CoordinatorTest, AJobIsAcknowledgedOnlyOnceItIsInTheDatabase) {
  std::string dir = temp_dir();
  start(dir);
  std::string first = submit(command_job("first", 1, 1));
  // Another connection holds the write lock: the coordinator cannot save.
  sqlite3* lock = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &lock), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(lock, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto refused = client_->request<protocol::SubmitReply>(submit_of(command_job("lost", 1, 1)), 5s);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("was not submitted"), std::string::npos)
      << refused.status().message();
  sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(lock);
  auto list = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->jobs.size(), 1u);  // the refused job is nowhere
  EXPECT_EQ(list->jobs[0].id, first);
  stop();
  start(dir);
  list = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->jobs.size(), 1u);
  stop();
  fs::remove_all(dir);
}

// The database holds [job.env] values (issue 34, item 9): the folder is the
// owner's only, and so are the database and its WAL files, also when an
// older coordinator made them readable.
TEST_F(CoordinatorTest, TheStateDirectoryIs0700AndItsDatabaseFiles0600) {
  std::string dir = temp_dir();
  fs::permissions(dir, fs::perms::all);
  std::ofstream(dir + "/coordinator.db").close();
  fs::permissions(dir + "/coordinator.db", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                                fs::perms::others_read);
  start(dir);
  auto spec = command_job("secret", 1, 1);
  spec.job.env["API_TOKEN"] = "s3cret";
  submit(spec);
  auto mode = [](const std::string& p) { return fs::status(p).permissions() & fs::perms::all; };
  EXPECT_EQ(mode(dir), fs::perms::owner_all);
  for (const char* file : {"coordinator.db", "coordinator.db-wal", "coordinator.db-shm"}) {
    ASSERT_TRUE(fs::exists(dir + "/" + file)) << file;
    EXPECT_EQ(mode(dir + "/" + file), fs::perms::owner_read | fs::perms::owner_write) << file;
  }
  stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::coordinator::testing
