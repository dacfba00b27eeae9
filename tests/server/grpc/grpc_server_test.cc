// End-to-end tests of the gRPC front end: a real GrpcFrontEnd and Scheduler on the bundled
// model, on a free loopback port, driven through the generated stubs.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <regex>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/common/validation.h"
#include "tests/server/grpc/test_server.h"

namespace banyan::server::testing {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TenantSpec MakeTenant(std::string name, std::vector<std::string> keys, int max_concurrent = 0) {
  TenantSpec t;
  t.name = std::move(name);
  t.keys = std::move(keys);
  t.max_concurrent_requests = max_concurrent;
  return t;
}

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServerOptions options;
    options.num_chunks = 2048;  // room for LongRequest(16)
    server_ = std::make_unique<TestServer>(options);
    channel_ = server_->NewChannel();
    stub_ = v1::Generation::NewStub(channel_);
  }
  void TearDown() override {
    // Nothing may stay allocated once every call is over.
    EXPECT_TRUE(server_->WaitForMetrics([](const scheduler::MetricsSnapshot& m) {
      return m.kv_chunks_live == 0;
    })) << "live chunks: "
        << server_->scheduler().Metrics().kv_chunks_live;
  }

  std::vector<int32_t> Tokenize(const std::string& text) {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_text(text);
    v1::TokenizeResponse resp;
    EXPECT_TRUE(stub_->Tokenize(&ctx, req, &resp).ok());
    return {resp.token_ids().begin(), resp.token_ids().end()};
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    grpc::Status s = health->Check(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  }

  // A generation that runs long enough to be interrupted: n samples of the whole context.
  v1::GenerateRequest LongRequest(int n = 4) {
    v1::GenerateRequest req = GreedyText("Once upon a time", 0);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(1);
    req.mutable_sampling()->set_n(n);
    req.mutable_sampling()->set_ignore_eos(true);
    const int prompt = static_cast<int>(Tokenize("Once upon a time").size());
    req.mutable_sampling()->set_max_tokens(server_->context().model_config->max_seq_len - prompt);
    return req;
  }

  void ExpectStillServes() {
    GenerateResult r = Generate(*stub_, GreedyText("The dog", 4));
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.choices.size(), 1u);
  }

  std::unique_ptr<TestServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(GrpcServerTest, GenerateByTextStreamsTheEnginesGreedyOutput) {
  const std::string prompt = "Once upon a time, there was a little";
  const std::vector<int32_t> ids = Bundle().tokenizer->Encode(prompt, true);
  // The whole remaining context, EOS ignored: the generation lasts several of the pump's polls
  // even on an idle fast machine (40 tokens took ~1 ms there and arrived in one message).
  const int max_tokens =
      server_->context().model_config->max_seq_len - static_cast<int>(ids.size());
  v1::GenerateRequest req = GreedyText(prompt, max_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.choices.size(), 1u);
  const ChoiceResult& c = r.choices[0];
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  EXPECT_EQ(c.token_ids, EngineTokens(ids, greedy)[0]);
  // The text continues the prompt's (a leading space included).
  std::vector<int32_t> all = ids;
  all.insert(all.end(), c.token_ids.begin(), c.token_ids.end());
  EXPECT_EQ(Bundle().tokenizer->Decode(ids) + c.text, Bundle().tokenizer->Decode(all));
  EXPECT_FALSE(c.text.empty());
  EXPECT_NE(c.finish, v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_GT(c.messages, 1) << "the output should arrive as a stream, not in one message";
  ASSERT_TRUE(r.usage.has_value());
  EXPECT_TRUE(r.usage_last);
  EXPECT_EQ(r.usage->prompt_tokens(), static_cast<int>(ids.size()));
  EXPECT_EQ(r.usage->completion_tokens(), static_cast<int>(c.token_ids.size()));
  EXPECT_EQ(r.request_id.rfind("grpc-", 0), 0u) << r.request_id;
}

TEST_F(GrpcServerTest, TokenIdsInputEqualsTextInputAndGreedyRepeats) {
  const std::string prompt = "Lily saw a big red ball";
  GenerateResult by_text = Generate(*stub_, GreedyText(prompt, 30));
  ASSERT_TRUE(by_text.status.ok()) << by_text.status.error_message();

  v1::GenerateRequest req = GreedyText("", 30);
  for (int32_t id : Tokenize(prompt)) req.mutable_token_ids()->add_ids(id);
  req.set_request_id("my-request.1");
  GenerateResult by_ids = Generate(*stub_, req);
  ASSERT_TRUE(by_ids.status.ok()) << by_ids.status.error_message();
  EXPECT_EQ(by_ids.choices[0].token_ids, by_text.choices[0].token_ids);
  EXPECT_EQ(by_ids.choices[0].text, by_text.choices[0].text);
  EXPECT_EQ(by_ids.request_id, "my-request.1");
  // The second run finds the prompt in the prefix cache.
  ASSERT_TRUE(by_ids.usage.has_value());
  EXPECT_GT(by_ids.usage->cached_prompt_tokens(), 0);

  GenerateResult again = Generate(*stub_, GreedyText(prompt, 30));
  EXPECT_EQ(again.choices[0].token_ids, by_text.choices[0].token_ids);
}

TEST_F(GrpcServerTest, SeededSamplingWithNIsReproducible) {
  v1::GenerateRequest req = GreedyText("The little cat", 24);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(1234);
  req.mutable_sampling()->set_n(3);
  GenerateResult a = Generate(*stub_, req);
  GenerateResult b = Generate(*stub_, req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  ASSERT_EQ(a.choices.size(), 3u);
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.choices[i].token_ids, b.choices[i].token_ids) << "choice " << i;
    EXPECT_EQ(a.choices[i].text, b.choices[i].text) << "choice " << i;
    EXPECT_NE(a.choices[i].finish, v1::FINISH_REASON_UNSPECIFIED);
    completion += static_cast<int>(a.choices[i].token_ids.size());
  }
  // Three samples from one seed are three different random streams.
  EXPECT_FALSE(a.choices[0].token_ids == a.choices[1].token_ids &&
               a.choices[1].token_ids == a.choices[2].token_ids);
  ASSERT_TRUE(a.usage.has_value());
  EXPECT_EQ(a.usage->completion_tokens(), completion);
}

TEST_F(GrpcServerTest, StopStringsEndTheTextBeforeTheMatch) {
  GenerateResult full = Generate(*stub_, GreedyText("Once upon a time", 60));
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  const std::string text = full.choices[0].text;
  // A stop string from the middle of the greedy text (spanning tokens is fine).
  const size_t at = text.find(' ', text.size() / 2);
  ASSERT_NE(at, std::string::npos) << text;
  const std::string stop = text.substr(at, 4);

  v1::GenerateRequest req = GreedyText("Once upon a time", 60);
  req.mutable_sampling()->add_stop(stop);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const std::string want = text.substr(0, text.find(stop));
  EXPECT_EQ(r.choices[0].text, want) << "stop: '" << stop << "'";
  EXPECT_EQ(r.choices[0].finish, v1::FINISH_REASON_STOP);
}

TEST_F(GrpcServerTest, StopTokenIdsEndTheChoice) {
  GenerateResult full = Generate(*stub_, GreedyText("Once upon a time", 30));
  ASSERT_TRUE(full.status.ok());
  const std::vector<int32_t>& ids = full.choices[0].token_ids;
  ASSERT_GE(ids.size(), 10u);
  const int32_t stop_id = ids[5];
  const size_t first = std::find(ids.begin(), ids.end(), stop_id) - ids.begin();

  v1::GenerateRequest req = GreedyText("Once upon a time", 30);
  req.mutable_sampling()->add_stop_token_ids(stop_id);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.choices[0].finish, v1::FINISH_REASON_STOP);
  // Same as the engine: everything before the stop token (the proto documents whether the stop
  // token itself is sent).
  ASSERT_GE(r.choices[0].token_ids.size(), first);
  EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + first, r.choices[0].token_ids.begin()));
  EXPECT_LE(r.choices[0].token_ids.size(), first + 1);
}

TEST_F(GrpcServerTest, LogprobsComeWithEveryToken) {
  v1::GenerateRequest req = GreedyText("Once upon a time", 12);
  req.mutable_sampling()->set_logprobs(3);
  GenerateResult r = Generate(*stub_, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const ChoiceResult& c = r.choices[0];
  ASSERT_EQ(c.logprobs.size(), c.token_ids.size());
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    const v1::StepLogprobs& lp = c.logprobs[i];
    EXPECT_EQ(lp.token().token_id(), c.token_ids[i]);
    EXPECT_LE(lp.token().logprob(), 0.0f);
    ASSERT_EQ(lp.top_size(), 3);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(lp.top(0).token_id(), c.token_ids[i]);
    EXPECT_GE(lp.top(0).logprob(), lp.top(1).logprob());
  }
  GenerateResult none = Generate(*stub_, GreedyText("Once upon a time", 4));
  EXPECT_TRUE(none.choices[0].logprobs.empty());
}

TEST_F(GrpcServerTest, TokenizeDetokenizeAndListModels) {
  grpc::ClientContext c1;
  v1::TokenizeRequest treq;
  treq.set_text("Hello world");
  v1::TokenizeResponse tresp;
  ASSERT_TRUE(stub_->Tokenize(&c1, treq, &tresp).ok());
  const auto& tok = *Bundle().tokenizer;
  EXPECT_EQ(std::vector<int32_t>(tresp.token_ids().begin(), tresp.token_ids().end()),
            tok.Encode("Hello world", true));
  ASSERT_EQ(tresp.pieces_size(), tresp.token_ids_size());
  EXPECT_EQ(tresp.pieces(1), std::string(tok.Piece(tresp.token_ids(1))));
  EXPECT_EQ(tresp.max_context_length(), Bundle().weights.config.max_seq_len);

  grpc::ClientContext c2;
  treq.set_add_bos(false);
  ASSERT_TRUE(stub_->Tokenize(&c2, treq, &tresp).ok());
  EXPECT_EQ(std::vector<int32_t>(tresp.token_ids().begin(), tresp.token_ids().end()),
            tok.Encode("Hello world", false));

  grpc::ClientContext c3;
  v1::DetokenizeRequest dreq;
  dreq.mutable_token_ids()->CopyFrom(tresp.token_ids());
  v1::DetokenizeResponse dresp;
  ASSERT_TRUE(stub_->Detokenize(&c3, dreq, &dresp).ok());
  EXPECT_EQ(dresp.text(), "Hello world");

  grpc::ClientContext c4;
  dreq.add_token_ids(100000);
  grpc::Status s = stub_->Detokenize(&c4, dreq, &dresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(s.error_message(), "100000")) << s.error_message();

  grpc::ClientContext c5;
  v1::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&c5, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), kModelName);
  EXPECT_EQ(models.models(0).max_context_length(), Bundle().weights.config.max_seq_len);
  EXPECT_EQ(models.models(0).vocab_size(), Bundle().weights.config.vocab_size);
  EXPECT_EQ(models.models(0).eos_token_id(), tok.eos_id());

  grpc::ClientContext c6;
  treq.set_model("nope");
  s = stub_->Tokenize(&c6, treq, &tresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServerTest, HealthFollowsReadiness) {
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health("banyan.v1.Generation"), HealthCheckResponse::SERVING);

  server_->ready() = false;
  server_->front_end().UpdateHealth();
  EXPECT_EQ(Health(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Health("banyan.v1.Generation"), HealthCheckResponse::NOT_SERVING);
  GenerateResult r = Generate(*stub_, GreedyText("Hi", 2));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(Contains(r.status.error_message(), "not ready")) << r.status.error_message();

  // Without UpdateHealth: the pump's periodic check notices.
  server_->ready() = true;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (Health("") != HealthCheckResponse::SERVING && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);
  ExpectStillServes();
}

// Each bad request gets its status code and a message naming the problem, and the server keeps
// serving.
TEST_F(GrpcServerTest, BadRequestsAreRefusedAndTheServerKeepsServing) {
  const int context = Bundle().weights.config.max_seq_len;
  struct Case {
    const char* what;
    std::function<void(v1::GenerateRequest*)> edit;
    grpc::StatusCode code;
    std::vector<std::string> message_has;
  };
  const std::vector<Case> cases = {
      {"empty prompt",
       [](v1::GenerateRequest* r) { r->set_text(""); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"prompt is empty"}},
      {"no prompt",
       [](v1::GenerateRequest* r) { r->clear_input(); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"prompt is missing"}},
      {"unknown model",
       [](v1::GenerateRequest* r) { r->set_model("llama-70b"); },
       grpc::StatusCode::NOT_FOUND,
       {"llama-70b", kModelName}},
      {"prompt + max_tokens beyond the context",
       [&](v1::GenerateRequest* r) {
         for (int i = 0; i < 300; ++i) r->mutable_token_ids()->add_ids(100);
         r->mutable_sampling()->set_max_tokens(300);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"300", std::to_string(context)}},
      {"prompt alone fills the context",
       [&](v1::GenerateRequest* r) {
         for (int i = 0; i < context; ++i) r->mutable_token_ids()->add_ids(100);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {std::to_string(context)}},
      {"negative temperature",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_temperature(-0.5f); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"temperature"}},
      {"top_p above 1",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5f); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"top_p"}},
      {"top_k below -1",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_k(-3); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"top_k"}},
      {"n too large",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_n(100); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"n must be between 1 and 16"}},
      {"max_tokens 0",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_max_tokens(0); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"max_tokens"}},
      {"token id outside the vocabulary",
       [](v1::GenerateRequest* r) { r->mutable_token_ids()->add_ids(-1); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"-1", "vocabulary"}},
      {"invalid UTF-8 text",
       [](v1::GenerateRequest* r) { r->set_text(std::string("Once \xE2\x28\xA1 upon")); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"text is not valid UTF-8", "offset 5"}},
      {"invalid UTF-8 stop string",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->add_stop("\xC0\xAF"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"sampling.stop is not valid UTF-8"}},
      {"bad request id",
       [](v1::GenerateRequest* r) { r->set_request_id("a b"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"request_id"}},
      {"two constraints",
       [](v1::GenerateRequest* r) {
         r->set_regex("[a-z]+");
         r->set_json_object(true);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"json_object and regex both constrain the output"}},
      {"invalid regex",
       [](v1::GenerateRequest* r) { r->set_regex("[a-z"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"regex cannot be compiled"}},
      {"empty choice list (sent, with no values)",
       [](v1::GenerateRequest* r) { r->mutable_choice(); },
       grpc::StatusCode::INVALID_ARGUMENT,
       {"choice must be a non-empty list"}},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req = GreedyText("Once upon a time", 8);
    c.edit(&req);
    GenerateResult r = Generate(*stub_, req);
    EXPECT_EQ(r.status.error_code(), c.code) << c.what << ": " << r.status.error_message();
    for (const std::string& part : c.message_has) {
      EXPECT_TRUE(Contains(r.status.error_message(), part))
          << c.what << ": '" << part << "' not in '" << r.status.error_message() << "'";
    }
    EXPECT_TRUE(r.choices.empty()) << c.what;
    ExpectStillServes();
  }
}

// regex, choice and json_object through the wire: every sampled choice obeys its constraint.
TEST_F(GrpcServerTest, StructuredOutputsConstrainEverySampledChoice) {
  auto sampled = [](int max_tokens) {
    v1::GenerateRequest req = GreedyText("Once upon a time", max_tokens);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(11);
    req.mutable_sampling()->set_n(4);
    return req;
  };
  // Finite languages: each choice ends with the grammar (STOP), well within max_tokens.
  v1::GenerateRequest regex = sampled(32);
  regex.set_regex("[0-9]{3}-(yes|no)");
  GenerateResult r = Generate(*stub_, regex);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.choices.size(), 4u);
  const std::regex pattern("[0-9]{3}-(yes|no)", std::regex::ECMAScript);
  for (const auto& [i, c] : r.choices) {
    EXPECT_EQ(c.finish, v1::FINISH_REASON_STOP) << i << ": " << c.text;
    EXPECT_TRUE(std::regex_match(c.text, pattern)) << i << ": " << c.text;
  }

  const std::vector<std::string> options = {"yes", "no", "a.b (maybe)"};
  v1::GenerateRequest choice = sampled(32);
  for (const std::string& o : options) choice.mutable_choice()->add_values(o);
  r = Generate(*stub_, choice);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.choices.size(), 4u);
  for (const auto& [i, c] : r.choices) {
    EXPECT_EQ(c.finish, v1::FINISH_REASON_STOP) << i << ": " << c.text;
    EXPECT_NE(std::find(options.begin(), options.end(), c.text), options.end())
        << i << ": " << c.text;
  }

  // Any object: unbounded, so a choice may run out of tokens; one that ended is a whole object.
  const int prompt = static_cast<int>(Tokenize("Once upon a time").size());
  v1::GenerateRequest object = sampled(server_->context().model_config->max_seq_len - prompt);
  object.set_json_object(true);
  r = Generate(*stub_, object);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.choices.size(), 4u);
  int whole = 0;
  for (const auto& [i, c] : r.choices) {
    ASSERT_FALSE(c.text.empty()) << i;
    EXPECT_EQ(c.text[0], '{') << i << ": " << c.text;
    if (c.finish == v1::FINISH_REASON_LENGTH) continue;
    EXPECT_EQ(c.finish, v1::FINISH_REASON_STOP) << i << ": " << c.text;
    const nlohmann::json parsed =
        nlohmann::json::parse(c.text, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(parsed.is_object()) << i << ": " << c.text;
    ++whole;
  }
  EXPECT_GE(whole, 1) << "no choice finished its object";
}

TEST_F(GrpcServerTest, ClientCancellationMidStreamFreesTheKv) {
  const int64_t cancelled_before = server_->scheduler().Metrics().requests_cancelled_total;
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, LongRequest());
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_GT(msg.choices_size(), 0);
  // Metrics are published at the end of an engine iteration, which can come after the client
  // already read that iteration's token: wait for them rather than read once.
  EXPECT_TRUE(server_->WaitForMetrics(
      [](const scheduler::MetricsSnapshot& m) { return m.kv_chunks_live > 0; }));
  ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(server_->WaitForMetrics([&](const scheduler::MetricsSnapshot& m) {
    return m.kv_chunks_live == 0 && m.requests_cancelled_total > cancelled_before;
  })) << "live chunks: "
      << server_->scheduler().Metrics().kv_chunks_live;
  ExpectStillServes();
}

TEST_F(GrpcServerTest, DeadlineCancelsTheRequest) {
  const int64_t cancelled_before = server_->scheduler().Metrics().requests_cancelled_total;
  GenerateResult r = Generate(*stub_, LongRequest(16), [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  });
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  EXPECT_TRUE(server_->WaitForMetrics([&](const scheduler::MetricsSnapshot& m) {
    return m.kv_chunks_live == 0 && m.requests_cancelled_total > cancelled_before;
  })) << "live chunks: "
      << server_->scheduler().Metrics().kv_chunks_live;
  ExpectStillServes();
}

TEST_F(GrpcServerTest, ConcurrentStreamsGiveTheirSoloOutputs) {
  const std::vector<std::string> prompts = {"Once upon a time", "The dog ran", "Lily and Tom",
                                            "Once upon a time, there was"};
  std::vector<GenerateResult> solo;
  for (const std::string& p : prompts) solo.push_back(Generate(*stub_, GreedyText(p, 32)));
  constexpr int kClients = 16;
  std::vector<GenerateResult> got(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back(
        [&, i] { got[i] = Generate(*stub_, GreedyText(prompts[i % prompts.size()], 32)); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].choices[0].token_ids, solo[i % prompts.size()].choices[0].token_ids);
    EXPECT_EQ(got[i].choices[0].text, solo[i % prompts.size()].choices[0].text);
  }
}

TEST_F(GrpcServerTest, ShutdownCutsOpenStreamsAndFreesTheKv) {
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, LongRequest(16));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  server_->front_end().Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(50));
  while (reader->Read(&msg)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(server_->WaitForMetrics(
      [](const scheduler::MetricsSnapshot& m) { return m.kv_chunks_live == 0; }));
  // A new call finds nobody listening.
  GenerateResult after = Generate(*stub_, GreedyText("Hi", 2), [](grpc::ClientContext* c) {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  EXPECT_FALSE(after.status.ok());
}

TEST(GrpcServerQueueTest, FullQueueGivesResourceExhaustedWhileAcceptedRequestsComplete) {
  TestServerOptions options;
  options.scheduler.loop.max_running_sequences = 1;
  options.scheduler.queue_limit = 1;
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  constexpr int kClients = 12;
  std::vector<GenerateResult> got(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { got[i] = Generate(*stub, GreedyText("Once upon a time", 64)); });
  }
  for (std::thread& t : threads) t.join();
  int ok = 0, exhausted = 0;
  for (const GenerateResult& r : got) {
    if (r.status.ok()) {
      ++ok;
      EXPECT_EQ(r.choices.size(), 1u);
      EXPECT_TRUE(r.usage.has_value());
    } else {
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << r.status.error_message();
      ++exhausted;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_TRUE(server.WaitForMetrics(
      [](const scheduler::MetricsSnapshot& m) { return m.kv_chunks_live == 0; }));
}

TEST(GrpcServerAuthTest, ApiKeysAreRequiredExceptForHealth) {
  TestServerOptions options;
  options.api_keys = {"key-one", "key-two"};
  TestServer server(options);
  auto channel = server.NewChannel();
  auto stub = v1::Generation::NewStub(channel);
  auto with_key = [](const std::string& header) {
    return [header](grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", header); };
  };

  GenerateResult none = Generate(*stub, GreedyText("Hi", 2));
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Contains(none.status.error_message(), "Bearer")) << none.status.error_message();
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2), with_key("Bearer key-three")).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2), with_key("key-one")).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Generate(*stub, GreedyText("Hi", 2), with_key("Bearer key-one")).status.ok());
  EXPECT_TRUE(Generate(*stub, GreedyText("Hi", 2), with_key("Bearer key-two")).status.ok());
  EXPECT_TRUE(Generate(*stub, GreedyText("Hi", 2), with_key("bearer key-two")).status.ok());
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2), with_key("Bearer key-twox")).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext c1;
  v1::ListModelsResponse models;
  EXPECT_EQ(stub->ListModels(&c1, v1::ListModelsRequest(), &models).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext c2;
  c2.AddMetadata("authorization", "Bearer key-two");
  EXPECT_TRUE(stub->ListModels(&c2, v1::ListModelsRequest(), &models).ok());
  grpc::ClientContext c3;
  v1::TokenizeRequest treq;
  treq.set_text("Hi");
  v1::TokenizeResponse tresp;
  EXPECT_EQ(stub->Tokenize(&c3, treq, &tresp).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Health needs no key (probes carry none).
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext c4;
  HealthCheckResponse hresp;
  ASSERT_TRUE(health->Check(&c4, HealthCheckRequest(), &hresp).ok());
  EXPECT_EQ(hresp.status(), HealthCheckResponse::SERVING);
}

// Issue 14, finding 9: over gRPC a trailing space after the key was kept (HTTP trimmed it);
// now both drop whitespace around the value, as HTTP's field syntax does, and nothing else
// (server/common/auth.h). Two authorization entries are refused.
TEST(GrpcServerAuthTest, RawKeyRulesAndDuplicateEntries) {
  TestServerOptions options;
  options.api_keys = {"key-one"};
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  auto call = [&](std::vector<std::string> values) {
    grpc::ClientContext ctx;
    for (const std::string& v : values) ctx.AddMetadata("authorization", v);
    v1::ListModelsResponse models;
    return stub->ListModels(&ctx, v1::ListModelsRequest(), &models).error_code();
  };
  EXPECT_EQ(call({"Bearer key-one"}), grpc::StatusCode::OK);
  EXPECT_EQ(call({"Bearer key-one "}), grpc::StatusCode::OK);
  EXPECT_EQ(call({"Bearer key-one x"}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call({"Bearer  key-one"}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call({"Bearer %6Bey-one"}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call({"Bearer key-one", "Bearer key-one"}), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call({"Bearer nope", "Bearer key-one"}), grpc::StatusCode::UNAUTHENTICATED);
}

// Issue 14, finding 4: the prefix-cache namespace came from the request's `user`, so another
// key sending the same `user` read alice's cache (cached_tokens). Now it is the tenant.
TEST(GrpcServerTenantTest, TenantsNeverShareTheCacheWhateverUserTheyClaim) {
  TestServerOptions options;
  options.num_chunks = 1024;
  options.tenants = {MakeTenant("alice", {"sk-alice"}), MakeTenant("bob", {"sk-bob"})};
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  auto as = [](const std::string& key) {
    return [key](grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", "Bearer " + key); };
  };
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her big red ball and her little brown dog named Max.";
  auto request = [&](const std::string& user) {
    v1::GenerateRequest r = GreedyText(prompt, 2);
    r.set_user(user);
    return r;
  };
  auto cached = [](const GenerateResult& r) {
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    return r.usage.has_value() ? r.usage->cached_prompt_tokens() : -1;
  };

  EXPECT_EQ(cached(Generate(*stub, request("u"), as("sk-alice"))), 0);
  // Within alice's tenant the prefix is shared: that is the point.
  const int64_t alice_again = cached(Generate(*stub, request("u"), as("sk-alice")));
  EXPECT_GT(alice_again, 0);
  // bob, claiming the same user, or none, finds nothing of alice's.
  EXPECT_EQ(cached(Generate(*stub, request("u"), as("sk-bob"))), 0);
  EXPECT_EQ(cached(Generate(*stub, request(""), as("sk-bob"))), 0);
  // A user string spelling alice's namespace does not reach it either.
  EXPECT_EQ(cached(Generate(*stub, request(CacheNamespace("alice", "u", "")), as("sk-bob"))), 0);
  // bob's own repeat is cached within bob; user narrows within the tenant.
  EXPECT_GT(cached(Generate(*stub, request("u"), as("sk-bob"))), 0);
  EXPECT_EQ(cached(Generate(*stub, request("other"), as("sk-alice"))), 0);
}

TEST(GrpcServerTenantTest, ConcurrencyLimitPerTenant) {
  TestServerOptions options;
  options.num_chunks = 2048;
  options.tenants = {MakeTenant("alice", {"sk-alice"}, 1), MakeTenant("bob", {"sk-bob"})};
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  auto as = [](const std::string& key) {
    return [key](grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", "Bearer " + key); };
  };
  // alice's first call streams the whole context; hold it open by reading one message.
  v1::GenerateRequest long_req = GreedyText("Once upon a time", 400);
  long_req.mutable_sampling()->set_ignore_eos(true);
  long_req.mutable_sampling()->set_n(4);
  grpc::ClientContext first_ctx;
  first_ctx.AddMetadata("authorization", "Bearer sk-alice");
  auto reader = stub->Generate(&first_ctx, long_req);
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));

  GenerateResult second = Generate(*stub, GreedyText("Hi", 2), as("sk-alice"));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << second.status.error_message();
  EXPECT_TRUE(Contains(second.status.error_message(), "alice")) << second.status.error_message();
  EXPECT_TRUE(Generate(*stub, GreedyText("Hi", 2), as("sk-bob")).status.ok());

  first_ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  reader->Finish();
  // The slot is free again once the call is done.
  bool ok = false;
  for (int i = 0; i < 200 && !ok; ++i) {
    ok = Generate(*stub, GreedyText("Hi", 2), as("sk-alice")).status.ok();
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ok);
}

// Issue 14, finding 9: a 7 MB prompt to Tokenize cost seconds of CPU before it was refused.
TEST(GrpcServerLimitsTest, LongPromptsAreRefusedBeforeTokenizing) {
  TestServerOptions options;
  options.max_prompt_bytes = 4096;
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  const std::string big(2 << 20, 'a');
  grpc::ClientContext c1;
  v1::TokenizeRequest treq;
  treq.set_text(big);
  v1::TokenizeResponse tresp;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = stub->Tokenize(&c1, treq, &tresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(Contains(s.error_message(), "4096")) << s.error_message();
  GenerateResult g = Generate(*stub, GreedyText(big, 2));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.status.error_message();
  EXPECT_TRUE(Contains(g.status.error_message(), "max_prompt_bytes")) << g.status.error_message();
  std::printf("two refused 2 MiB prompts: %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());
  grpc::ClientContext c2;
  treq.set_text(std::string(4096, 'a'));
  EXPECT_TRUE(stub->Tokenize(&c2, treq, &tresp).ok());
}

TEST(GrpcServerStartTest, BusyPortIsAnError) {
  TestServer first;
  ServerContext ctx = [&] {
    ServerContext c;
    c.model_name = kModelName;
    c.model_config = first.context().model_config;
    c.tokenizer = first.context().tokenizer;
    c.options.host = "127.0.0.1";
    c.options.grpc_port = first.front_end().port();
    return c;
  }();
  GrpcFrontEnd second(&ctx);
  absl::Status s = second.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), std::to_string(first.front_end().port())));
}

}  // namespace
}  // namespace banyan::server::testing
