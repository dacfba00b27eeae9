// Issue 43, item 4: every refusal is counted in /metrics as
// banyan_requests_rejected_total{reason,tenant}, under the configured tenant's name or "" when
// the request was refused before it was authenticated, and no string a client chose becomes a
// label. Each case provokes one refusal over HTTP and scrapes /metrics.
#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "tests/server/http/http_test_util.h"
#include "tests/server/http/raw_client.h"

namespace banyan::server::http {
namespace {

using namespace http_test;  // NOLINT

// The banyan_requests_rejected_total samples of a /metrics body: "reason/tenant" -> count.
std::map<std::string, int64_t> Rejected(const std::string& text) {
  std::map<std::string, int64_t> out;
  constexpr absl::string_view kPrefix = "banyan_requests_rejected_total{reason=\"";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, kPrefix)) continue;
    line.remove_prefix(kPrefix.size());
    const size_t q = line.find('"');
    const std::string reason(line.substr(0, q));
    line.remove_prefix(q);
    const size_t t = line.find("tenant=\"");
    const size_t tq = line.find('"', t + 8);
    const std::string tenant(line.substr(t + 8, tq - t - 8));
    int64_t v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &v)) << line;
    out[reason + "/" + tenant] = v;
  }
  return out;
}

const httplib::Headers kAlice = {{"Authorization", "Bearer sk-alice"}};
const httplib::Headers kBob = {{"Authorization", "Bearer sk-bob"}};

class RejectionMetricsTest : public ::testing::Test {
 protected:
  RejectionMetricsTest() {
    ServerOptions opts;
    opts.tenants = {{"alice", {"sk-alice"}}, {"bob", {"sk-bob"}, /*max_concurrent_requests=*/1}};
    opts.max_body_bytes = 64 << 10;
    opts.max_prompt_bytes = 1024;
    stack_ = std::make_unique<Stack>(scheduler::SchedulerOptions{}, opts, 2048);
  }
  int port() const { return stack_->port(); }
  std::string Metrics() const {
    Reply r = Send(port(), "GET", "/metrics", "", kAlice);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }
  // One request, then the expected delta of exactly one series.
  void ExpectCounted(const std::string& series, int status, const std::function<int()>& send) {
    SCOPED_TRACE(series);
    const auto before = Rejected(Metrics());
    EXPECT_EQ(send(), status);
    auto after = Rejected(Metrics());
    EXPECT_EQ(after[series], (before.count(series) ? before.at(series) : 0) + 1);
    int64_t others = 0;
    for (const auto& [k, v] : after) {
      if (k != series) others += v - (before.count(k) ? before.at(k) : 0);
    }
    EXPECT_EQ(others, 0) << "another series moved too";
  }
  static int Raw(int port, const std::string& bytes) {
    RawClient c(port);
    if (!c.Send(bytes)) return -1;
    auto r = c.ReadResponses(1);
    return r.empty() ? 0 : r[0].first;
  }

  std::unique_ptr<Stack> stack_;
};

TEST_F(RejectionMetricsTest, EveryRefusalIsCountedByReasonAndTenant) {
  const std::string text = Metrics();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE banyan_requests_rejected_total counter")) << text;
  EXPECT_TRUE(Rejected(text).empty()) << "nothing refused yet";

  const Json ok_body = {{"prompt", "Once"}, {"max_tokens", 2}};
  ExpectCounted("unauthorized/", 401,
                [&] { return Post(port(), "/v1/completions", ok_body).status; });
  ExpectCounted("unauthorized/", 401, [&] {
    return Post(port(), "/v1/completions", ok_body, {{"Authorization", "Bearer sk-mallory"}})
        .status;
  });
  ExpectCounted("not_found/alice", 404,
                [&] { return Send(port(), "GET", "/v1/elsewhere", "", kAlice).status; });
  ExpectCounted("not_found/bob", 404, [&] {
    return Post(port(), "/v1/completions", {{"prompt", "Once"}, {"model", "gpt-evil"}}, kBob)
        .status;
  });
  ExpectCounted("method_not_allowed/alice", 405,
                [&] { return Send(port(), "GET", "/v1/completions", "", kAlice).status; });
  ExpectCounted("unsupported_media_type/alice", 415, [&] {
    return Raw(port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                       "sk-alice\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}");
  });
  ExpectCounted("bad_request/alice", 400,
                [&] { return Send(port(), "POST", "/tokenize", "{not json", kAlice).status; });
  ExpectCounted("bad_request/alice", 400, [&] {
    return Post(port(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", -1}}, kAlice)
        .status;
  });
  ExpectCounted("prompt_too_long/alice", 400, [&] {
    return Post(port(), "/v1/completions", {{"prompt", std::string(2000, 'a')}}, kAlice).status;
  });
  ExpectCounted("prompt_too_long/bob", 400, [&] {
    return Post(port(), "/v1/completions",
                {{"prompt", std::vector<int>(2000, 5)}, {"max_tokens", 1}}, kBob)
        .status;
  });
  ExpectCounted("prompt_too_long/alice", 400, [&] {
    return Post(port(), "/tokenize", {{"prompt", std::string(2000, 'a')}}, kAlice).status;
  });
  // Refused by the connection layer, before any header is looked at: no tenant.
  ExpectCounted("body_too_large/", 413, [&] {
    return Raw(port(), Request("POST", "/v1/completions", std::string(100 << 10, 'a'),
                               "Authorization: Bearer sk-alice\r\n"));
  });
  ExpectCounted("header_too_large/", 431, [&] {
    return Raw(port(), Request("GET", "/v1/models", "",
                               absl::StrCat("X-Big: ", std::string(20 << 10, 'a'), "\r\n")));
  });
  ExpectCounted("bad_request/", 400, [&] {
    return Raw(port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n");
  });

  // The tenant's concurrency limit: bob holds his one slot with a long request.
  std::atomic<int> first_status{0};
  std::thread first([&] {
    first_status = Post(port(), "/v1/completions",
                        {{"prompt", kStoryPrompt}, {"max_tokens", 400}, {"n", 8},
                         {"ignore_eos", true}},
                        kBob)
                       .status;
  });
  ASSERT_TRUE(WaitFor([&] { return stack_->sched->Metrics().requests_running > 0; }, 30s));
  ExpectCounted("tenant_concurrency/bob", 429,
                [&] { return Post(port(), "/v1/completions", ok_body, kBob).status; });
  first.join();
  EXPECT_EQ(first_status.load(), 200);

  // Draining.
  stack_->ready = false;
  ExpectCounted("draining/alice", 503,
                [&] { return Post(port(), "/v1/completions", ok_body, kAlice).status; });
  stack_->ready = true;

  // Nothing the clients chose (paths, models, keys, header values) is a label.
  const std::string final_text = Metrics();
  for (const char* chosen : {"elsewhere", "gpt-evil", "mallory", "X-Big"}) {
    EXPECT_FALSE(absl::StrContains(final_text, chosen)) << chosen;
  }
}

TEST(RejectionMetricsQueueTest, QueueFullAndForbiddenHostAreCounted) {
  scheduler::SchedulerOptions sopts;
  sopts.queue_limit = 0;  // every submission finds the queue full
  Stack stack(sopts, {}, 256);
  Reply r = Post(stack.port(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  ExpectOpenAIError(r, 429);
  // Without keys a loopback daemon answers only loopback Host names (403 otherwise).
  RawClient c(stack.port());
  ASSERT_TRUE(c.Send("GET /v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n"));
  auto answer = c.ReadResponses(1);
  ASSERT_EQ(answer.size(), 1u);
  EXPECT_EQ(answer[0].first, 403);
  const auto m = Rejected(Send(stack.port(), "GET", "/metrics").body);
  EXPECT_EQ(m, (std::map<std::string, int64_t>{{"queue_full/default", 1},
                                               {"forbidden_host/", 1}}));
}

}  // namespace
}  // namespace banyan::server::http
