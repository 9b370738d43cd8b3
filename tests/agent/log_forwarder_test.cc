// LogForwarder: the rate limit, the caps and the gap reports, on a manual
// clock.
#include "agent/log_forwarder.h"

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

LogForwardingLimits small_limits() {
  LogForwardingLimits l;
  l.line_bytes = 100;
  l.rate_bytes_per_s = 10000;
  l.burst_bytes = 20000;
  l.job_buffer_bytes = 40000;
  l.total_buffer_bytes = 60000;
  l.batch_bytes = 5000;
  return l;
}

protocol::LogLine line(int rank, std::string text) {
  return protocol::LogLine{0, 0, rank, std::move(text)};
}

std::vector<protocol::LogLine> take_all(LogForwarder& f, const std::string& job) {
  std::vector<protocol::LogLine> out;
  while (auto b = f.take_batch()) {
    EXPECT_EQ(b->job_id, job);
    for (auto& l : b->lines) out.push_back(std::move(l));
  }
  return out;
}

bool is_gap(const protocol::LogLine& l) {
  return l.text.find("were not forwarded here") != std::string::npos;
}

TEST(LogForwarder, ForwardsLinesInOrderInBatchesUnderTheCap) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  for (int i = 0; i < 100; ++i) f.add("j", line(0, "line " + std::to_string(i)));
  auto b = f.take_batch();
  ASSERT_TRUE(b);
  size_t bytes = 0;
  for (auto& l : b->lines) bytes += LogForwarder::cost(l);
  EXPECT_LE(bytes, 5000u);
  auto rest = take_all(f, "j");
  EXPECT_EQ(b->lines.size() + rest.size(), 100u);
  EXPECT_EQ(b->lines.front().text, "line 0");
  EXPECT_EQ(rest.back().text, "line 99");
  EXPECT_EQ(f.dropped_lines(), 0u);
  EXPECT_EQ(f.buffered_bytes(), 0u);
}

TEST(LogForwarder, CutsALongLineAndSaysHowMuchWasCut) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  f.add("j", line(2, std::string(5000, 'x')));
  auto got = take_all(f, "j");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].text.substr(0, 100), std::string(100, 'x'));
  EXPECT_NE(got[0].text.find("line cut here, 4.8 KiB more"), std::string::npos) << got[0].text;
  EXPECT_LT(got[0].text.size(), 200u);
}

TEST(LogForwarder, AFloodIsDroppedWithACountedGapBeforeTheNextLine) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  // 100-byte lines cost 164: the burst of 20,000 takes 121 of them.
  for (int i = 0; i < 1000; ++i) f.add("j", line(1, std::string(100, 'a')));
  EXPECT_GT(f.dropped_lines(), 800u);
  EXPECT_LE(f.buffered_bytes(), 20000u);
  clock.advance(2s);  // the bucket is full again
  f.add("j", line(1, "after"));
  auto got = take_all(f, "j");
  ASSERT_GE(got.size(), 3u);
  const auto& gap = got[got.size() - 2];
  ASSERT_TRUE(is_gap(gap)) << gap.text;
  EXPECT_EQ(gap.rank, 1);
  EXPECT_NE(gap.text.find(std::to_string(f.dropped_lines()) + " lines"), std::string::npos)
      << gap.text;
  EXPECT_NE(gap.text.find("logs/attempt-0/rank-1.log"), std::string::npos) << gap.text;
  EXPECT_EQ(got.back().text, "after");
  for (size_t i = 0; i + 2 < got.size(); ++i) EXPECT_FALSE(is_gap(got[i]));
}

TEST(LogForwarder, AGapIsReportedOnceTheQueueDrainsEvenWithoutAnotherLine) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  for (int i = 0; i < 1000; ++i) f.add("j", line(0, std::string(100, 'a')));
  auto got = take_all(f, "j");
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(is_gap(got.back())) << got.back().text;
  EXPECT_FALSE(f.has_waiting("j"));
}

TEST(LogForwarder, OneJobsFloodLeavesItsNeighboursLinesAlone) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  for (int i = 0; i < 1000; ++i) f.add("flood", line(0, std::string(100, 'a')));
  f.add("quiet", line(0, "hello"));
  bool seen = false;
  while (auto b = f.take_batch()) {
    if (b->job_id == "quiet") seen = b->lines.size() == 1 && b->lines[0].text == "hello";
  }
  EXPECT_TRUE(seen);
}

TEST(LogForwarder, WhatWaitsIsCappedWhenNothingIsTaken) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  for (int s = 0; s < 30; ++s) {  // 30 s at the rate, the coordinator away
    for (int i = 0; i < 60; ++i) f.add("j", line(0, std::string(100, 'a')));
    clock.advance(1s);
    EXPECT_LE(f.buffered_bytes(), 40000u + 64 * 1024);
  }
  EXPECT_GT(f.dropped_lines(), 0u);
  auto got = take_all(f, "j");
  EXPECT_TRUE(std::any_of(got.begin(), got.end(), is_gap));
}

TEST(LogForwarder, ALostBatchBecomesAGap) {
  ManualClock clock;
  LogForwarder f(clock, small_limits());
  f.add("j", line(3, "one"));
  f.add("j", line(3, "two"));
  auto b = f.take_batch();
  ASSERT_TRUE(b);
  f.lost(*b);
  clock.advance(2s);
  auto got = take_all(f, "j");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].text.find("2 lines (6 bytes) of rank 3"), std::string::npos) << got[0].text;
}

}  // namespace
}  // namespace cohort::agent
