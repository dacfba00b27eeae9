// In-process tests of the HTTP front end: the real HttpFrontEnd on a free loopback port over a
// real Scheduler running the bundled stories260K model on the CPU backend, driven by
// httplib::Client.
#include "server/http/http_server.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/server/http/http_test_util.h"

namespace banyan::server::http {
namespace {

using namespace http_test;  // NOLINT

// One stack for the whole suite (http_test_util.h).
class HttpServerTest : public SharedStackTest {};

TEST_F(HttpServerTest, CompletionShapeAndUsage) {
  Reply r = Post(port(), "/v1/completions",
                 {{"model", kModel},
                  {"prompt", kStoryPrompt},
                  {"max_tokens", 12},
                  {"temperature", 0},
                  {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& j = r.json;
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], kModel);
  ASSERT_EQ(j["choices"].size(), 1u);
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_FALSE(c["text"].get<std::string>().empty());
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 12);
  EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  bool has_id = false;
  for (const auto& [k, v] : r.headers) has_id |= k == "X-Request-Id" && v == j["id"];
  EXPECT_TRUE(has_id);
}

TEST_F(HttpServerTest, DefaultMaxTokensIs16) {
  Reply r = Post(port(), "/v1/completions",
                 {{"prompt", kStoryPrompt}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 16);
}

TEST_F(HttpServerTest, TokenPromptEqualsTextPrompt) {
  Reply tok = Post(port(), "/tokenize", {{"prompt", kStoryPrompt}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  Json base = {{"max_tokens", 8}, {"temperature", 0}};
  Json a = base, b = base;
  a["prompt"] = kStoryPrompt;
  b["prompt"] = tok.json["tokens"];
  Reply ra = Post(port(), "/v1/completions", a), rb = Post(port(), "/v1/completions", b);
  ASSERT_EQ(ra.status, 200);
  ASSERT_EQ(rb.status, 200);
  EXPECT_EQ(ra.json["choices"][0]["text"], rb.json["choices"][0]["text"]);
}

TEST_F(HttpServerTest, BatchOfPrompts) {
  Reply r = Post(port(), "/v1/completions",
                 {{"prompt", {"Once upon a time", "The cat"}},
                  {"n", 2},
                  {"max_tokens", 4},
                  {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r.json["choices"][i]["index"], i);
  // Greedy: both samples of a prompt agree; the prompts differ.
  EXPECT_EQ(r.json["choices"][0]["text"], r.json["choices"][1]["text"]);
  EXPECT_EQ(r.json["choices"][2]["text"], r.json["choices"][3]["text"]);
  Reply single = Post(port(), "/v1/completions",
                      {{"prompt", "The cat"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(single.json["choices"][0]["text"], r.json["choices"][2]["text"]);
}

TEST_F(HttpServerTest, NSamplesAndSeedReproducibility) {
  Json req = {{"prompt", kStoryPrompt}, {"n", 3},       {"max_tokens", 20},
              {"temperature", 1.0},     {"seed", 1234}, {"ignore_eos", true}};
  Reply a = Post(port(), "/v1/completions", req);
  Reply b = Post(port(), "/v1/completions", req);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_EQ(a.json["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.json["choices"][i]["index"], i);
    EXPECT_EQ(a.json["choices"][i]["text"], b.json["choices"][i]["text"]) << i;
  }
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 60);
  req["seed"] = 999;
  Reply c = Post(port(), "/v1/completions", req);
  ASSERT_EQ(c.status, 200);
  EXPECT_NE(a.json["choices"][0]["text"], c.json["choices"][0]["text"]);
}

TEST_F(HttpServerTest, StopStringEndsBeforeIt) {
  Json req = {
      {"prompt", kStoryPrompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  Reply full = Post(port(), "/v1/completions", req);
  ASSERT_EQ(full.status, 200);
  const std::string text = full.json["choices"][0]["text"];
  ASSERT_GT(text.size(), 20u) << text;
  // A stop string taken from the middle of the greedy continuation.
  const size_t at = text.find(' ', text.size() / 2);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string stop = text.substr(at, 4);
  req["stop"] = {stop, "zzzz-never"};
  Reply stopped = Post(port(), "/v1/completions", req);
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  const std::string got = stopped.json["choices"][0]["text"];
  EXPECT_EQ(got, text.substr(0, text.find(stop))) << "stop=" << Json(stop);
  EXPECT_EQ(stopped.json["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpServerTest, EchoPrependsThePrompt) {
  Reply r = Post(port(), "/v1/completions",
                 {{"prompt", kStoryPrompt}, {"max_tokens", 3}, {"echo", true}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"].get<std::string>().rfind(kStoryPrompt, 0), 0u);
}

TEST_F(HttpServerTest, CompletionLogprobs) {
  Reply r = Post(port(), "/v1/completions",
                 {{"prompt", kStoryPrompt},
                  {"max_tokens", 6},
                  {"logprobs", 3},
                  {"temperature", 0},
                  {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& lp = r.json["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << r.body;
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  std::string joined;
  for (int i = 0; i < 6; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 1e-6);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
    // Greedy: the sampled token is the most likely one.
    double best = -1e9;
    for (const auto& [tok, v] : lp["top_logprobs"][i].items())
      best = std::max(best, v.get<double>());
    EXPECT_NEAR(best, lp["token_logprobs"][i].get<double>(), 1e-4);
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(joined, r.json["choices"][0]["text"]);
}

TEST_F(HttpServerTest, CachedTokensOnRepeatedPrompt) {
  std::string prompt;
  for (int i = 0; i < 6; ++i) prompt += "The little dog ran to the park and played with a ball. ";
  Json req = {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"user", "cache-test"}};
  Reply first = Post(port(), "/v1/completions", req);
  ASSERT_EQ(first.status, 200) << first.body;
  Reply second = Post(port(), "/v1/completions", req);
  ASSERT_EQ(second.status, 200) << second.body;
  const int prompt_tokens = second.json["usage"]["prompt_tokens"];
  const int cached = second.json["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 0) << second.body;
  EXPECT_LE(cached, prompt_tokens);
  // Another tenant shares nothing.
  req["user"] = "someone-else";
  Reply other = Post(port(), "/v1/completions", req);
  ASSERT_EQ(other.status, 200);
  EXPECT_EQ(other.json["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << other.body;
}

TEST_F(HttpServerTest, StreamingCompletionMatchesNonStreaming) {
  Json req = {
      {"prompt", kStoryPrompt}, {"max_tokens", 15}, {"temperature", 0}, {"ignore_eos", true}};
  Reply whole = Post(port(), "/v1/completions", req);
  ASSERT_EQ(whole.status, 200);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  Reply s = Post(port(), "/v1/completions", req);
  ASSERT_EQ(s.status, 200) << s.body;
  bool done = false;
  std::vector<Json> events = ParseSse(s.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json& e = events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_EQ(e["id"], events[0]["id"]);
    EXPECT_TRUE(e.contains("usage") && e["usage"].is_null());
    ASSERT_EQ(e["choices"].size(), 1u);
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(e["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, whole.json["choices"][0]["text"]);
  const Json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 15);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], whole.json["usage"]["prompt_tokens"]);
}

TEST_F(HttpServerTest, ChatCompletion) {
  Json req = {{"model", kModel},
              {"messages",
               {{{"role", "system"}, {"content", "You tell stories."}},
                {{"role", "user"}, {"content", "Tell me about a cat."}}}},
              {"max_completion_tokens", 10},
              {"temperature", 0},
              {"ignore_eos", true}};
  Reply r = Post(port(), "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r.json["object"], "chat.completion");
  const Json& c = r.json["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_TRUE(c["message"]["content"].is_string());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r.json["usage"]["completion_tokens"], 10);

  // The prompt is the documented plain template.
  Reply tok = Post(port(), "/tokenize", {{"messages", req["messages"]}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  EXPECT_EQ(tok.json["count"], r.json["usage"]["prompt_tokens"]);
  Reply same =
      Post(port(), "/v1/completions",
           {{"prompt", "system: You tell stories.\nuser: Tell me about a cat.\nassistant:"},
            {"max_tokens", 10},
            {"temperature", 0},
            {"ignore_eos", true}});
  EXPECT_EQ(same.json["choices"][0]["text"], c["message"]["content"]);

  // Streaming gives the same content: role first, then content deltas, then [DONE].
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  Reply s = Post(port(), "/v1/chat/completions", req);
  ASSERT_EQ(s.status, 200);
  bool done = false;
  std::vector<Json> events = ParseSse(s.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  std::string finish;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    const Json& ch = events[i]["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(content, c["message"]["content"]);
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 10);
}

TEST_F(HttpServerTest, ChatLogprobsAndN) {
  Reply r = Post(port(), "/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                  {"max_tokens", 5},
                  {"n", 2},
                  {"logprobs", true},
                  {"top_logprobs", 3},
                  {"temperature", 0.8},
                  {"seed", 5},
                  {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["choices"].size(), 2u);
  for (const Json& c : r.json["choices"]) {
    const Json& content = c["logprobs"]["content"];
    ASSERT_EQ(content.size(), 5u) << r.body;
    for (const Json& t : content) {
      EXPECT_TRUE(t["token"].is_string());
      EXPECT_LE(t["logprob"].get<double>(), 1e-6);
      EXPECT_TRUE(t["bytes"].is_array());
      EXPECT_EQ(t["top_logprobs"].size(), 3u);
    }
  }
}

TEST_F(HttpServerTest, ModelsHealthReadyMetrics) {
  Reply m = Send(port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json["object"], "list");
  ASSERT_EQ(m.json["data"].size(), 1u);
  EXPECT_EQ(m.json["data"][0]["id"], kModel);
  EXPECT_EQ(m.json["data"][0]["object"], "model");
  EXPECT_EQ(m.json["data"][0]["owned_by"], "banyan");
  EXPECT_EQ(m.json["data"][0]["max_model_len"], 512);
  EXPECT_EQ(Send(port(), "GET", std::string("/v1/models/") + kModel).status, 200);
  ExpectOpenAIError(Send(port(), "GET", "/v1/models/gpt-4"), 404, "model", "model_not_found");

  EXPECT_EQ(Send(port(), "GET", "/health").status, 200);
  EXPECT_EQ(Send(port(), "GET", "/ready").status, 200);
  stack_->ready = false;
  EXPECT_EQ(Send(port(), "GET", "/ready").status, 503);
  EXPECT_EQ(Send(port(), "GET", "/health").status, 200);
  ExpectOpenAIError(Post(port(), "/v1/completions", {{"prompt", "x"}}), 503);
  stack_->ready = true;

  ExpectServes();
  Reply metrics = Send(port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* name :
       {"banyan_requests_running", "banyan_kv_chunks_live", "banyan_generation_tokens_total",
        "banyan_time_to_first_token_seconds_bucket", "vllm:num_requests_running",
        "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
        "vllm:num_preemptions_total", "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total"}) {
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  }
  bool text_plain = false;
  for (const auto& [k, v] : metrics.headers) {
    text_plain |= k == "Content-Type" && v.rfind("text/plain", 0) == 0;
  }
  EXPECT_TRUE(text_plain);
}

TEST_F(HttpServerTest, TokenizeDetokenizeRoundTrip) {
  Reply t = Post(port(), "/tokenize", {{"prompt", kStoryPrompt}});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.json["count"], t.json["tokens"].size());
  EXPECT_EQ(t.json["max_model_len"], 512);
  EXPECT_EQ(t.json["tokens"][0], 1);  // BOS
  Reply no_bos =
      Post(port(), "/tokenize", {{"prompt", kStoryPrompt}, {"add_special_tokens", false}});
  EXPECT_EQ(no_bos.json["count"].get<int>() + 1, t.json["count"].get<int>());
  Reply d = Post(port(), "/detokenize", {{"tokens", t.json["tokens"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["prompt"], kStoryPrompt);
  ExpectOpenAIError(Post(port(), "/detokenize", {{"tokens", {1, 100000}}}), 400, "tokens");
  ExpectOpenAIError(Post(port(), "/detokenize", {{"tokens", "abc"}}), 400, "tokens");
  ExpectOpenAIError(Post(port(), "/tokenize", Json::object()), 400, "prompt");
}

// Every error case: status, OpenAI error shape, and the server keeps serving.
TEST_F(HttpServerTest, BadInputs) {
  struct Case {
    const char* name;
    std::string method, path, body;
    int status;
    const char* param = nullptr;
    const char* code = nullptr;
  };
  std::vector<int> too_long(500, 100);
  too_long[0] = 1;
  const Json long_prompt = {{"prompt", too_long}, {"max_tokens", 100}};
  const std::vector<Case> cases = {
      {"malformed json", "POST", "/v1/completions", "{\"prompt\": \"x\",", 400},
      {"not an object", "POST", "/v1/completions", "[1,2]", 400},
      {"empty body", "POST", "/v1/completions", "", 400},
      {"wrong type", "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400,
       "max_tokens"},
      {"wrong type temperature", "POST", "/v1/completions",
       R"({"prompt": "x", "temperature": [1]})", 400, "temperature"},
      {"wrong type messages", "POST", "/v1/chat/completions", R"({"messages": {"role": "user"}})",
       400, "messages"},
      {"unknown model", "POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "x"})", 404,
       "model", "model_not_found"},
      {"unknown model chat", "POST", "/v1/chat/completions",
       R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})", 404, "model",
       "model_not_found"},
      {"too long", "POST", "/v1/completions", long_prompt.dump(), 400, "max_tokens",
       "context_length_exceeded"},
      {"prompt fills the context", "POST", "/v1/completions",
       Json{{"prompt", std::vector<int>(512, 5)}}.dump(), 400, "prompt", "context_length_exceeded"},
      {"empty prompt", "POST", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"empty token prompt", "POST", "/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"missing prompt", "POST", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"empty messages", "POST", "/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"n zero", "POST", "/v1/completions", R"({"prompt": "x", "n": 0})", 400, "n"},
      {"n too big", "POST", "/v1/completions", R"({"prompt": "x", "n": 100})", 400, "n"},
      {"max_tokens zero", "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400,
       "max_tokens"},
      {"max_tokens negative", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})", 400,
       "max_completion_tokens"},
      {"temperature negative", "POST", "/v1/completions", R"({"prompt": "x", "temperature": -1})",
       400, "temperature"},
      {"top_p zero", "POST", "/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {"too many stops", "POST", "/v1/completions",
       Json{{"prompt", "x"}, {"stop", std::vector<std::string>(17, "a")}}.dump(), 400, "stop"},
      {"token id out of range", "POST", "/v1/completions", R"({"prompt": [1, 512]})", 400,
       "prompt"},
      {"invalid utf-8", "POST", "/v1/completions", "{\"prompt\": \"a\xFF\xFE\"}", 400, nullptr,
       "invalid_utf8"},
      {"invalid utf-8 chat", "POST", "/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"\xC0\xAF\"}]}", 400},
      {"lone surrogate escape", "POST", "/v1/completions", R"({"prompt": "\ud800"})", 400},
      {"body too large", "POST", "/v1/completions",
       Json{{"prompt", std::string(kBodyLimit + 10, 'a')}}.dump(), 413, nullptr,
       "request_too_large"},
      {"unknown path", "POST", "/v1/nothing", "{}", 404},
      {"unknown path get", "GET", "/nothing", "", 404},
      {"wrong method", "GET", "/v1/completions", "", 405, nullptr, "method_not_allowed"},
      {"wrong method models", "DELETE", "/v1/models", "", 405},
      {"wrong method put", "PUT", "/v1/chat/completions", "{}", 405},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reply r = Send(port(), c.method, c.path, c.body);
    ExpectOpenAIError(r, c.status, c.param, c.code);
    if (c.status == 400 && std::string(c.name) == "too long") {
      const std::string msg = r.json["error"]["message"];
      EXPECT_NE(msg.find("512"), std::string::npos) << msg;
      EXPECT_NE(msg.find("500"), std::string::npos) << msg;
      EXPECT_NE(msg.find("100"), std::string::npos) << msg;
    }
    if (c.status == 405) {
      bool allow = false;
      for (const auto& [k, v] : r.headers) allow |= k == "Allow";
      EXPECT_TRUE(allow);
    }
    ExpectServes();
  }
  // A chunked request body (no Content-Length) over the limit is refused too.
  {
    SCOPED_TRACE("chunked body too large");
    httplib::Client cli("127.0.0.1", port());
    const std::string big = Json{{"prompt", std::string(kBodyLimit + 10, 'a')}}.dump();
    httplib::Result res = cli.Post(
        "/v1/completions",
        [&](size_t offset, httplib::DataSink& sink) {
          const size_t n = std::min<size_t>(4096, big.size() - offset);
          sink.write(big.data() + offset, n);
          if (offset + n == big.size()) sink.done();
          return true;
        },
        "application/json");
    ASSERT_TRUE(res);
    Reply r;
    r.status = res->status;
    r.body = res->body;
    r.json = Json::parse(res->body, nullptr, false);
    ExpectOpenAIError(r, 413, nullptr, "request_too_large");
    ExpectServes();
  }
  // Unknown fields are ignored, as OpenAI does.
  Reply r = Post(port(), "/v1/completions",
                 {{"prompt", "Once"}, {"max_tokens", 2}, {"frobnicate", {{"x", 1}}}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// A client that goes away mid-stream: its request is cancelled and its chunks are freed.
TEST_F(HttpServerTest, ClientDisconnectCancelsTheRequest) {
  scheduler::Scheduler& sched = *stack_->sched;
  ASSERT_TRUE(WaitFor([&] { return sched.Metrics().requests_running == 0; }, 10s));
  const int64_t cancelled_before = sched.Metrics().requests_cancelled_total;

  httplib::Client cli("127.0.0.1", port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = Json{
      {"prompt", kStoryPrompt},
      {"max_tokens", 400},
      {"n", 8},
      {"ignore_eos", true},
      {"stream",
       true}}.dump();
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 2;  // read a little, then hang up
  };
  httplib::Result res = cli.send(req);
  EXPECT_GE(chunks, 1);
  EXPECT_TRUE(
      WaitFor([&] { return sched.Metrics().requests_cancelled_total > cancelled_before; }, 10s))
      << "the request was not cancelled";
  EXPECT_TRUE(WaitFor(
      [&] {
        scheduler::MetricsSnapshot m = sched.Metrics();
        return m.kv_chunks_live == 0 && m.requests_running == 0;
      },
      10s))
      << "kv_chunks_live=" << sched.Metrics().kv_chunks_live;
  ExpectServes();
}

TEST(HttpAuthTest, BearerKeys) {
  ServerOptions opts;
  opts.api_keys = {"sk-one", "sk-two"};
  Stack stack({}, opts, 256);
  const int port = stack.port();
  ExpectOpenAIError(Send(port, "GET", "/v1/models"), 401, nullptr, "invalid_api_key");
  ExpectOpenAIError(Send(port, "GET", "/v1/models", "", {{"Authorization", "Bearer sk-bad"}}), 401,
                    nullptr, "invalid_api_key");
  ExpectOpenAIError(Send(port, "GET", "/v1/models", "", {{"Authorization", "sk-one"}}), 401);
  ExpectOpenAIError(Post(port, "/v1/completions", {{"prompt", "x"}}), 401);
  ExpectOpenAIError(Send(port, "GET", "/metrics"), 401);
  EXPECT_EQ(Send(port, "GET", "/health").status, 200);
  EXPECT_EQ(Send(port, "GET", "/ready").status, 200);
  EXPECT_EQ(Send(port, "GET", "/v1/models", "", {{"Authorization", "Bearer sk-one"}}).status, 200);
  EXPECT_EQ(Send(port, "GET", "/metrics", "", {{"Authorization", "bearer sk-two"}}).status, 200);
  Reply r = Post(port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}},
                 {{"Authorization", "Bearer sk-two"}});
  EXPECT_EQ(r.status, 200) << r.body;
}

// A full waiting queue answers 429 at once; draining answers 503.
TEST(HttpOverloadTest, QueueFullThenDraining) {
  scheduler::SchedulerOptions sopts;
  sopts.loop.max_running_sequences = 1;
  sopts.queue_limit = 1;
  Stack stack(sopts, {}, 256);
  const int port = stack.port();
  const Json long_req = {{"prompt", kStoryPrompt}, {"max_tokens", 400}, {"ignore_eos", true}};

  // Fire requests concurrently until one is refused.
  std::vector<std::thread> threads;
  std::vector<int> statuses(6, 0);
  std::vector<Json> bodies(6);
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      Reply r = Post(port, "/v1/completions", long_req);
      statuses[i] = r.status;
      bodies[i] = r.json;
    });
    std::this_thread::sleep_for(5ms);
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, refused = 0;
  for (int i = 0; i < 6; ++i) {
    if (statuses[i] == 200) ++ok;
    if (statuses[i] == 429) {
      ++refused;
      EXPECT_EQ(bodies[i]["error"]["code"], "rate_limit_exceeded");
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1) << "no 429 with queue_limit 1";
  EXPECT_EQ(ok + refused, 6);

  stack.sched->Drain(std::chrono::milliseconds(1000));
  ExpectOpenAIError(Post(port, "/v1/completions", {{"prompt", "x"}}), 503);
}

}  // namespace
}  // namespace banyan::server::http

namespace banyan::server::http {
namespace {

using namespace http_test;  // NOLINT


// Stop() cuts a running non-streaming request: the client gets what was generated with
// finish_reason "abort", the scheduler frees the request's KV, and Stop returns promptly.
TEST(HttpStopTest, StopCutsRunningRequests) {
  Stack stack({}, {}, 1024);
  const int port = stack.port();
  Reply reply;
  std::thread client([&] {
    reply = Post(port, "/v1/completions",
                 {{"prompt", kStoryPrompt}, {"n", 16}, {"max_tokens", 490}, {"ignore_eos", true}});
  });
  ASSERT_TRUE(WaitFor([&] { return stack.sched->Metrics().requests_running > 0; }, 10s));
  const auto t0 = std::chrono::steady_clock::now();
  stack.http->Stop();
  const auto stop_time = std::chrono::steady_clock::now() - t0;
  client.join();
  EXPECT_LT(stop_time, 5s);
  if (reply.status == 200) {
    EXPECT_EQ(reply.json["choices"][0]["finish_reason"], "abort") << reply.body;
    EXPECT_LT(reply.json["usage"]["completion_tokens"].get<int>(), 16 * 490);
  }
  EXPECT_TRUE(WaitFor([&] { return stack.sched->Metrics().kv_chunks_live == 0; }, 10s));
}

}  // namespace
}  // namespace banyan::server::http
