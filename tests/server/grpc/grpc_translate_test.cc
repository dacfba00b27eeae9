// Unit tests of the gRPC front end's translation layer (no server): defaults, validation
// wiring, UTF-8 failure explanations, event grouping, status mapping.
#include "server/grpc/grpc_translate.h"

#include <string>

#include "model/model_bundle.h"
#include "gtest/gtest.h"
#include "server/grpc/grpc_status.h"
#include "server/common/structured_outputs.h"
#include "server/common/validation.h"
#include "tests/testing/bundled_model.h"
#include "text/grammar/matcher.h"

namespace banyan::server {
namespace {

class TranslateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { bundle_ = &banyan::testing::BundledModel(); }

  TranslateTest() {
    ctx_.model_name = "stories260K";
    ctx_.model_config = &bundle_->weights.config;
    ctx_.tokenizer = bundle_->tokenizer.get();
  }
  int context() const { return bundle_->weights.config.max_seq_len; }

  static const model::ModelBundle* bundle_;
  ServerContext ctx_;
};
const model::ModelBundle* TranslateTest::bundle_ = nullptr;

TEST_F(TranslateTest, UnsetFieldsTakeTheDocumentedDefaults) {
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  auto r = ToSchedulerRequest(req, ctx_, "id-1", "default");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "id-1");
  EXPECT_EQ(r->prompt, ctx_.tokenizer->Encode("Once upon a time", /*add_bos=*/true));
  EXPECT_EQ(r->params.max_tokens, kGrpcDefaultMaxTokens);
  EXPECT_EQ(r->params.temperature, 1.0f);
  EXPECT_EQ(r->params.top_p, 1.0f);
  EXPECT_EQ(r->params.top_k, 0);
  EXPECT_EQ(r->params.repetition_penalty, 1.0f);
  EXPECT_FALSE(r->params.has_seed);
  EXPECT_EQ(r->params.logprobs, 0);
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->priority, 0);
  EXPECT_EQ(r->cache_namespace, CacheNamespace("default", "", ""));
  EXPECT_FALSE(r->deadline.has_value());
}

TEST_F(TranslateTest, SetFieldsCarryOver) {
  v1::GenerateRequest req;
  req.set_text("Hi");
  req.set_add_bos(false);
  req.set_priority(7);
  req.set_cache_salt("tenant-a");
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_max_tokens(5);
  s->set_temperature(0);
  s->set_top_p(0.5f);
  s->set_top_k(3);
  s->set_min_p(0.1f);
  s->set_repetition_penalty(1.2f);
  s->set_frequency_penalty(-1);
  s->set_presence_penalty(1.5f);
  s->set_seed(0);  // explicitly 0 is a seed
  s->set_n(3);
  s->add_stop("The");
  s->add_stop_token_ids(13);
  s->set_ignore_eos(true);
  s->set_logprobs(0);
  (*s->mutable_logit_bias())[40] = -100.0f;
  (*s->mutable_logit_bias())[3] = 2.5f;
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, ctx_.tokenizer->Encode("Hi", /*add_bos=*/false));
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_EQ(r->params.temperature, 0.0f);
  EXPECT_EQ(r->params.top_p, 0.5f);
  EXPECT_EQ(r->params.top_k, 3);
  EXPECT_EQ(r->params.min_p, 0.1f);
  EXPECT_EQ(r->params.repetition_penalty, 1.2f);
  EXPECT_EQ(r->params.frequency_penalty, -1.0f);
  EXPECT_EQ(r->params.presence_penalty, 1.5f);
  EXPECT_TRUE(r->params.has_seed);
  EXPECT_EQ(r->params.seed, 0u);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->stop, std::vector<std::string>{"The"});
  EXPECT_EQ(r->params.stop_token_ids, std::vector<int32_t>{13});
  EXPECT_TRUE(r->params.ignore_eos);
  using Bias = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(r->params.logit_bias, (Bias{{3, 2.5f}, {40, -100.0f}}));  // sorted by id
  EXPECT_EQ(r->priority, 7);
  EXPECT_EQ(r->cache_namespace, CacheNamespace("default", "", "tenant-a"));
}

// The namespace is the authenticated tenant's; what the request says only narrows it.
TEST_F(TranslateTest, TheTenantIsTheCacheNamespace) {
  v1::GenerateRequest req;
  req.set_text("Hi");
  req.set_user("alice");
  auto a = ToSchedulerRequest(req, ctx_, "x", "tenant-a");
  auto b = ToSchedulerRequest(req, ctx_, "x", "tenant-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->cache_namespace, b->cache_namespace);
  EXPECT_EQ(a->cache_namespace, CacheNamespace("tenant-a", "alice", ""));
}

// The prompt's size is checked before it is tokenized.
TEST_F(TranslateTest, PromptBytesAreLimitedBeforeTokenizing) {
  ctx_.options.max_prompt_bytes = 64;
  v1::GenerateRequest req;
  req.set_text(std::string(65, 'a'));
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusParam(r.status()), "text");
  req.set_text(std::string(64, 'a'));
  EXPECT_TRUE(ToSchedulerRequest(req, ctx_, "x", "default").ok());
}

TEST_F(TranslateTest, TokenIdsAreUsedAsTheyAre) {
  v1::GenerateRequest req;
  for (int id : {5, 6, 7}) req.mutable_token_ids()->add_ids(id);
  req.set_add_bos(true);  // ignored for token ids
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{5, 6, 7}));
}

// json_schema compiles into the request's constraint, keys in the order sent; what is no
// schema, or a keyword outside the subset, is INVALID_ARGUMENT naming json_schema.
TEST_F(TranslateTest, JsonSchemaBecomesTheRequestsConstraint) {
  ctx_.structured_outputs = std::make_shared<StructuredOutputs>(ctx_.tokenizer);
  v1::GenerateRequest req;
  req.set_text("Once");
  auto plain = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->constraint, nullptr);
  req.set_json_schema(R"({"type": "object", "properties": {"b": {"type": "integer"},
      "a": {"type": "boolean"}}, "required": ["b", "a"]})");
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->constraint, nullptr);
  text::grammar::Matcher ordered(r->constraint->grammar);
  EXPECT_TRUE(ordered.Accept(R"({"b": 1, "a": true})") && ordered.CanEnd());
  text::grammar::Matcher sorted(r->constraint->grammar);
  EXPECT_FALSE(sorted.Accept(R"({"a": true, "b": 1})") && sorted.CanEnd());
  for (const char* bad : {"{", "[1]", R"({"type": "number", "multipleOf": 0.123456789})"}) {
    req.set_json_schema(bad);
    auto b = ToSchedulerRequest(req, ctx_, "x", "default");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(StatusParam(b.status()), "json_schema") << bad << " " << b.status();
  }
}

// regex, choice, grammar and json_object compile into the request's constraint, as HTTP's
// guided_regex, guided_choice, guided_grammar and response_format json_object do; the same value twice is compiled once.
TEST_F(TranslateTest, RegexChoiceAndJsonObjectBecomeTheRequestsConstraint) {
  ctx_.structured_outputs = std::make_shared<StructuredOutputs>(ctx_.tokenizer);
  auto accepts = [](const scheduler::Request& r, const std::string& text) {
    text::grammar::Matcher m(r.constraint->grammar);
    return m.Accept(text) && m.CanEnd();
  };
  v1::GenerateRequest req;
  req.set_text("Once");
  req.set_regex("[0-9]{3}-(yes|no)");
  auto regex = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(regex.ok()) << regex.status();
  ASSERT_NE(regex->constraint, nullptr);
  EXPECT_TRUE(accepts(*regex, "123-yes"));
  EXPECT_FALSE(accepts(*regex, "x123-yes")) << "the whole output, not a search";
  EXPECT_FALSE(accepts(*regex, "123-"));
  auto again = ToSchedulerRequest(req, ctx_, "y", "default");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->constraint, regex->constraint);
  EXPECT_EQ(ctx_.structured_outputs->cache().compiles(), 1);

  req.clear_regex();
  for (const char* c : {"a.b", "(x|y)*", "ünï"}) req.mutable_choice()->add_values(c);
  auto choice = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_NE(choice->constraint, nullptr);
  for (const char* c : {"a.b", "(x|y)*", "ünï"}) EXPECT_TRUE(accepts(*choice, c)) << c;
  for (const char* other : {"", "aXb", "x", "a."}) EXPECT_FALSE(accepts(*choice, other)) << other;

  req.clear_choice();
  req.set_grammar("root ::= \"(\" root* \")\" | [a-z]");
  auto grammar = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  ASSERT_NE(grammar->constraint, nullptr);
  EXPECT_TRUE(accepts(*grammar, "(a(b)())"));
  EXPECT_FALSE(accepts(*grammar, "(a(b)"));

  req.clear_grammar();
  req.set_json_object(true);
  auto object = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_NE(object->constraint, nullptr);
  EXPECT_TRUE(accepts(*object, R"({"any": [1, {"x": null}]})"));
  EXPECT_FALSE(accepts(*object, "[1]"));

  req.set_json_object(false);  // false is the default: no constraint
  auto plain = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->constraint, nullptr);
}

// At most one constraint, refused before either is read; a bad pattern or an empty choice list
// names its field; a server without a compiler refuses naming the field.
// structural_tag (JSON text) becomes a triggered constraint whose grammar reads its trigger, as
// HTTP's response_format structural_tag; bad shapes name the part, a second constraint is
// refused naming both.
TEST_F(TranslateTest, StructuralTagBecomesATriggeredConstraint) {
  ctx_.structured_outputs = std::make_shared<StructuredOutputs>(ctx_.tokenizer);
  v1::GenerateRequest req;
  req.set_text("Once");
  req.set_structural_tag(R"({"type": "structural_tag", "structures": [{"begin": "<f=add>",
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      "end": "</f>"}], "triggers": ["<f="]})");
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(r->constraint, nullptr);
  EXPECT_EQ(r->constraint->triggers, std::vector<std::string>{"<f="});
  EXPECT_TRUE(r->constraint->grammar_reads_trigger);
  text::grammar::Matcher m(r->constraint->grammar);
  EXPECT_TRUE(m.Accept(R"(<f=add>{"a": 3}</f>)") && m.CanEnd());
  struct Case {
    std::string tag;
    std::string param;
  };
  const Case cases[] = {
      {"{nope", "structural_tag"},
      {R"({"format": {"type": "triggered_tags"}})", "structural_tag.format"},
      {R"({"structures": [{"begin": "<g>", "end": ""}], "triggers": ["<f"]})",
       "structural_tag.structures[0].begin"},
      {R"({"structures": [{"begin": "<f>", "end": "", "schema": {"not": {}}}],
          "triggers": ["<f"]})",
       "structural_tag.structures[0].schema"},
  };
  for (const Case& c : cases) {
    req.set_structural_tag(c.tag);
    auto b = ToSchedulerRequest(req, ctx_, "x", "default");
    ASSERT_FALSE(b.ok()) << c.tag;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << c.tag;
    EXPECT_EQ(StatusParam(b.status()), c.param) << c.tag << " " << b.status();
  }
  req.set_regex("a+");
  auto two = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(StatusParam(two.status()), "structural_tag") << two.status();
}

TEST_F(TranslateTest, StructuredOutputRefusalsNameTheirField) {
  ctx_.structured_outputs = std::make_shared<StructuredOutputs>(ctx_.tokenizer);
  struct Case {
    const char* what;
    std::function<void(v1::GenerateRequest*)> edit;
    std::string param;
    std::vector<std::string> message_has;
  };
  const std::vector<Case> cases = {
      {"json_schema and regex",
       [](v1::GenerateRequest* r) {
         r->set_json_schema(R"({"type": "object"})");
         r->set_regex("a");
       },
       "regex",
       {"regex and json_schema both constrain the output"}},
      {"regex and choice",
       [](v1::GenerateRequest* r) {
         r->set_regex("(");  // never read: the pair is refused first
         r->mutable_choice()->add_values("a");
       },
       "choice",
       {"choice and regex both constrain the output"}},
      {"choice and json_object",
       [](v1::GenerateRequest* r) {
         // A std::string: GCC 12's -Wrestrict misfires on add_values("a") inlined here.
         r->mutable_choice()->mutable_values()->Add(std::string(1, 'a'));
         r->set_json_object(true);
       },
       "json_object",
       {"json_object and choice"}},
      {"empty regex", [](v1::GenerateRequest* r) { r->set_regex(""); }, "regex", {"non-empty"}},
      {"unbalanced regex",
       [](v1::GenerateRequest* r) { r->set_regex("(ab"); },
       "regex",
       {"regex cannot be compiled"}},
      {"backreference",
       [](v1::GenerateRequest* r) { r->set_regex("(a)\\1"); },
       "regex",
       {"backreference"}},
      {"lookaround",
       [](v1::GenerateRequest* r) { r->set_regex("(?=a)a"); },
       "regex",
       {"lookaround"}},
      {"grammar and regex",
       [](v1::GenerateRequest* r) {
         r->set_regex("a");
         r->set_grammar("root ::= \"a\"");
       },
       "grammar",
       {"grammar and regex both constrain the output"}},
      {"empty grammar", [](v1::GenerateRequest* r) { r->set_grammar(""); }, "grammar",
       {"non-empty"}},
      {"bad grammar",
       [](v1::GenerateRequest* r) { r->set_grammar("root ::= \"a\"\n  | \"b\""); },
       "grammar",
       {"grammar cannot be compiled", "line 2, column 3"}},
      {"empty choice list",
       [](v1::GenerateRequest* r) { r->mutable_choice(); },
       "choice",
       {"choice must be a non-empty list"}},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req;
    req.set_text("Once");
    c.edit(&req);
    auto r = ToSchedulerRequest(req, ctx_, "x", "default");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(StatusParam(r.status()), c.param) << c.what << ": " << r.status();
    for (const std::string& part : c.message_has) {
      EXPECT_NE(r.status().message().find(part), absl::string_view::npos)
          << c.what << ": '" << part << "' not in " << r.status();
    }
  }
  ctx_.structured_outputs = nullptr;
  v1::GenerateRequest req;
  req.set_text("Once");
  req.set_regex("a");
  auto r = ToSchedulerRequest(req, ctx_, "x", "default");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "regex") << r.status();
  EXPECT_NE(r.status().message().find("not available"), absl::string_view::npos) << r.status();
}

// Each bad request: the status code and a message naming the problem.
TEST_F(TranslateTest, BadRequestsNameTheirField) {
  struct Case {
    const char* what;
    std::function<void(v1::GenerateRequest*)> edit;
    absl::StatusCode code;
    std::vector<std::string> message_has;
  };
  const std::string ctx_len = std::to_string(context());
  const std::vector<Case> cases = {
      {"no input",
       [](v1::GenerateRequest* r) { r->clear_input(); },
       absl::StatusCode::kInvalidArgument,
       {"prompt is missing"}},
      {"empty text",
       [](v1::GenerateRequest* r) { r->set_text(""); },
       absl::StatusCode::kInvalidArgument,
       {"prompt is empty"}},
      {"empty ids",
       [](v1::GenerateRequest* r) { r->mutable_token_ids(); },
       absl::StatusCode::kInvalidArgument,
       {"prompt is empty"}},
      {"id outside vocab",
       [](v1::GenerateRequest* r) { r->mutable_token_ids()->add_ids(512); },
       absl::StatusCode::kInvalidArgument,
       {"512", "vocabulary"}},
      {"logit_bias id outside vocab",
       [](v1::GenerateRequest* r) { (*r->mutable_sampling()->mutable_logit_bias())[512] = 1; },
       absl::StatusCode::kInvalidArgument,
       {"logit_bias", "512"}},
      {"logit_bias out of range",
       [](v1::GenerateRequest* r) { (*r->mutable_sampling()->mutable_logit_bias())[5] = 200; },
       absl::StatusCode::kInvalidArgument,
       {"logit_bias", "[-100, 100]"}},
      {"unknown model",
       [](v1::GenerateRequest* r) { r->set_model("gpt-4"); },
       absl::StatusCode::kNotFound,
       {"gpt-4", "stories260K"}},
      {"too long",
       [&](v1::GenerateRequest* r) {
         r->mutable_token_ids()->clear_ids();
         for (int i = 0; i < 100; ++i) r->mutable_token_ids()->add_ids(5);
         r->mutable_sampling()->set_max_tokens(context());
       },
       absl::StatusCode::kInvalidArgument,
       {"100", ctx_len, "maximum context length"}},
      {"max_tokens 0",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_max_tokens(0); },
       absl::StatusCode::kInvalidArgument,
       {"max_tokens"}},
      {"temperature",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_temperature(-1); },
       absl::StatusCode::kInvalidArgument,
       {"temperature", "-1"}},
      {"top_p",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_p(0); },
       absl::StatusCode::kInvalidArgument,
       {"top_p"}},
      {"n 0",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_n(0); },
       absl::StatusCode::kInvalidArgument,
       {"n must be between 1 and 16"}},
      {"n 17",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_n(17); },
       absl::StatusCode::kInvalidArgument,
       {"n must be between 1 and 16", "17"}},
      {"logprobs",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_logprobs(21); },
       absl::StatusCode::kInvalidArgument,
       {"logprobs"}},
      {"stop id",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->add_stop_token_ids(-2); },
       absl::StatusCode::kInvalidArgument,
       {"stop_token_ids"}},
      {"empty stop",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->add_stop(""); },
       absl::StatusCode::kInvalidArgument,
       {"stop"}},
      {"penalty",
       [](v1::GenerateRequest* r) { r->mutable_sampling()->set_frequency_penalty(2.5f); },
       absl::StatusCode::kInvalidArgument,
       {"frequency_penalty"}},
      {"user too long",
       [](v1::GenerateRequest* r) { r->set_user(std::string(300, 'u')); },
       absl::StatusCode::kInvalidArgument,
       {"user", "256"}},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req;
    req.set_text("Once upon a time");
    c.edit(&req);
    auto r = ToSchedulerRequest(req, ctx_, "x", "default");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status();
    for (const std::string& part : c.message_has) {
      EXPECT_NE(r.status().message().find(part), absl::string_view::npos)
          << c.what << ": '" << part << "' not in " << r.status();
    }
  }
}

TEST_F(TranslateTest, RequestIds) {
  auto fresh1 = ResolveRequestId("");
  auto fresh2 = ResolveRequestId("");
  ASSERT_TRUE(fresh1.ok() && fresh2.ok());
  EXPECT_NE(*fresh1, *fresh2);
  EXPECT_EQ(fresh1->rfind("grpc-", 0), 0u);
  EXPECT_EQ(*ResolveRequestId("job-1.a:b_c"), "job-1.a:b_c");
  EXPECT_EQ(ResolveRequestId("has space").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveRequestId(std::string(65, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// protobuf itself refuses non-UTF-8 `string` fields; ParseRequest says which field.
TEST_F(TranslateTest, ParseExplainsInvalidUtf8) {
  v1::GenerateRequest req;
  req.set_text("ok");
  req.mutable_sampling()->add_stop("fine");
  std::string wire = req.SerializeAsString();
  v1::GenerateRequest parsed;
  EXPECT_TRUE(ParseRequest(wire, &parsed).ok());

  // Build the bad bytes by hand-patching a valid message: protobuf would not serialize them
  // without complaint.
  req.set_text(
      "ab\xC3"
      "c");  // C3 starts a 2-byte sequence; 'c' is no continuation byte
  wire = req.SerializePartialAsString();
  absl::Status s = ParseRequest(wire, &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("text is not valid UTF-8"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("offset 2"), absl::string_view::npos) << s;

  req.set_text("fine");
  req.mutable_sampling()->set_stop(0, "\xFF");
  s = ParseRequest(req.SerializePartialAsString(), &parsed);
  EXPECT_NE(s.message().find("sampling.stop is not valid UTF-8"), absl::string_view::npos) << s;
  EXPECT_EQ(StatusParam(s), "sampling.stop");

  s = ParseRequest(std::string("\xFF\xFF\xFF", 3), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a valid banyan.v1.GenerateRequest"), absl::string_view::npos)
      << s;
}

TEST_F(TranslateTest, EventsGroupIntoOneChoicePerSample) {
  using scheduler::FinishReason;
  auto event = [](int sample, int32_t token, std::string text, float logprob,
                  FinishReason finish = FinishReason::kNone) {
    scheduler::TokenEvent e;
    e.sample = sample;
    e.token = token;
    e.text = std::move(text);
    e.logprob = logprob;
    e.finish = finish;
    return e;
  };
  std::vector<scheduler::TokenEvent> events = {
      event(0, 10, "A", -0.5f), event(1, 20, "B", -0.25f), event(0, 12, "C", -2.0f),
      event(1, -1, "!", 0.0f, FinishReason::kStop), event(0, 13, "", -1.0f, FinishReason::kLength)};
  events[0].top_logprobs = {{10, -0.5f}, {11, -1.0f}};
  v1::GenerateResponse resp;
  AppendEvents(events, /*with_logprobs=*/true, &resp);
  ASSERT_EQ(resp.choices_size(), 2);
  const v1::Choice& c0 = resp.choices(0);
  EXPECT_EQ(c0.index(), 0);
  EXPECT_EQ(std::vector<int32_t>(c0.token_ids().begin(), c0.token_ids().end()),
            (std::vector<int32_t>{10, 12, 13}));
  EXPECT_EQ(c0.text(), "AC");
  EXPECT_EQ(c0.finish_reason(), v1::FINISH_REASON_LENGTH);
  ASSERT_EQ(c0.logprobs_size(), 3);
  EXPECT_EQ(c0.logprobs(0).token().logprob(), -0.5f);
  ASSERT_EQ(c0.logprobs(0).top_size(), 2);
  EXPECT_EQ(c0.logprobs(0).top(1).token_id(), 11);
  const v1::Choice& c1 = resp.choices(1);
  EXPECT_EQ(c1.index(), 1);
  EXPECT_EQ(c1.token_ids_size(), 1);
  EXPECT_EQ(c1.text(), "B!");
  EXPECT_EQ(c1.finish_reason(), v1::FINISH_REASON_STOP);

  v1::GenerateResponse plain;
  AppendEvents(events, /*with_logprobs=*/false, &plain);
  EXPECT_EQ(plain.choices(0).logprobs_size(), 0);
}

TEST(GrpcStatusTest, CodesCarryOverAndMessagesStay) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const std::pair<absl::Status, grpc::StatusCode> cases[] = {
      {absl::InvalidArgumentError("bad n"), grpc::StatusCode::INVALID_ARGUMENT},
      {absl::NotFoundError("no model"), grpc::StatusCode::NOT_FOUND},
      {absl::ResourceExhaustedError("queue full"), grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::UnavailableError("draining"), grpc::StatusCode::UNAVAILABLE},
      {absl::UnauthenticatedError("key"), grpc::StatusCode::UNAUTHENTICATED},
      {absl::DeadlineExceededError("late"), grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::CancelledError("gone"), grpc::StatusCode::CANCELLED},
      {absl::InternalError("bug"), grpc::StatusCode::INTERNAL},
  };
  for (const auto& [in, code] : cases) {
    grpc::Status out = ToGrpcStatus(in);
    EXPECT_EQ(out.error_code(), code) << in;
    EXPECT_EQ(out.error_message(), std::string(in.message()));
  }
}

}  // namespace
}  // namespace banyan::server
