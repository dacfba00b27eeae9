// RequestStream's listener: SetListener returns only once no call of the listener it replaces is
// running, so a front end may release what the listener refers to right after it (a connection
// whose last reference a running listener could otherwise hold on the engine thread).
#include "scheduler/request_stream.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace banyan::scheduler {
namespace {

TokenEvent Token(int32_t id) {
  TokenEvent e;
  e.token = id;
  return e;
}

TEST(RequestStreamTest, SetListenerWaitsForARunningCall) {
  RequestStream s;
  absl::Notification entered, release;
  std::atomic<int> calls{0};
  s.SetListener([&] {
    ++calls;
    entered.Notify();
    release.WaitForNotification();
  });
  std::thread producer([&] { s.Push(Token(7)); });
  entered.WaitForNotification();
  std::atomic<bool> replaced{false};
  std::thread front_end([&] {
    s.SetListener({});
    replaced = true;
  });
  // The call is still running: SetListener must not have returned.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(replaced.load());
  release.Notify();
  front_end.join();
  producer.join();
  EXPECT_TRUE(replaced.load());
  // Removed: later pushes call nothing.
  s.Push(Token(8));
  s.Finish(absl::OkStatus(), Usage{});
  EXPECT_EQ(calls.load(), 1);
  std::vector<TokenEvent> got;
  while (s.Read(&got, std::chrono::milliseconds(10))) {
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].token, 8);
}

// Push, Finish and Announce each call the listener once (announce on); a push without announce
// waits for Announce.
TEST(RequestStreamTest, ListenerCallsFollowAnnouncements) {
  RequestStream s;
  int calls = 0;
  s.SetListener([&] { ++calls; });
  s.Push(Token(1));
  EXPECT_EQ(calls, 1);
  s.Push(Token(2), /*announce=*/false);
  EXPECT_EQ(calls, 1);
  s.Announce();
  EXPECT_EQ(calls, 2);
  s.Finish(absl::OkStatus(), Usage{});
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace banyan::scheduler
