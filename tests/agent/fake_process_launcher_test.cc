// FakeProcessLauncher: what agent tests rely on it to record and replay.
#include "agent/fake_process_launcher.h"

#include <signal.h>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

TEST(FakeProcessLauncher, RecordsSpawnsAndReplaysLinesAndExits) {
  FakeProcessLauncher launcher;
  std::vector<std::string> lines;
  std::optional<ExitStatus> exit;
  SpawnOptions options;
  options.argv = {"python3", "train.py"};
  options.env = {{"RANK", "1"}};
  options.working_dir = "/work";
  options.on_line = [&](OutputStream stream, std::string_view line) {
    lines.push_back(std::string(to_string(stream)) + " " + std::string(line));
  };
  options.on_exit = [&](const ExitStatus& status) { exit = status; };
  auto handle = launcher.spawn(options);
  ASSERT_TRUE(handle.is_ok());
  ASSERT_EQ(launcher.spawn_count(), 1u);
  FakeProcessLauncher::Record record = launcher.record(0);
  EXPECT_EQ(record.options.argv, options.argv);
  EXPECT_EQ(record.options.env.at("RANK"), "1");
  EXPECT_EQ(record.options.working_dir, "/work");
  EXPECT_EQ(record.pid, (*handle)->pid());
  EXPECT_EQ(launcher.handle(0), *handle);

  launcher.emit_line(0, OutputStream::kStderr, "loss 1.5");
  EXPECT_EQ(lines, (std::vector<std::string>{"stderr loss 1.5"}));
  EXPECT_FALSE((*handle)->exit_status().has_value());
  EXPECT_TRUE(launcher.exit(0, ExitStatus::exited(2)));
  EXPECT_EQ(exit, ExitStatus::exited(2));
  EXPECT_EQ((*handle)->exit_status(), ExitStatus::exited(2));
  EXPECT_TRUE((*handle)->wait_for_exit(0ms));
  EXPECT_FALSE(launcher.exit(0, ExitStatus::exited(0))) << "a worker exits once";
}

TEST(FakeProcessLauncher, GivesDistinctPids) {
  FakeProcessLauncher launcher;
  auto a = launcher.spawn({});
  auto b = launcher.spawn({});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE((*a)->pid(), (*b)->pid());
}

TEST(FakeProcessLauncher, FailsTheNextSpawnWhenTold) {
  FakeProcessLauncher launcher;
  launcher.fail_next_spawn(not_found("cannot run 'x': not found"));
  auto failed = launcher.spawn({});
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().message(), "cannot run 'x': not found");
  EXPECT_EQ(launcher.spawn_count(), 0u);
  EXPECT_TRUE(launcher.spawn({}).is_ok());
}

TEST(FakeProcessLauncher, RecordsSignalsAndStops) {
  FakeProcessLauncher launcher;
  auto handle = *launcher.spawn({});
  ASSERT_TRUE(handle->signal_group(SIGUSR1).is_ok());
  handle->stop(250ms);
  FakeProcessLauncher::Record record = launcher.record(0);
  EXPECT_EQ(record.signals, (std::vector<int>{SIGUSR1}));
  EXPECT_EQ(record.stops, (std::vector<std::chrono::milliseconds>{250ms}));
  EXPECT_FALSE(handle->exit_status().has_value()) << "by default the test decides the exit";
}

TEST(FakeProcessLauncher, CanExitOnStopLikeAWorkerHonouringSigterm) {
  FakeProcessLauncher launcher;
  auto before = *launcher.spawn({});
  launcher.set_exit_on_stop(true);
  auto after = *launcher.spawn({});
  before->stop(1s);
  after->stop(1s);
  EXPECT_EQ(before->exit_status(), ExitStatus::killed(SIGTERM));
  EXPECT_EQ(after->exit_status(), ExitStatus::killed(SIGTERM));
}

}  // namespace
}  // namespace cohort::agent
