// Worker logs across a coordinator restart: the LogBuffer's changes, the
// state database under the same byte caps, `--tail`, and the note that says
// where lines the coordinator no longer has are.
#include <filesystem>

#include "coordinator/log_buffer.h"
#include "coordinator/state_db.h"
#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;
using protocol::LaunchOrder;
using protocol::LogLine;

std::vector<LogLine> numbered(int from, int to, int rank = 0) {
  std::vector<LogLine> out;
  for (int i = from; i < to; ++i) out.push_back({0, 0, rank, std::string("line ").append(std::to_string(i))});
  return out;
}

TEST(LogBufferChanges, HandOverNewLinesOnceAndWhereKeptLinesBegin) {
  LogBuffer logs(5 * 54);  // five lines of "line N" (6 bytes + 48)
  logs.append("j", numbered(0, 3));
  EXPECT_GT(logs.unsaved_bytes(), 0u);
  auto first = logs.take_changes();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].lines.size(), 3u);
  EXPECT_EQ(first[0].first_kept, 1u);
  EXPECT_EQ(logs.unsaved_bytes(), 0u);
  EXPECT_TRUE(logs.take_changes().empty());
  logs.append("j", numbered(3, 8));  // over the cap: lines 1..3 go
  auto second = logs.take_changes();
  ASSERT_EQ(second.size(), 1u);
  ASSERT_EQ(second[0].lines.size(), 5u);
  EXPECT_EQ(second[0].lines.front().seq, 4u);
  EXPECT_EQ(second[0].first_kept, 4u);
  EXPECT_EQ(logs.lines_received("j"), 8u);
  EXPECT_EQ(logs.lines_dropped("j"), 3u);
}

TEST(LogBufferChanges, RestoredLinesKeepTheirNumbersAndNumberingGoesOn) {
  LogBuffer logs;
  std::vector<LogLine> saved = numbered(0, 3);
  for (size_t i = 0; i < saved.size(); ++i) saved[i].seq = 10 + i;  // 10, 11, 12
  logs.restore("j", saved);
  EXPECT_TRUE(logs.take_changes().empty()) << "restored lines are saved already";
  logs.append("j", numbered(3, 4));
  protocol::LogQuery q;
  q.job_id = "j";
  uint64_t last = 0;
  auto got = logs.read(q, &last);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got.front().seq, 10u);
  EXPECT_EQ(got.back().seq, 13u);
  EXPECT_EQ(logs.lines_dropped("j"), 9u);
}

class LogPersistenceTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-logs-XXXXXX";
    dir_ = ::mkdtemp(templ);
  }
  void TearDown() override {
    CoordinatorTest::TearDown();
    fs::remove_all(dir_);
  }
  protocol::LogReply logs(const std::string& id, int tail = 0) {
    protocol::LogQuery q;
    q.job_id = id;
    q.tail = tail;
    auto r = client_->request<protocol::LogReply>(q, 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r ? *r : protocol::LogReply{};
  }
  // Lines reach the database on the coordinator's next tick a second on.
  void let_logs_flush(size_t expected_lines, const std::string& id) {
    clock_.advance(1100ms);
    EXPECT_TRUE(wait_until([&] { return logs(id).lines.size() == expected_lines; }));
    std::this_thread::sleep_for(50ms);  // a few ticks
  }
  std::string dir_;
};

TEST_F(LogPersistenceTest, LogsSurviveARestartWithTheirNumbersAndTailWorks) {
  start(dir_);
  std::string id;
  {
    FakeAgent a(endpoint_, "node-a", 2);
    id = submit(command_job("talks", 1, 2));
    auto l = a.next_as<LaunchOrder>();
    ASSERT_TRUE(l);
    a.send(protocol::LogBatch{id, numbered(0, 5, 1)});
    let_logs_flush(5, id);
    a.exit_all(*l, 0);
    EXPECT_TRUE(wait_for_state(id, "succeeded"));
  }
  stop();
  start(dir_);
  auto all = logs(id);
  ASSERT_EQ(all.lines.size(), 5u);
  EXPECT_EQ(all.lines[0].text, "line 0");
  EXPECT_EQ(all.lines[0].rank, 1);
  EXPECT_EQ(all.lines[4].seq, 5u);
  EXPECT_TRUE(all.note.empty()) << all.note;
  auto tail = logs(id, 2);
  ASSERT_EQ(tail.lines.size(), 2u);
  EXPECT_EQ(tail.lines[0].text, "line 3");
  EXPECT_EQ(tail.last_seq, 5u);
  // Removing the job takes its lines out of the database too.
  auto rm = client_->request<protocol::Ack>(protocol::RemoveJob{id}, 5s);
  ASSERT_TRUE(rm) << rm.status().message();
  stop();
  auto db = StateDb::open(dir_);
  ASSERT_TRUE(db);
  auto rows = (*db)->load_logs();
  ASSERT_TRUE(rows);
  EXPECT_TRUE(rows->empty());
}

TEST_F(LogPersistenceTest, LinesOverTheCapLeaveTheDatabaseAndTheNoteSaysWhereTheyAre) {
  configure_ = [](CoordinatorOptions& o) { o.log_bytes_per_job = 4 * 54; };
  start(dir_);
  FakeAgent a(endpoint_, "node-a", 2);
  std::string id = submit(command_job("floods", 1, 2));
  auto l = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  a.send(protocol::LogBatch{id, numbered(0, 10)});
  let_logs_flush(4, id);
  auto reply = logs(id);
  EXPECT_EQ(reply.lines.front().text, "line 6");
  EXPECT_NE(reply.note.find("6 older line(s) are no longer kept by the coordinator"), std::string::npos) << reply.note;
  EXPECT_NE(reply.note.find("/tmp/floods/logs/attempt-0/rank-<R>.log on each rank's node: node-a (ranks 0-1)"),
            std::string::npos)
      << reply.note;
  stop();
  auto db = StateDb::open(dir_);
  ASSERT_TRUE(db);
  auto rows = (*db)->load_logs();
  ASSERT_TRUE(rows);
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ(rows->front().lines.size(), 4u);
}

TEST_F(LogPersistenceTest, AJobWhoseOutputNeverReachedTheCoordinatorIsSaidSo) {
  start(dir_);
  FakeAgent a(endpoint_, "node-a", 1);
  std::string id = submit(command_job("silent", 1, 1));
  ASSERT_TRUE(a.next_as<LaunchOrder>());
  auto reply = logs(id);
  EXPECT_TRUE(reply.lines.empty());
  EXPECT_NE(reply.note.find("no output of job " + id + " has reached the coordinator"), std::string::npos)
      << reply.note;
  EXPECT_NE(reply.note.find("node-a (rank 0)"), std::string::npos) << reply.note;
}

}  // namespace
}  // namespace cohort::coordinator::testing
