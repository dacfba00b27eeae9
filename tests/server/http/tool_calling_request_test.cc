// tools / tool_choice / parallel_tool_calls through the HTTP request parser, with a Hermes-style
// chat template: what forces calls (the request's grammar accepts exactly the calls of the
// allowed tools), what is only parsed afterwards (auto), what is refused with a 400 naming the
// field.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/server/http/request_fixture.h"
#include "text/chat_template.h"
#include "server/http/openai_request.h"
#include "server/common/structured_outputs.h"
#include "server/common/tool_calling.h"
#include "text/grammar/matcher.h"

namespace banyan::server {
namespace {

using http::Json;
using text::tool_calls::ToolFamily;

const std::string kTemplatePath =
    std::string(BANYAN_SOURCE_DIR) + "/tests/testing/templates/hermes_tools.jinja";

constexpr char kTools[] = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "add",
   "parameters": {"type": "object", "properties": {"b": {"type": "integer"},
                  "a": {"type": "integer"}}, "required": ["b", "a"]}}}])";

constexpr char kWeatherCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
constexpr char kAddCall[] =
    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"b\": 1, \"a\": 2}}\n</tool_call>";

class ToolCallingRequestTest : public BundledRequestTest {
 protected:
  void SetUp() override {
    BundledRequestTest::SetUp();
    ctx_.structured_outputs = std::make_shared<StructuredOutputs>(tokenizer_);
    ctx_.tool_calling = std::make_shared<ToolCalling>(tokenizer_);
    std::ifstream in(kTemplatePath);
    ASSERT_TRUE(in) << kTemplatePath;
    std::stringstream ss;
    ss << in.rdbuf();
    auto chat = text::MakeJinjaChat(ss.str(), kTemplatePath, "<s>", "</s>", *tokenizer_);
    ASSERT_TRUE(chat.ok()) << chat.status();
    ctx_.jinja_chat = *chat;
  }
  absl::StatusOr<http::ParsedGeneration> Chat(const std::string& extra) {
    const std::string body =
        R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
    return http::ParseChatRequest(Json::parse(body), ctx_, body);
  }
  // The request fails with a 400 naming `param`, its message containing `words`.
  void ExpectRefused(const std::string& extra, const std::string& param,
                     const std::string& words = "") {
    SCOPED_TRACE(extra);
    auto r = Chat(extra);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(StatusParam(r.status()), param) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(words), std::string::npos) << r.status();
  }
};

TEST_F(ToolCallingRequestTest, TheTemplateSpeaksHermes) {
  EXPECT_EQ(ctx_.jinja_chat->tool_family, ToolFamily::kHermes);
}

TEST_F(ToolCallingRequestTest, RequiredForcesACallOfAnyTool) {
  auto r = Chat(absl::StrCat(kTools, R"(, "tool_choice": "required")"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_family, ToolFamily::kHermes);
  EXPECT_TRUE(r->tools_forced);
  EXPECT_TRUE(Accepts(*r, kWeatherCall));
  EXPECT_TRUE(Accepts(*r, kAddCall));
  EXPECT_TRUE(Accepts(*r, absl::StrCat(kWeatherCall, "\n", kAddCall)));  // parallel by default
  EXPECT_FALSE(Accepts(*r, "Sure!"));
  EXPECT_FALSE(Accepts(*r, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  // The arguments follow the tool's schema, properties in the order sent.
  EXPECT_FALSE(Accepts(*r, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": "
                           "1}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*r, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                           "</tool_call>"));
}

TEST_F(ToolCallingRequestTest, NamedForcesThatTool) {
  auto r = Chat(absl::StrCat(
      kTools, R"(, "tool_choice": {"type": "function", "function": {"name": "add"}},
                 "parallel_tool_calls": false)"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Accepts(*r, kAddCall));
  EXPECT_FALSE(Accepts(*r, kWeatherCall));
  EXPECT_FALSE(Accepts(*r, absl::StrCat(kAddCall, "\n", kAddCall)));
}

// auto: free output until a call's marker, then the call is forced (a triggered constraint,
// held to the end without parallel calls); none: no constraint at all.
TEST_F(ToolCallingRequestTest, AutoConstrainsOnlyFromTheMarkerAndNoneNotAtAll) {
  auto a = Chat(kTools);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tool_family, ToolFamily::kHermes);
  EXPECT_FALSE(a->tools_forced);
  ASSERT_NE(a->inputs[0].constraint, nullptr);
  EXPECT_EQ(a->inputs[0].constraint->triggers, std::vector<std::string>{"<tool_call>"});
  EXPECT_FALSE(a->inputs[0].constraint->trigger_once) << "parallel calls by default";
  EXPECT_TRUE(a->inputs[0].constraint->best_effort) << "free where it cannot apply";
  // parallel_tool_calls false: the one call ends the output (TokenConstraint::trigger_once).
  auto one = Chat(absl::StrCat(kTools, R"(, "tool_choice": "auto", "parallel_tool_calls": false)"));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_NE(one->inputs[0].constraint, nullptr);
  EXPECT_EQ(one->inputs[0].constraint->triggers, std::vector<std::string>{"<tool_call>"});
  EXPECT_TRUE(one->inputs[0].constraint->trigger_once);
  EXPECT_FALSE(one->inputs[0].constraint->best_effort) << "min_tokens refused, as before";
  auto n = Chat(absl::StrCat(kTools, R"(, "tool_choice": "none")"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->tool_family, ToolFamily::kNone);
  EXPECT_EQ(n->inputs[0].constraint, nullptr);
}

TEST_F(ToolCallingRequestTest, RefusedNamingTheField) {
  ExpectRefused(absl::StrCat(kTools, R"(, "tool_choice": {"type": "function",
                "function": {"name": "nope"}})"),
                "tool_choice.function.name", "nope");
  ExpectRefused(absl::StrCat(kTools, R"(, "tool_choice": "sometimes")"), "tool_choice");
  ExpectRefused(absl::StrCat(kTools, R"(, "tool_choice": {"type": "function"})"), "tool_choice");
  ExpectRefused(absl::StrCat(kTools, R"(, "parallel_tool_calls": "yes")"),
                "parallel_tool_calls");
  ExpectRefused(R"("tool_choice": "required")", "tool_choice", "needs tools");
  ExpectRefused(R"("tools": {"type": "function"})", "tools");
  ExpectRefused(R"("tools": [{"type": "function", "function": {"name": "f"}},
                             {"type": "function", "function": {"name": "f"}}])",
                "tools[1].function.name", "'f'");
  ExpectRefused(R"("tools": [{"type": "function", "function": {"description": "x"}}])",
                "tools[0].function.name");
  ExpectRefused(R"("tools": [{"type": "function", "function": {"name": "a b"}}])",
                "tools[0].function.name");
  ExpectRefused(R"("tools": [{"type": "function"}])", "tools[0].function");
  ExpectRefused(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])",
                "tools[0].type");
  ExpectRefused(R"("tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "string"}}}])",
                "tools[0].function.parameters", "object");
  ExpectRefused(R"("tools": [{"type": "function", "function": {"name": "f",
                "parameters": [1]}}])",
                "tools[0].function.parameters");
  // A keyword outside the subset: the engine's message with the keyword and its pointer. (Only
  // forced calls compile the schemas.)
  ExpectRefused(R"("tools": [{"type": "function", "function": {"name": "f"}},
                {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
                "properties": {"x": {"type": "string", "patternFlags": "i"}}}}}],
                "tool_choice": "required")",
                "tools[1].function.parameters", "'patternFlags' at #/properties/x");
  std::string many = R"("tools": [)";
  for (size_t i = 0; i <= kMaxTools; ++i) {
    absl::StrAppend(&many, i ? "," : "", R"({"type": "function", "function": {"name": "f)", i,
                    R"("}})");
  }
  ExpectRefused(many + "]", "tools", "at most");
  ExpectRefused(absl::StrCat(kTools, R"(, "tool_choice": "required",
                "response_format": {"type": "json_object"})"),
                "tool_choice", "response_format");
}

TEST_F(ToolCallingRequestTest, AModelWithoutToolSyntaxRefusesTools) {
  ctx_.jinja_chat = nullptr;  // the built-in plain template
  ExpectRefused(kTools, "tool_choice", "no tool-call syntax");
  ExpectRefused(absl::StrCat(kTools, R"(, "tool_choice": "required")"), "tool_choice",
                "no tool-call syntax");
  auto none = Chat(absl::StrCat(kTools, R"(, "tool_choice": "none")"));
  EXPECT_TRUE(none.ok()) << none.status();
}

TEST_F(ToolCallingRequestTest, CompletionsTakeNoTools) {
  const std::string body = absl::StrCat(R"({"prompt": "Once", )", kTools, "}");
  auto r = http::ParseCompletionRequest(Json::parse(body), ctx_, body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(StatusParam(r.status()), "tools");
}

}  // namespace
}  // namespace banyan::server
