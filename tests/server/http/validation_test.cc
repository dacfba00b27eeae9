// Unit tests of the pure parts of the HTTP front end: shared validation (server/common/validation.h),
// JSON field reading and error mapping, request decoding, chat templates.
#include "server/common/validation.h"

#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "text/tokenizer/spm_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/server/http/request_fixture.h"
#include "text/chat_template.h"
#include "server/http/openai_json.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace banyan::server {
namespace {

using http::Json;

const ModelLimits kLimits{.context_tokens = 100, .vocab_size = 512, .max_n = 4};

GenerationInput Input(std::vector<int32_t> prompt) {
  GenerationInput in;
  in.prompt = std::move(prompt);
  return in;
}

TEST(StatusPayloadTest, ParamAndCodeRoundTrip) {
  absl::Status s = InvalidParam("temperature", "bad", "some_code");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusParam(s), "temperature");
  EXPECT_EQ(StatusCode(s), "some_code");
  EXPECT_EQ(StatusParam(absl::InvalidArgumentError("x")), "");
  absl::Status ok;
  SetStatusParam(&ok, "x");
  EXPECT_TRUE(ok.ok());
}

TEST(Utf8Test, AcceptsValidRejectsInvalid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("hello \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  size_t off = 99;
  EXPECT_FALSE(IsValidUtf8("ab\xFF", &off));
  EXPECT_EQ(off, 2u);
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));          // truncated
}

TEST(CacheNamespaceTest, SeparatesUsersUnambiguously) {
  EXPECT_NE(CacheNamespace("t", "", ""), "");
  EXPECT_NE(CacheNamespace("t", "alice", ""), CacheNamespace("t", "bob", ""));
  EXPECT_NE(CacheNamespace("t", "ab", "c"), CacheNamespace("t", "a", "bc"));
  EXPECT_NE(CacheNamespace("t", "alice", "s1"), CacheNamespace("t", "alice", "s2"));
  EXPECT_EQ(CacheNamespace("t", "alice", "s1"), CacheNamespace("t", "alice", "s1"));
}

TEST(ResolveMaxTokensTest, DefaultsAndLimits) {
  EXPECT_EQ(*ResolveMaxTokens(std::nullopt, 16, 10, 100), 16);
  EXPECT_EQ(*ResolveMaxTokens(std::nullopt, 16, 90, 100), 10);  // default clipped
  EXPECT_EQ(*ResolveMaxTokens(std::nullopt, 0, 30, 100), 70);   // rest of the context
  EXPECT_EQ(*ResolveMaxTokens(70, 16, 30, 100), 70);

  absl::StatusOr<int> r = ResolveMaxTokens(80, 16, 30, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "max_tokens");
  EXPECT_EQ(StatusCode(r.status()), "context_length_exceeded");
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("100"), std::string::npos) << msg;  // context
  EXPECT_NE(msg.find("30"), std::string::npos) << msg;   // prompt
  EXPECT_NE(msg.find("80"), std::string::npos) << msg;   // completion
  EXPECT_NE(msg.find("110"), std::string::npos) << msg;  // total

  r = ResolveMaxTokens(std::nullopt, 16, 100, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "prompt");
  r = ResolveMaxTokens(0, 16, 10, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "max_tokens");
  r = ResolveMaxTokens(-5, 16, 10, 100, "max_completion_tokens", "messages");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "max_completion_tokens");
}

TEST(BuildRequestTest, TranslatesAValidInput) {
  GenerationInput in = Input({1, 5, 6});
  in.params.temperature = 0.5f;
  in.n = 2;
  in.stop = {"END"};
  in.priority = 3;
  in.user = "alice";
  absl::StatusOr<scheduler::Request> r = BuildRequest(in, kLimits, 16, "cmpl-1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "cmpl-1");
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{1, 5, 6}));
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_FLOAT_EQ(r->params.temperature, 0.5f);
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r->priority, 3);
  EXPECT_EQ(r->cache_namespace, CacheNamespace("default", "alice", ""));
}

TEST(BuildRequestTest, EveryBadFieldIsNamed) {
  struct Case {
    const char* param;
    void (*mutate)(GenerationInput*);
  };
  const Case cases[] = {
      {"prompt", [](GenerationInput* in) { in->prompt.clear(); }},
      {"prompt",
       [](GenerationInput* in) {
         in->prompt = {1, 512};
       }},
      {"prompt", [](GenerationInput* in) { in->prompt = {-1}; }},
      {"n", [](GenerationInput* in) { in->n = 0; }},
      {"n", [](GenerationInput* in) { in->n = 5; }},
      {"stop", [](GenerationInput* in) { in->stop = {""}; }},
      {"stop", [](GenerationInput* in) { in->stop.assign(17, "x"); }},
      {"temperature", [](GenerationInput* in) { in->params.temperature = -1; }},
      {"top_p", [](GenerationInput* in) { in->params.top_p = 0; }},
      {"top_k", [](GenerationInput* in) { in->params.top_k = -2; }},
      {"min_p", [](GenerationInput* in) { in->params.min_p = 1.5f; }},
      {"repetition_penalty", [](GenerationInput* in) { in->params.repetition_penalty = 0; }},
      {"frequency_penalty", [](GenerationInput* in) { in->params.frequency_penalty = 3; }},
      {"presence_penalty", [](GenerationInput* in) { in->params.presence_penalty = -3; }},
      {"logprobs", [](GenerationInput* in) { in->params.logprobs = 21; }},
      {"stop_token_ids", [](GenerationInput* in) { in->params.stop_token_ids = {9999}; }},
      {"logit_bias", [](GenerationInput* in) { in->params.logit_bias = {{512, 1.0f}}; }},
      {"logit_bias", [](GenerationInput* in) { in->params.logit_bias = {{5, 101.0f}}; }},
      {"min_tokens",
       [](GenerationInput* in) {
         in->max_tokens = 10;
         in->params.min_tokens = 11;
       }},
      {"min_tokens", [](GenerationInput* in) { in->params.min_tokens = -1; }},
      {"max_tokens", [](GenerationInput* in) { in->max_tokens = 0; }},
      {"max_tokens", [](GenerationInput* in) { in->max_tokens = 98; }},
      {"priority", [](GenerationInput* in) { in->priority = int64_t{1} << 40; }},
      {"user", [](GenerationInput* in) { in->user.assign(300, 'u'); }},
  };
  for (const Case& c : cases) {
    GenerationInput in = Input({1, 2, 3});
    c.mutate(&in);
    absl::StatusOr<scheduler::Request> r = BuildRequest(in, kLimits, 16, "id");
    ASSERT_FALSE(r.ok()) << c.param;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.param;
    EXPECT_EQ(StatusParam(r.status()), c.param) << r.status();
  }
}

TEST(ErrorMappingTest, StatusToHttp) {
  auto e = http::ErrorFromStatus(InvalidParam("n", "bad n"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "n");
  EXPECT_EQ(http::ErrorFromStatus(absl::ResourceExhaustedError("full")).http_status, 429);
  EXPECT_EQ(http::ErrorFromStatus(absl::ResourceExhaustedError("full")).code,
            "rate_limit_exceeded");
  EXPECT_EQ(http::ErrorFromStatus(absl::UnavailableError("drain")).http_status, 503);
  EXPECT_EQ(http::ErrorFromStatus(absl::NotFoundError("m")).http_status, 404);
  EXPECT_EQ(http::ErrorFromStatus(absl::InternalError("x")).http_status, 500);
  EXPECT_EQ(http::ErrorFromStatus(absl::InternalError("x")).type, "server_error");

  Json j = http::ErrorJson(e);
  ASSERT_TRUE(j["error"].is_object());
  EXPECT_EQ(j["error"]["message"], "bad n");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_EQ(j["error"].size(), 4u);
}

TEST(ParseBodyTest, RejectsBadBodies) {
  EXPECT_TRUE(http::ParseBody(R"({"a": 1})").ok());
  EXPECT_FALSE(http::ParseBody("{").ok());
  EXPECT_FALSE(http::ParseBody("[1, 2]").ok());
  EXPECT_FALSE(http::ParseBody("").ok());
  absl::StatusOr<Json> r = http::ParseBody("{\"prompt\": \"\xFF\"}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("UTF-8"), std::string::npos);
  EXPECT_FALSE(http::ParseBody(R"({"prompt": "\ud800"})").ok());  // lone surrogate escape
  // Errors name the request body and say where the parser stopped; deep nesting has its code.
  r = http::ParseBody(R"({"a": })");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("request body: not valid JSON: parse error at line 1"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(http::ErrorFromStatus(r.status()).http_status, 400);
  r = http::ParseBody("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusCode(r.status()), "json_too_deep");
  EXPECT_NE(r.status().message().find("the limit is 64"), std::string::npos) << r.status();
}

TEST(FieldReaderTest, TypesAndRanges) {
  Json j = Json::parse(R"({"i": 3, "f": 2.0, "g": 2.5, "b": true, "s": "x", "nul": null,
                           "l": ["a", "b"], "ids": [1, 2]})");
  http::FieldReader f(j);
  int64_t i = 0, fi = 0;
  f.Int("i", &i);
  f.Int("f", &fi);  // integral float accepted
  double missing = 7;
  f.Number("nul", &missing);
  f.Number("absent", &missing);
  std::vector<std::string> l;
  f.StringOrList("l", &l);
  std::vector<int32_t> ids;
  f.IntList("ids", &ids);
  ASSERT_TRUE(f.status().ok()) << f.status();
  EXPECT_EQ(i, 3);
  EXPECT_EQ(fi, 2);
  EXPECT_EQ(missing, 7);
  EXPECT_EQ(l.size(), 2u);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));

  for (const char* key : {"g", "b", "s", "l"}) {
    http::FieldReader g(j);
    int64_t v = 0;
    g.Int(key, &v);
    EXPECT_FALSE(g.status().ok()) << key;
    EXPECT_EQ(StatusParam(g.status()), key);
  }
  http::FieldReader r(j);
  int64_t v = 0;
  r.IntRange("i", 4, 10, &v);
  EXPECT_EQ(StatusParam(r.status()), "i");
}

using RequestParseTest = BundledRequestTest;

TEST_F(RequestParseTest, CompletionFields) {
  Json body = Json::parse(R"({"model": "stories", "prompt": "Once upon a time", "max_tokens": 5,
      "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "n": 2,
      "stop": "\n", "logprobs": 3, "stream": true, "stream_options": {"include_usage": true},
      "user": "u", "cache_salt": "s", "ignore_eos": true, "priority": 5,
      "some_future_field": {"x": 1}})");
  absl::StatusOr<http::ParsedGeneration> p = http::ParseCompletionRequest(body, ctx_);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->inputs.size(), 1u);
  const GenerationInput& in = p->inputs[0];
  EXPECT_EQ(in.prompt, tokenizer_->Encode("Once upon a time", true));
  EXPECT_EQ(in.max_tokens, 5);
  EXPECT_FLOAT_EQ(in.params.temperature, 0.7f);
  EXPECT_EQ(in.params.top_k, 40);
  EXPECT_TRUE(in.params.has_seed);
  EXPECT_EQ(in.params.seed, 7u);
  EXPECT_EQ(in.n, 2);
  EXPECT_EQ(in.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(in.params.logprobs, 3);
  EXPECT_TRUE(in.params.ignore_eos);
  EXPECT_EQ(in.priority, -5);  // vLLM: lower first; scheduler: larger first
  EXPECT_TRUE(p->stream);
  EXPECT_TRUE(p->include_usage);
  EXPECT_TRUE(p->logprobs);
  EXPECT_EQ(p->top_logprobs, 3);
}

// vLLM's min_tokens: an integer >= 0 (its bound by max_tokens is BuildRequest's).
TEST_F(RequestParseTest, MinTokens) {
  auto p = http::ParseCompletionRequest(
      Json::parse(R"({"prompt": "x", "min_tokens": 4, "max_tokens": 8})"), ctx_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->inputs[0].params.min_tokens, 4);
  for (const char* bad : {R"({"prompt": "x", "min_tokens": -1})",
                          R"({"prompt": "x", "min_tokens": 1.5})",
                          R"({"prompt": "x", "min_tokens": "3"})"}) {
    p = http::ParseCompletionRequest(Json::parse(bad), ctx_);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(StatusParam(p.status()), "min_tokens") << bad << " " << p.status();
  }
}

// OpenAI's logit_bias: string token ids to numbers, kept sorted by id; empty or null is none.
TEST_F(RequestParseTest, LogitBias) {
  absl::StatusOr<http::ParsedGeneration> p = http::ParseCompletionRequest(
      Json::parse(R"({"prompt": "x", "logit_bias": {"300": -100, "7": 2.5, "12": 100}})"), ctx_);
  ASSERT_TRUE(p.ok()) << p.status();
  using Bias = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(p->inputs[0].params.logit_bias, (Bias{{7, 2.5f}, {12, 100.0f}, {300, -100.0f}}));
  for (const char* none : {R"({"prompt": "x", "logit_bias": {}})",
                           R"({"prompt": "x", "logit_bias": null})"}) {
    p = http::ParseCompletionRequest(Json::parse(none), ctx_);
    ASSERT_TRUE(p.ok()) << none << " " << p.status();
    EXPECT_TRUE(p->inputs[0].params.logit_bias.empty()) << none;
  }
  // A long non-numeric key is quoted cut on a character boundary (valid UTF-8 in the error).
  const std::string key = std::string(31, 'k') + "\u00e9\u00e9";  // the first é spans bytes 31-32
  p = http::ParseCompletionRequest(
      Json::parse(R"({"prompt": "x", "logit_bias": {")" + key + R"(": 1}})"), ctx_);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("\"" + std::string(31, 'k') + "...\""), std::string::npos)
      << p.status();
  // Ids past the vocabulary are refused when the request is built (BuildRequest).
  p = http::ParseChatRequest(
      Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"9": 1}})"),
      ctx_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->inputs[0].params.logit_bias, (Bias{{9, 1.0f}}));
}

// Issue 43, finding 5: " 5" and "+5" were accepted and "5.0" refused. One rule now: a key is
// the token id in decimal digits only; anything else is a 400 naming logit_bias.
TEST_F(RequestParseTest, LogitBiasKeysAreDecimalDigitsOnly) {
  for (const char* key : {" 5", "5 ", "+5", "-5", "-0", "5.0", "5e0", "0x5", "", "\u0665",
                          "4294967301", "99999999999999999999"}) {
    Json body = {{"prompt", "x"}, {"logit_bias", {{key, 1}}}};
    absl::StatusOr<http::ParsedGeneration> p = http::ParseCompletionRequest(body, ctx_);
    ASSERT_FALSE(p.ok()) << "key \"" << key << "\"";
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(StatusParam(p.status()), "logit_bias") << key;
    EXPECT_NE(p.status().message().find("decimal digits only"), std::string::npos) << p.status();
    EXPECT_EQ(http::ErrorFromStatus(p.status()).http_status, 400);
    body.erase("prompt");
    body["messages"] = Json::array({{{"role", "user"}, {"content", "x"}}});
    EXPECT_EQ(StatusParam(http::ParseChatRequest(body, ctx_).status()), "logit_bias") << key;
  }
  using Bias = std::vector<std::pair<int32_t, float>>;
  for (const auto& [key, id] : std::vector<std::pair<std::string, int32_t>>{
           {"0", 0}, {"5", 5}, {"007", 7}, {"2147483647", 2147483647}}) {
    absl::StatusOr<http::ParsedGeneration> p = http::ParseCompletionRequest(
        Json{{"prompt", "x"}, {"logit_bias", {{key, 1}}}}, ctx_);
    ASSERT_TRUE(p.ok()) << key << " " << p.status();
    EXPECT_EQ(p->inputs[0].params.logit_bias, (Bias{{id, 1.0f}})) << key;
  }
  EXPECT_FALSE(http::ParseCompletionRequest(
                   Json{{"prompt", "x"}, {"logit_bias", {{"2147483648", 1}}}}, ctx_)
                   .ok());
}

// Issue 43, finding 5: tools on /v1/completions were dropped as an unknown field.
TEST_F(RequestParseTest, CompletionsRefuseToolFieldsByName) {
  const std::string tool =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  for (const auto& [extra, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("tools": )" + tool, "tools"},
           {R"("tools": [])", "tools"},
           {R"("tools": )" + tool + R"(, "tool_choice": "none")", "tools"},
           {R"("tool_choice": "auto")", "tool_choice"},
           {R"("functions": [{"name": "f"}])", "functions"},
           {R"("function_call": "none")", "function_call"}}) {
    const std::string json = R"({"prompt": "x", )" + extra + "}";
    absl::StatusOr<http::ParsedGeneration> r =
        http::ParseCompletionRequest(Json::parse(json), ctx_);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_EQ(StatusParam(r.status()), param) << json << " " << r.status();
    EXPECT_NE(r.status().message().find("/v1/chat/completions"), std::string::npos) << r.status();
  }
  // null is absent, as everywhere.
  EXPECT_TRUE(
      http::ParseCompletionRequest(Json::parse(R"({"prompt": "x", "tools": null})"), ctx_).ok());
}

TEST_F(RequestParseTest, CompletionPromptForms) {
  auto parse = [&](const char* json) {
    return http::ParseCompletionRequest(Json::parse(json), ctx_);
  };
  auto ids = parse(R"({"prompt": [1, 100, 200]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->inputs[0].prompt, (std::vector<int32_t>{1, 100, 200}));
  auto batch = parse(R"({"prompt": ["a", "b", "c"], "echo": true})");
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->inputs.size(), 3u);
  EXPECT_EQ(batch->echo_texts, (std::vector<std::string>{"a", "b", "c"}));
  auto id_batch = parse(R"({"prompt": [[1, 2], [1, 3]]})");
  ASSERT_TRUE(id_batch.ok()) << id_batch.status();
  EXPECT_EQ(id_batch->inputs.size(), 2u);
  auto no_bos = parse(R"({"prompt": "hi", "add_special_tokens": false})");
  ASSERT_TRUE(no_bos.ok());
  EXPECT_EQ(no_bos->inputs[0].prompt, tokenizer_->Encode("hi", false));

  for (const char* bad :
       {R"({})", R"({"prompt": ""})", R"({"prompt": []})", R"({"prompt": 5})",
        R"({"prompt": ["a", [1]]})", R"({"prompt": [1, "a"]})", R"({"prompt": [[]]})"}) {
    auto r = parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(StatusParam(r.status()), "prompt") << bad << " " << r.status();
  }
}

TEST_F(RequestParseTest, CompletionErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* param;
    absl::StatusCode code = absl::StatusCode::kInvalidArgument;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "model": "gpt-4"})", "model", absl::StatusCode::kNotFound},
      {R"({"prompt": "x", "model": 5})", "model"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"prompt": "x", "logit_bias": [5, 10]})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"five": 10}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"-3": 10}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": "10"}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": true}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 1e300}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": -100.5}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 1, "05": 2}})", "logit_bias"},
      {R"({"prompt": "x", "top_k": -5})", "top_k"},
      {R"({"prompt": "x", "priority": 1e12})", "priority"},
      {R"({"prompt": [1, 99999]})", "prompt"},
  };
  for (const Case& c : cases) {
    auto r = http::ParseCompletionRequest(Json::parse(c.json), ctx_);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), c.code) << c.json << " " << r.status();
    EXPECT_EQ(StatusParam(r.status()), c.param) << c.json << " " << r.status();
  }
}

// Features refused with a 400 naming the field: tool calling on a model whose chat template has
// no tool-call syntax (this context's built-in one), the legacy functions, a bad response_format;
// requests that ask for none of them pass.
TEST_F(RequestParseTest, UnsupportedFeaturesAreRefusedByName) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string tool =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  struct Case {
    std::string extra;
    const char* param;  // nullptr: accepted
  };
  const Case cases[] = {
      {R"("tools": )" + tool, "tool_choice"},
      {R"("tools": )" + tool + R"(, "tool_choice": "auto")", "tool_choice"},
      {R"("tools": )" + tool + R"(, "tool_choice": "required")", "tool_choice"},
      {R"("tools": )" + tool + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})",
       "tool_choice"},
      {R"("tools": )" + tool + R"(, "tool_choice": "none")", nullptr},
      {R"("tools": [])", nullptr},
      {R"("tools": {})", "tools"},
      {R"("tool_choice": "required")", "tool_choice"},
      {R"("tool_choice": "auto")", nullptr},
      {R"("tool_choice": "sometimes")", "tool_choice"},
      {R"("tool_choice": 3)", "tool_choice"},
      {R"("functions": [{"name": "f"}])", "functions"},
      {R"("functions": [{"name": "f"}], "function_call": "none")", nullptr},
      {R"("function_call": {"name": "f"})", "function_call"},
      {R"("response_format": {"type": "json_object"})", "response_format"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})",
       "response_format.json_schema.schema"},
      {R"("response_format": "json")", "response_format"},
      {R"("response_format": {"type": "text"})", nullptr},
      {R"("parallel_tool_calls": false)", nullptr},
  };
  for (const Case& c : cases) {
    const std::string json = "{" + msgs + ", " + c.extra + "}";
    auto r = http::ParseChatRequest(Json::parse(json), ctx_);
    if (c.param == nullptr) {
      EXPECT_TRUE(r.ok()) << json << " " << r.status();
      continue;
    }
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_EQ(StatusParam(r.status()), c.param) << json << " " << r.status();
    EXPECT_NE(r.status().message().find(c.param), std::string::npos)
        << json << " " << r.status();
  }
  auto r = http::ParseCompletionRequest(
      Json::parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})"), ctx_);
  EXPECT_EQ(StatusParam(r.status()), "response_format");
  EXPECT_TRUE(http::ParseCompletionRequest(
                  Json::parse(R"({"prompt": "x", "response_format": {"type": "text"}})"), ctx_)
                  .ok());
}

// vLLM's extensions that banyan lacks: a 400 naming the field, unless the value is vLLM's
// default (which changes nothing).
TEST_F(RequestParseTest, VllmExtensionsAreRefusedUnlessDefault) {
  struct Case {
    const char* extra;
    const char* param;  // nullptr: accepted
  };
  const Case completions[] = {
      {R"("skip_special_tokens": false)", "skip_special_tokens"},
      {R"("skip_special_tokens": true)", nullptr},
      {R"("include_stop_str_in_output": true)", "include_stop_str_in_output"},
      {R"("include_stop_str_in_output": null)", nullptr},
      {R"("use_beam_search": true)", "use_beam_search"},
      {R"("truncate_prompt_tokens": 8)", "truncate_prompt_tokens"},
      {R"("allowed_token_ids": [1, 2])", "allowed_token_ids"},
      {R"("bad_words": ["the"])", "bad_words"},
      {R"("bad_words": [])", nullptr},
      {R"("prompt_logprobs": 1)", "prompt_logprobs"},
      {R"("return_tokens_as_token_ids": true)", "return_tokens_as_token_ids"},
      {R"("echo": true)", nullptr},  // completions' own echo
  };
  // Each case inside a body that is otherwise valid for `parse`: refused naming its field, or
  // accepted.
  const auto check = [](std::span<const Case> cases, const std::string& body_start,
                        const auto& parse) {
    for (const Case& c : cases) {
      const std::string json = body_start + c.extra + "}";
      auto r = parse(Json::parse(json));
      if (c.param == nullptr) {
        EXPECT_TRUE(r.ok()) << json << " " << r.status();
        continue;
      }
      ASSERT_FALSE(r.ok()) << json;
      EXPECT_EQ(StatusParam(r.status()), c.param) << json << " " << r.status();
      EXPECT_NE(r.status().message().find("vLLM extension"), std::string::npos) << r.status();
    }
  };
  check(completions, R"({"prompt": "x", )",
        [&](const Json& body) { return http::ParseCompletionRequest(body, ctx_); });
  const Case chat[] = {
      {R"("echo": true)", "echo"},
      {R"("echo": false)", nullptr},
      {R"("continue_final_message": true)", "continue_final_message"},
      {R"("chat_template": "{{ messages }}")", "chat_template"},
  };
  check(chat, R"({"messages": [{"role": "user", "content": "x"}], )",
        [&](const Json& body) { return http::ParseChatRequest(body, ctx_); });
}

TEST_F(RequestParseTest, ChatFields) {
  Json body = Json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
      "max_completion_tokens": 7, "max_tokens": 3, "logprobs": true, "top_logprobs": 2})");
  auto p = http::ParseChatRequest(body, ctx_);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->inputs[0].max_tokens, 7);
  EXPECT_EQ(p->inputs[0].max_tokens_field, "max_completion_tokens");
  EXPECT_EQ(p->default_max_tokens, 0);
  EXPECT_TRUE(p->logprobs);
  EXPECT_EQ(p->inputs[0].params.logprobs, 2);
  EXPECT_EQ(p->inputs[0].prompt,
            tokenizer_->Encode("system: Be brief.\nuser: Hi\nthere\nassistant:", true));

  for (const char* bad :
       {R"({})", R"({"messages": []})", R"({"messages": "hi"})",
        R"({"messages": [{"role": "user"}]})", R"({"messages": [{"content": "x"}]})",
        R"({"messages": [{"role": "tool", "content": "x"}]})",
        R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
        R"({"messages": [{"role": "user", "content": 5}]})"}) {
    auto r = http::ParseChatRequest(Json::parse(bad), ctx_);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(StatusParam(r.status()).rfind("messages", 0), 0u) << bad << " " << r.status();
  }
  auto r = http::ParseChatRequest(
      Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), ctx_);
  EXPECT_EQ(StatusParam(r.status()), "top_logprobs");
  r = http::ParseChatRequest(
      Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21,
                      "logprobs": true})"),
      ctx_);
  EXPECT_EQ(StatusParam(r.status()), "top_logprobs");
}

TEST(ChatTemplateTest, ToolCallsAreCheckedAndMarked) {
  auto m = http::ParseMessages(Json::parse(
      R"({"messages": [{"role": "assistant", "content": null,
                        "tool_calls": [{"id": "c", "type": "function",
                                        "function": {"name": "f", "arguments": "{}"}}]},
                       {"role": "tool", "tool_call_id": "c", "content": "r"}]})"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)[0].has_tool_calls);
  EXPECT_EQ((*m)[1].role, "tool");
  EXPECT_FALSE((*m)[1].has_tool_calls);
  const Json not_array = Json::parse(R"j({"messages": [{"role": "assistant", "tool_calls": "f()"}]})j");
  EXPECT_EQ(http::ParseMessages(not_array).status().message(),
            "messages[0].tool_calls must be an array");
  const Json from_user =
      Json::parse(R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{}]}]})");
  EXPECT_FALSE(http::ParseMessages(from_user).ok());
  // Built-in templates can not render them.
  EXPECT_FALSE(text::RenderChat(text::ChatTemplate::kChatML, *m).ok());
}

TEST(TokenReprTest, PiecesAndBytes) {
  auto t = text::SpmTokenizer::FromFile(BundledTokenizerPath());
  ASSERT_TRUE(t.ok());
  const text::SpmVocab& v = (*t)->vocab();
  for (int id = 0; id < static_cast<int>(v.pieces.size()); ++id) {
    http::TokenRepr r = http::DescribeToken(**t, id);
    if (v.types[id] == text::PieceType::kByte) {
      ASSERT_EQ(r.bytes.size(), 1u) << v.pieces[id];
      if (r.bytes[0] >= 0x80) {
        EXPECT_EQ(r.text.rfind("bytes:\\x", 0), 0u) << r.text;
      }
    } else {
      EXPECT_EQ(r.text.find("\xE2\x96\x81"), std::string::npos) << r.text;
      EXPECT_TRUE(IsValidUtf8(r.text));
    }
  }
}

}  // namespace
}  // namespace banyan::server
