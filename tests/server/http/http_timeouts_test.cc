// Issue 34, item 4: the head, body and write timeouts the README promises, shown over raw
// sockets with each timeout set to 1 s. Every assertion waits for a state (the connection
// closed, a counter moved, no answer in flight) with a generous deadline; the only timing
// asserted is a lower bound the server cannot beat (it must not close before the timeout).
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/http/http_test_util.h"
#include "tests/server/http/raw_client.h"

namespace banyan::server::http {
namespace {

using namespace http_test;  // NOLINT
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 1s;
constexpr auto kDeadline = 30s;  // for a state the server reaches ~kTimeout after the cause

HttpFrontEndOptions ShortTimeouts() {
  HttpFrontEndOptions o;
  o.head_timeout = kTimeout;
  o.body_timeout = kTimeout;
  o.write_timeout = kTimeout;
  return o;
}

// Sends `piece` every 200 ms (a client that trickles its request) until the server closes;
// returns how long that took, or nothing when it stayed open past kDeadline.
std::optional<Clock::duration> TrickleUntilClosed(RawClient& c, const std::string& piece,
                                                  Clock::time_point t0) {
  while (Clock::now() - t0 < kDeadline) {
    if (!c.Send(piece)) return Clock::now() - t0;
    if (c.WaitClosed(200ms)) return Clock::now() - t0;
  }
  return std::nullopt;
}

// A request head that keeps arriving, a header line every 200 ms, is cut at the head timeout:
// the limit is on the whole head, not on the gap between bytes (slowloris).
TEST(HttpTimeoutsTest, SlowHeadIsClosedAtTheHeadTimeout) {
  Stack stack({}, {}, 256, 16, nullptr, ShortTimeouts());
  RawClient c(stack.port());
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.Send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  const auto closed = TrickleUntilClosed(c, "X-Slow: 1\r\n", t0);
  ASSERT_TRUE(closed.has_value()) << "still open after " << kDeadline.count() << " s";
  EXPECT_GE(*closed, kTimeout - 50ms);
  EXPECT_TRUE(WaitFor(
      [&] { return stack.ctx.rejections->Count(RejectReason::kHeadTimeout, "") == 1; }, 10s));
  // An idle keep-alive connection also closes at the head timeout, and is no refusal.
  RawClient idle(stack.port());
  EXPECT_TRUE(idle.WaitClosed(kDeadline));
  EXPECT_EQ(stack.ctx.rejections->Count(RejectReason::kHeadTimeout, ""), 1);
  EXPECT_EQ(Post(stack.port(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}).status,
            200);
}

// A body that keeps arriving, a byte every 200 ms, is cut at the body timeout.
TEST(HttpTimeoutsTest, SlowBodyIsClosedAtTheBodyTimeout) {
  Stack stack({}, {}, 256, 16, nullptr, ShortTimeouts());
  RawClient c(stack.port());
  ASSERT_TRUE(c.Send(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 1000\r\n\r\n{\"prompt\":\""));
  const auto t0 = Clock::now();
  const auto closed = TrickleUntilClosed(c, "a", t0);
  ASSERT_TRUE(closed.has_value()) << "still open after " << kDeadline.count() << " s";
  EXPECT_GE(*closed, kTimeout - 50ms);
  EXPECT_TRUE(WaitFor(
      [&] { return stack.ctx.rejections->Count(RejectReason::kBodyTimeout, "") == 1; }, 10s));
  // A client that sends part of the body and then nothing, keeping the connection open, is
  // closed the same way.
  RawClient stalled(stack.port());
  ASSERT_TRUE(stalled.Send(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 1000\r\n\r\n{\"prompt\":\""));
  EXPECT_TRUE(stalled.WaitClosed(kDeadline));
  EXPECT_TRUE(WaitFor(
      [&] { return stack.ctx.rejections->Count(RejectReason::kBodyTimeout, "") == 2; }, 10s));
}

// A client that asks for a large stream and never reads it: once the socket buffers are full
// the server's write makes no progress, and after the write timeout the connection is dropped
// and the request cancelled. What the client finds when it finally reads is a stream cut short
// (no [DONE]).
TEST(HttpTimeoutsTest, ClientThatNeverReadsIsDroppedAtTheWriteTimeout) {
  Stack stack({}, {}, 4096, 16, nullptr, ShortTimeouts());
  RawClient c(stack.port(), /*rcvbuf_bytes=*/4096);
  // About 10 MB of events (16 samples x 450 tokens x 20 alternatives each): more than the
  // kernel buffers of a loopback connection hold (up to 4 MiB on the sending side by default).
  const std::string body =
      Json{{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
           {"max_tokens", 450},
           {"n", 16},
           {"logprobs", true},
           {"top_logprobs", 20},
           {"ignore_eos", true},
           {"stream", true}}
          .dump();
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.Send(Request("POST", "/v1/chat/completions", body)));
  ASSERT_TRUE(WaitFor([&] { return stack.http->responses_in_flight() == 1; }, kDeadline));
  ASSERT_TRUE(WaitFor([&] { return stack.http->responses_in_flight() == 0; }, kDeadline))
      << "the answer is still being written to a client that reads nothing";
  EXPECT_GE(Clock::now() - t0, kTimeout);
  EXPECT_TRUE(WaitFor([&] { return stack.sched->Metrics().kv_chunks_live == 0; }, kDeadline));
  c.SetReadTimeout(5s);
  const std::string got = c.ReadAll();
  EXPECT_TRUE(absl::StartsWith(got, "HTTP/1.1 200")) << got.substr(0, 200);
  EXPECT_EQ(got.find("data: [DONE]"), std::string::npos)
      << "the whole stream was delivered (" << got.size() << " bytes): it did not fill the "
      << "socket buffers, so this test shows nothing";
}

}  // namespace
}  // namespace banyan::server::http
