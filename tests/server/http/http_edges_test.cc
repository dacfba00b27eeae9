// Issue 43, item 3: the HTTP edges the event-driven front end moved, over raw sockets. Each
// test fails on the front end before the fix: a sequential client that writes an oversized
// body before reading saw a reset instead of the 413; a bad chunk size closed the connection
// without an answer; a body cut short by a half-close waited for the body timeout.
#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/http/http_test_util.h"
#include "tests/server/http/raw_client.h"

namespace banyan::server::http {
namespace {

using namespace http_test;  // NOLINT

class HttpEdgesTest : public SharedStackTest {};

// The answer is an OpenAI error with this status and code, and the connection closes after it.
void ExpectErrorThenClose(RawClient& c, int status, const char* code) {
  auto r = c.ReadResponses(1);
  ASSERT_EQ(r.size(), 1u) << "no answer: the connection was closed or reset first";
  EXPECT_EQ(r[0].first, status) << r[0].second;
  const Json j = Json::parse(r[0].second, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r[0].second;
  EXPECT_EQ(j["error"]["code"], code) << r[0].second;
  EXPECT_TRUE(j["error"]["message"].is_string()) << r[0].second;
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(c.last_head()), "connection: close"))
      << c.last_head();
  EXPECT_TRUE(c.WaitClosed(30s));
}

// More than the kernel buffers of a loopback connection take in while the server reads
// nothing (up to 4 MiB on the sending side by default), and less than what the server reads
// and discards after a refusal (16 MiB).
constexpr size_t kOverLimitBytes = size_t{12} << 20;

// Python's http.client writes the whole body, then reads. A body over the limit gets its 413
// when the head arrives; the server must read past the rest of the body before closing, or
// the kernel resets the connection and the client never sees the 413.
TEST_F(HttpEdgesTest, OversizedBodyWrittenWholeBeforeReadingGets413) {
  const std::string body(static_cast<size_t>(kBodyLimit) + kOverLimitBytes, 'a');
  RawClient c(port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/completions", body)))
      << "the server reset the connection while the body was being written";
  ExpectErrorThenClose(c, 413, "request_too_large");
  ExpectServes();
}

// The same with a chunked body: the limit is found while the body is read.
TEST_F(HttpEdgesTest, OversizedChunkedBodyWrittenWholeGets413) {
  std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  const std::string chunk(64 << 10, 'a');
  for (size_t i = 0; i < kOverLimitBytes / chunk.size(); ++i) {
    absl::StrAppend(&req, "10000\r\n", chunk, "\r\n");
  }
  req += "0\r\n\r\n";
  RawClient c(port());
  ASSERT_TRUE(c.Send(req)) << "the server reset the connection while the body was being written";
  ExpectErrorThenClose(c, 413, "request_too_large");
}

TEST_F(HttpEdgesTest, BadChunkSizeGets400) {
  for (const char* framing : {"zz\r\n{}\r\n0\r\n\r\n", "2;\x01\r\n{}\r\n0\r\n\r\n",
                              "ffffffffffffffffffff\r\n{}\r\n0\r\n\r\n"}) {
    SCOPED_TRACE(framing);
    RawClient c(port());
    ASSERT_TRUE(c.Send(absl::StrCat(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        framing)));
    ExpectErrorThenClose(c, 400, "bad_request");
  }
  ExpectServes();
}

// A Content-Length larger than the body, then the client half-closes: the body can never
// arrive, so the answer is a 400 at once, not after the body timeout (60 s here).
TEST_F(HttpEdgesTest, BodyShortOfContentLengthThenHalfCloseGets400Promptly) {
  for (const bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    RawClient c(port());
    const std::string head =
        chunked ? "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "100\r\n{\"prompt\":"
                : "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":";
    ASSERT_TRUE(c.Send(head));
    const auto t0 = std::chrono::steady_clock::now();
    c.ShutdownWrite();
    ExpectErrorThenClose(c, 400, "incomplete_body");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s) << "waited for the body timeout";
  }
  ExpectServes();
}

}  // namespace
}  // namespace banyan::server::http
