// What the in-process HTTP front-end tests share: the bundled stories260K model, a whole serving
// stack (CPU backend, scheduler, HttpFrontEnd) on a free loopback port, and small
// httplib::Client helpers.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "model/model_bundle.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "nlohmann/json.hpp"
#include "scheduler/scheduler.h"
#include "text/chat_template.h"
#include "server/http/http_server.h"
#include "server/common/server_context.h"
#include "tests/testing/bundled_model.h"

namespace banyan::server::http::http_test {

using Json = nlohmann::json;
using namespace std::chrono_literals;

inline const std::string kModelPath =
    std::string(BANYAN_SOURCE_DIR) + "/models/stories260K/stories260K.bin";
inline constexpr char kModel[] = "stories260K";
inline constexpr int64_t kBodyLimit = 64 << 10;

// The model, loaded once for every test.
inline const model::ModelBundle& Bundle() { return banyan::testing::BundledModel(); }

// Backend, scheduler (with its loop's pool and tree), context and front end: one serving stack.
struct Stack {
  // `jinja_chat`: the model's own chat template (text/chat_template.h); null: built-in.
  explicit Stack(scheduler::SchedulerOptions sopts = {}, ServerOptions opts = {}, int chunks = 1024,
                 int chunk_size = 16, std::shared_ptr<const text::JinjaChat> jinja_chat = nullptr,
                 HttpFrontEndOptions http_options = {}) {
    const model::ModelBundle& b = Bundle();
    sched = std::make_unique<scheduler::Scheduler>(
        b.weights.config, b.tokenizer.get(),
        *engine::CpuBackend::Create(&b.weights, {.num_chunks = chunks, .chunk_size = chunk_size}),
        sopts);
    sched->Start();
    ctx.model_name = kModel;
    ctx.model_config = &b.weights.config;
    ctx.tokenizer = b.tokenizer.get();
    ctx.scheduler = sched.get();
    ctx.options = opts;
    ctx.jinja_chat = std::move(jinja_chat);
    ctx.options.host = "127.0.0.1";
    ctx.options.http_port = 0;
    // Keys from opts.api_keys (the tenant "default"), or opts.tenants.
    std::vector<TenantSpec> specs = ctx.options.tenants;
    if (!ctx.options.api_keys.empty()) specs.push_back({kDefaultTenant, ctx.options.api_keys});
    absl::StatusOr<Auth> auth = Auth::Create(specs);
    EXPECT_TRUE(auth.ok()) << auth.status();
    if (auth.ok()) ctx.auth = *std::move(auth);
    ctx.ready = &ready;
    http = std::make_unique<HttpFrontEnd>(&ctx, std::move(http_options));
    absl::Status s = http->Start();
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_GT(http->port(), 0);
  }
  ~Stack() {
    http->Stop();
    sched->Stop();
  }
  int port() const { return http->port(); }

  std::unique_ptr<scheduler::Scheduler> sched;
  std::atomic<bool> ready{true};
  ServerContext ctx;
  std::unique_ptr<HttpFrontEnd> http;
};

struct Reply {
  int status = 0;
  std::string body;
  Json json;  // null when the body is not JSON
  httplib::Headers headers;
};

inline Reply Send(int port, const std::string& method, const std::string& path,
           const std::string& body = "", httplib::Headers headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  cli.set_connection_timeout(5, 0);
  httplib::Result r = [&] {
    if (method == "GET") return cli.Get(path.c_str(), headers);
    if (method == "DELETE") return cli.Delete(path.c_str(), headers);
    if (method == "PUT") return cli.Put(path.c_str(), headers, body, "application/json");
    return cli.Post(path.c_str(), headers, body, "application/json");
  }();
  Reply out;
  if (!r) {
    ADD_FAILURE() << method << " " << path << ": " << httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  out.json = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (out.json.is_discarded()) out.json = nullptr;
  return out;
}

inline Reply Post(int port, const std::string& path, const Json& body, httplib::Headers headers = {}) {
  return Send(port, "POST", path, body.dump(), std::move(headers));
}

// The JSON payloads of an SSE body, and whether it ended with [DONE].
inline std::vector<Json> ParseSse(const std::string& body, bool* done) {
  std::vector<Json> events;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated SSE event: " << body.substr(pos);
      break;
    }
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(":", 0) == 0) continue;  // comment (keep-alive)
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    const std::string data = ev.substr(6);
    EXPECT_FALSE(*done) << "event after [DONE]: " << data;
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(Json::parse(data));
  }
  return events;
}

inline void ExpectOpenAIError(const Reply& r, int status, const char* param = nullptr,
                       const char* code = nullptr) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.json.is_object()) << r.body;
  ASSERT_TRUE(r.json.contains("error")) << r.body;
  const Json& e = r.json["error"];
  ASSERT_TRUE(e.is_object()) << r.body;
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param")) << r.body;
  EXPECT_TRUE(e.contains("code")) << r.body;
  if (param != nullptr) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
  if (code != nullptr) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

// Waits until `pred` holds or `timeout` passes.
template <class Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

inline constexpr char kStoryPrompt[] = "Once upon a time, there was a little girl named Lily.";

// A suite whose tests share one Stack with the body limit kBodyLimit. gtest runs
// SetUpTestSuite / TearDownTestSuite once per derived suite, so each gets a fresh stack.
class SharedStackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerOptions opts;
    opts.max_body_bytes = kBodyLimit;
    stack_ = new Stack({}, opts);
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int port() { return stack_->port(); }

  // A small greedy completion: the server works.
  static void ExpectServes() {
    Reply r = Post(port(), "/v1/completions",
                   {{"prompt", "Once"}, {"max_tokens", 2}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status == 200) {
      EXPECT_EQ(r.json["object"], "text_completion");
    }
  }

  static inline Stack* stack_ = nullptr;
};

}  // namespace banyan::server::http::http_test
