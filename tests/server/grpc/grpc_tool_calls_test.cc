// Tools on gRPC (GenerateRequest.tools / tool_choice / parallel_tool_calls) against a real
// server on the bundled model with a Hermes-style chat template: the model knows nothing of
// tools, the grammar does the work. Forced calls (required, named) at temperature 1.0 over
// several seeds, n = 2: every choice ends with FINISH_REASON_TOOL_CALLS and carries ToolCall
// messages whose arguments satisfy the tool's schema (checked apart from the grammar engine),
// with no call text left in `text`; each call arrives in the stream message where it completed.
// "auto" is free text until a call begins. Refusals name the field as HTTP's do.
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/common/validation.h"
#include "server/grpc/grpc_translate.h"
#include "tests/server/grpc/test_server.h"
#include "tests/text/tool_calls/tool_calls_test_util.h"

namespace banyan::server::testing {
namespace {

using text::tool_calls::TestTools;
using text::tool_calls::ValidTestCall;

std::shared_ptr<const text::JinjaChat> HermesChat() {
  const std::string path =
      std::string(BANYAN_SOURCE_DIR) + "/tests/testing/templates/hermes_tools.jinja";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto chat = text::MakeJinjaChat(ss.str(), path, "<s>", "</s>", *Bundle().tokenizer);
  EXPECT_TRUE(chat.ok()) << chat.status();
  return chat.ok() ? *chat : nullptr;
}

void AddTools(v1::GenerateRequest* req) {
  for (const auto& t : TestTools()) {
    v1::Tool* tool = req->add_tools();
    tool->set_type("function");
    tool->mutable_function()->set_name(t.name);
    tool->mutable_function()->set_parameters(t.parameters.dump());
  }
}

v1::GenerateRequest ToolRequest(uint64_t seed) {
  v1::GenerateRequest req;
  req.set_text("Weather in Paris?");
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_sampling()->set_n(2);
  req.mutable_sampling()->set_max_tokens(200);
  AddTools(&req);
  return req;
}

class GrpcToolCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestServerOptions options;
    options.jinja_chat = HermesChat();
    server_ = std::make_unique<TestServer>(options);
    stub_ = v1::Generation::NewStub(server_->NewChannel());
  }
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(GrpcToolCallsTest, ForcedCallsAreStructuredMessages) {
  struct Mode {
    std::string mode;   // tool_choice.mode, or "" for the named function below
    std::string named;  // tool_choice.function.name
  };
  const Mode modes[] = {{"required", ""}, {"", "add"}, {"", "get_weather"}};
  int calls = 0;
  for (const Mode& m : modes) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      const std::string what = (m.mode.empty() ? m.named : m.mode) + " seed " +
                               std::to_string(seed);
      v1::GenerateRequest req = ToolRequest(seed);
      if (m.mode.empty()) {
        req.mutable_tool_choice()->mutable_function()->set_name(m.named);
      } else {
        req.mutable_tool_choice()->set_mode(m.mode);
      }
      req.set_parallel_tool_calls(false);
      GenerateResult r = Generate(*stub_, req);
      ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.error_message();
      ASSERT_EQ(r.choices.size(), 2u) << what;
      for (const auto& [index, c] : r.choices) {
        SCOPED_TRACE(what + " choice " + std::to_string(index));
        EXPECT_EQ(c.finish, v1::FINISH_REASON_TOOL_CALLS) << c.text;
        ASSERT_EQ(c.tool_calls.size(), 1u) << "parallel_tool_calls false: one call";
        const v1::ToolCall& call = c.tool_calls[0];
        EXPECT_EQ(call.id().rfind("call_", 0), 0u) << call.id();
        EXPECT_EQ(call.id().size(), 29u) << call.id();
        if (!m.named.empty()) {
          EXPECT_EQ(call.name(), m.named);
        }
        EXPECT_TRUE(ValidTestCall(call.name(), call.arguments()));
        EXPECT_EQ(c.text.find("<tool_call>"), std::string::npos) << "the call's text: " << c.text;
        EXPECT_EQ(c.text.find_first_not_of(" \n"), std::string::npos) << c.text;
        EXPECT_EQ(c.messages_with_calls, 1) << "a call is sent once, whole";
        ++calls;
      }
    }
  }
  EXPECT_EQ(calls, 18);
}

// Parallel calls: every complete call is a ToolCall, in the order written, with distinct ids,
// sent in the stream message where it completed (the parser runs as the text streams, not once
// at the end). The tiny model rarely ends a list of calls: most choices run to max_tokens, and
// the calls completed before the cut are still whole, valid calls.
TEST_F(GrpcToolCallsTest, ParallelCallsStreamAsTheyComplete) {
  int calls = 0, streamed = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest req = ToolRequest(seed);
    req.mutable_tool_choice()->set_mode("required");
    req.mutable_sampling()->set_max_tokens(400);
    GenerateResult r = Generate(*stub_, req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    for (const auto& [index, c] : r.choices) {
      if (c.finish != v1::FINISH_REASON_LENGTH) {
        EXPECT_EQ(c.finish, v1::FINISH_REASON_TOOL_CALLS) << c.text;
        EXPECT_EQ(c.text.find("<tool_call>"), std::string::npos) << c.text;
      } else {
        // The call the cut left unfinished is no call: its text comes as text, at the end.
        EXPECT_EQ(c.text.find("<tool_call>"), c.text.rfind("<tool_call>")) << c.text;
      }
      std::set<std::string> ids;
      for (const v1::ToolCall& call : c.tool_calls) {
        EXPECT_TRUE(ValidTestCall(call.name(), call.arguments()));
        ids.insert(call.id());
      }
      EXPECT_EQ(ids.size(), c.tool_calls.size()) << "call ids are distinct";
      calls += static_cast<int>(c.tool_calls.size());
      streamed += c.messages_with_calls > 1;
    }
  }
  EXPECT_GE(calls, 6);
  EXPECT_GE(streamed, 1) << "calls of one choice should arrive in several messages";
}

// "auto": free until the call marker; where the free output never writes it, the text is what
// tool_choice "none" (the same sampling) writes, and no call is read.
TEST_F(GrpcToolCallsTest, AutoIsFreeUntilACallBegins) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest none = ToolRequest(seed);
    none.mutable_sampling()->set_max_tokens(40);
    none.mutable_tool_choice()->set_mode("none");
    v1::GenerateRequest aut = none;
    aut.mutable_tool_choice()->set_mode("auto");
    GenerateResult a = Generate(*stub_, aut);
    GenerateResult b = Generate(*stub_, none);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_TRUE(b.status.ok()) << b.status.error_message();
    for (const auto& [index, c] : b.choices) {
      if (c.text.find("<tool_call>") != std::string::npos) continue;  // the grammar would hold
      EXPECT_EQ(a.choices[index].text, c.text);
      EXPECT_EQ(a.choices[index].token_ids, c.token_ids);
      EXPECT_TRUE(a.choices[index].tool_calls.empty());
      EXPECT_EQ(a.choices[index].finish, c.finish);
    }
  }
}

TEST_F(GrpcToolCallsTest, RefusalsNameTheFieldAsHttpDoes) {
  struct Case {
    std::string what;
    std::function<void(v1::GenerateRequest*)> edit;
    std::string param;
  };
  const Case cases[] = {
      {"unknown named tool",
       [](v1::GenerateRequest* r) { r->mutable_tool_choice()->mutable_function()->set_name("x"); },
       "tool_choice.function.name"},
      {"unknown mode", [](v1::GenerateRequest* r) { r->mutable_tool_choice()->set_mode("any"); },
       "tool_choice"},
      {"parameters not JSON",
       [](v1::GenerateRequest* r) {
         r->mutable_tools(1)->mutable_function()->set_parameters("{nope");
       },
       "tools[1].function.parameters"},
      {"parameters not an object schema",
       [](v1::GenerateRequest* r) {
         r->mutable_tools(0)->mutable_function()->set_parameters(R"({"type": "array"})");
       },
       "tools[0].function.parameters"},
      {"a keyword outside the subset",
       [](v1::GenerateRequest* r) {
         r->mutable_tools(2)->mutable_function()->set_parameters(
             R"({"type": "object", "patternProperties": {}})");
         r->mutable_tool_choice()->set_mode("required");
       },
       "tools[2].function.parameters"},
      {"bad name",
       [](v1::GenerateRequest* r) { r->mutable_tools(0)->mutable_function()->set_name("a b"); },
       "tools[0].function.name"},
      {"repeated name",
       [](v1::GenerateRequest* r) { r->mutable_tools(2)->mutable_function()->set_name("add"); },
       "tools[2].function.name"},
      {"bad type", [](v1::GenerateRequest* r) { r->mutable_tools(0)->set_type("code"); },
       "tools[0].type"},
      {"forced beside a json_schema",
       [](v1::GenerateRequest* r) {
         r->mutable_tool_choice()->set_mode("required");
         r->set_json_schema(R"({"type": "object"})");
       },
       "tool_choice"},
      {"required without tools",
       [](v1::GenerateRequest* r) {
         r->clear_tools();
         r->mutable_tool_choice()->set_mode("required");
       },
       "tool_choice"},
  };
  for (const Case& c : cases) {
    v1::GenerateRequest req = ToolRequest(1);
    c.edit(&req);
    auto translated = ToSchedulerRequest(req, server_->context(), "t", "default");
    ASSERT_FALSE(translated.ok()) << c.what;
    EXPECT_EQ(translated.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(StatusParam(translated.status()), c.param)
        << c.what << ": " << translated.status();
    GenerateResult r = Generate(*stub_, req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << r.status.error_message();
    EXPECT_TRUE(r.choices.empty()) << c.what;
  }
}

// A model whose template shows no tool-call syntax: tools are refused unless tool_choice is
// "none", as on HTTP.
TEST(GrpcToolCallsNoTemplateTest, ToolsNeedATemplateWithACallSyntax) {
  TestServer server;
  v1::GenerateRequest req = ToolRequest(1);
  auto refused = ToSchedulerRequest(req, server.context(), "t", "default");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(StatusParam(refused.status()), "tool_choice");
  req.mutable_tool_choice()->set_mode("none");
  text::tool_calls::ToolFamily family = text::tool_calls::ToolFamily::kHermes;
  auto plain = ToSchedulerRequest(req, server.context(), "t", "default", &family);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->constraint, nullptr);
  EXPECT_EQ(family, text::tool_calls::ToolFamily::kNone);
}

}  // namespace
}  // namespace banyan::server::testing
