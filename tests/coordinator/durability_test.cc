// Durability findings of issue 19: a damaged database is refused at start,
// an empty one is warned about, and a job the database did not take is not
// acknowledged.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;

std::string temp_dir() {
  char templ[] = "/tmp/cohort-durable-XXXXXX";
  return ::mkdtemp(templ);
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
  CoordinatorOptions options;
  options.listen = "tcp://127.0.0.1:0";
  options.state_dir = dir;
  boost::asio::io_context io;
  auto c = Coordinator::start(io, options);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("is damaged"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("restore it from a backup"), std::string::npos);
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
  auto refused = client_->request<protocol::SubmitReply>(protocol::SubmitJob{command_job("lost", 1, 1)}, 5s);
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

}  // namespace
}  // namespace cohort::coordinator::testing
