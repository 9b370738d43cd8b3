// ConnectionSlots: the caps, and which connection gives up its slot.
#include "base/connection_slots.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(ConnectionSlots, ANewConnectionTakesTheSlotOfTheLongestWaiting) {
  ConnectionSlots slots({3, 3});
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(slots.admit(id, "10.0.0.1").admitted);
  slots.request_arrived(1);  // being answered: never closed for room
  auto a = slots.admit(4, "10.0.0.2");
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.evict, std::optional<uint64_t>(2));
  EXPECT_EQ(slots.open(), 3u);
}

TEST(ConnectionSlots, AnAddressAtItsCapGivesUpItsOwnSlotFirst) {
  ConnectionSlots slots({10, 2});
  EXPECT_TRUE(slots.admit(1, "10.0.0.9").admitted);
  EXPECT_TRUE(slots.admit(2, "10.0.0.1").admitted);
  EXPECT_TRUE(slots.admit(3, "10.0.0.1").admitted);
  auto a = slots.admit(4, "10.0.0.1");
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.evict, std::optional<uint64_t>(2)) << "not the other address's older one";
  EXPECT_EQ(slots.open_from("10.0.0.1"), 2u);
}

TEST(ConnectionSlots, WhenEverySlotIsBeingAnsweredTheNewOneIsRefused) {
  ConnectionSlots slots({2, 2});
  EXPECT_TRUE(slots.admit(1, "a").admitted);
  EXPECT_TRUE(slots.admit(2, "b").admitted);
  slots.request_arrived(1);
  slots.request_arrived(2);
  auto a = slots.admit(3, "c");
  EXPECT_FALSE(a.admitted);
  EXPECT_FALSE(a.evict);
  slots.release(1);
  EXPECT_TRUE(slots.admit(3, "c").admitted);
}

}  // namespace
}  // namespace cohort
