// Tool calling through the HTTP front end on the bundled model (a real tiny model that knows
// nothing of tools: the grammar does all the work), with a Hermes-style chat template. At
// temperature 1.0 over several seeds, n = 2, streaming and not, tool_choice required and named:
// every choice ends with finish_reason "tool_calls" and valid tool_calls whose arguments satisfy
// the tool's schema; streamed deltas add up to the same shape.
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "server/common/tool_calling.h"
#include "tests/server/http/http_test_util.h"
#include "tests/text/tool_calls/tool_calls_test_util.h"

namespace banyan::server::http::http_test {
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

Json ToolsJson() {
  Json tools = Json::array();
  for (const auto& t : TestTools()) {
    tools.push_back(
        {{"type", "function"},
         {"function", {{"name", t.name}, {"parameters", Json::parse(t.parameters.dump())}}}});
  }
  return tools;
}

struct Call {
  std::string id, type, name, arguments;
};

// A choice's calls from a whole response's message.
std::vector<Call> CallsOf(const Json& message) {
  std::vector<Call> out;
  for (const Json& c : message.value("tool_calls", Json::array())) {
    out.push_back({c.value("id", ""), c.value("type", ""), c["function"].value("name", ""),
                   c["function"].value("arguments", "")});
  }
  return out;
}

class ToolCallsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stack_ = std::make_unique<Stack>(scheduler::SchedulerOptions{}, ServerOptions{}, 1024, 16,
                                     HermesChat());
    stack_->ctx.tool_calling = std::make_shared<ToolCalling>(stack_->ctx.tokenizer);
  }
  Json Body(const Json& tool_choice, uint64_t seed, bool stream, bool parallel) {
    return {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
            {"tools", ToolsJson()},
            {"tool_choice", tool_choice},
            {"parallel_tool_calls", parallel},
            {"temperature", 1.0},
            {"seed", seed},
            {"n", 2},
            {"stream", stream}};
  }
  void CheckCalls(const std::vector<Call>& calls, const std::string& only, bool parallel,
                  const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_FALSE(calls.empty());
    if (!parallel) {
      EXPECT_EQ(calls.size(), 1u);
    }
    for (const Call& c : calls) {
      EXPECT_EQ(c.id.rfind("call_", 0), 0u) << c.id;
      EXPECT_GT(c.id.size(), 5u);
      EXPECT_EQ(c.type, "function");
      if (!only.empty()) {
        EXPECT_EQ(c.name, only);
      }
      EXPECT_TRUE(ValidTestCall(c.name, c.arguments));
    }
  }
  std::unique_ptr<Stack> stack_;
};

TEST_F(ToolCallsServerTest, ForcedCallsAreValidWholeAndStreamed) {
  struct Mode {
    Json choice;
    std::string only;
    bool parallel;
  };
  const std::vector<Mode> modes = {
      {"required", "", false},
      {{{"type", "function"}, {"function", {{"name", "add"}}}}, "add", false},
      {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, "get_weather", false},
      {"required", "", true}};
  int calls_seen = 0;
  for (const Mode& m : modes) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const std::string what =
          m.choice.dump() + " seed " + std::to_string(seed) + (m.parallel ? " parallel" : "");
      // Whole.
      Reply r =
          Post(stack_->port(), "/v1/chat/completions", Body(m.choice, seed, false, m.parallel));
      ASSERT_EQ(r.status, 200) << what << r.body;
      ASSERT_EQ(r.json["choices"].size(), 2u) << r.body;
      for (const Json& ch : r.json["choices"]) {
        // Parallel calls may go on until the context is full (the tiny model rarely ends them):
        // then the calls that completed must still be valid.
        if (m.parallel && ch["finish_reason"] == "length") {
          CheckCalls(CallsOf(ch["message"]), m.only, true, what + " " + r.body);
          continue;
        }
        EXPECT_EQ(ch["finish_reason"], "tool_calls") << what << r.body;
        EXPECT_TRUE(ch["message"]["content"].is_null()) << what << r.body;
        const std::vector<Call> calls = CallsOf(ch["message"]);
        calls_seen += static_cast<int>(calls.size());
        CheckCalls(calls, m.only, m.parallel, what + " " + r.body);
      }
      // Streamed: accumulate the deltas as the openai client's helpers do.
      r = Post(stack_->port(), "/v1/chat/completions", Body(m.choice, seed, true, m.parallel));
      ASSERT_EQ(r.status, 200) << what << r.body;
      bool done = false;
      std::map<int, std::map<int, Call>> acc;  // choice -> call index -> call
      std::map<int, std::string> content, finish;
      for (const Json& ev : ParseSse(r.body, &done)) {
        for (const Json& ch : ev["choices"]) {
          const int i = ch["index"].get<int>();
          const Json& d = ch["delta"];
          if (d.contains("content") && d["content"].is_string()) {
            content[i] += d["content"].get<std::string>();
          }
          for (const Json& tc : d.value("tool_calls", Json::array())) {
            Call& c = acc[i][tc["index"].get<int>()];
            if (tc.contains("id")) {
              EXPECT_TRUE(c.id.empty()) << "a call announced twice: " << r.body;
              c.id = tc["id"];
              c.type = tc.value("type", "");
              c.name = tc["function"].value("name", "");
            }
            c.arguments += tc["function"].value("arguments", "");
          }
          if (ch["finish_reason"].is_string()) finish[i] = ch["finish_reason"];
        }
      }
      EXPECT_TRUE(done);
      for (int i = 0; i < 2; ++i) {
        std::vector<Call> calls;
        for (const auto& [k, c] : acc[i]) calls.push_back(c);
        if (m.parallel && finish[i] == "length") {
          // The last call may be cut short: the ones before it are whole.
          if (!calls.empty()) calls.pop_back();
          if (!calls.empty()) CheckCalls(calls, m.only, true, what + " stream " + r.body);
          continue;
        }
        EXPECT_EQ(finish[i], "tool_calls") << what << r.body;
        EXPECT_EQ(content[i], "") << what << r.body;
        CheckCalls(calls, m.only, m.parallel, what + " stream " + r.body);
      }
    }
  }
  EXPECT_GT(calls_seen, 0);
}

TEST_F(ToolCallsServerTest, AutoAnswersTextWhenTheModelWritesNoCall) {
  Reply r = Post(stack_->port(), "/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                  {"tools", ToolsJson()},
                  {"temperature", 0.0},
                  {"max_tokens", 12}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& ch = r.json["choices"][0];
  EXPECT_TRUE(ch["message"]["content"].is_string()) << r.body;
  EXPECT_FALSE(ch["message"].contains("tool_calls")) << r.body;
  EXPECT_NE(ch["finish_reason"], "tool_calls") << r.body;
}

// auto carries the tools' grammar behind the call marker (ToolCalling::CompileAuto); until the
// model writes the marker its text is free: what tool_choice "none" (same prompt) writes.
TEST_F(ToolCallsServerTest, AutoIsFreeUntilACallBegins) {
  ToolRequest tools;
  tools.tools = text::tool_calls::TestTools();
  auto constraint =
      stack_->ctx.tool_calling->CompileAuto(tools, text::tool_calls::ToolFamily::kHermes);
  ASSERT_NE(constraint, nullptr);
  EXPECT_EQ(constraint->triggers, std::vector<std::string>{"<tool_call>"});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    auto body = [&](const char* choice) -> Json {
      return {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
              {"tools", ToolsJson()},
              {"tool_choice", choice},
              {"temperature", 1.0},
              {"seed", seed},
              {"max_tokens", 40}};
    };
    Reply none = Post(stack_->port(), "/v1/chat/completions", body("none"));
    Reply aut = Post(stack_->port(), "/v1/chat/completions", body("auto"));
    ASSERT_EQ(none.status, 200) << none.body;
    ASSERT_EQ(aut.status, 200) << aut.body;
    const std::string text = none.json["choices"][0]["message"].value("content", "");
    if (text.find("<tool_call>") != std::string::npos) continue;  // the grammar would hold
    EXPECT_EQ(aut.json["choices"][0]["message"]["content"],
              none.json["choices"][0]["message"]["content"])
        << aut.body;
  }
}

TEST_F(ToolCallsServerTest, RefusalsAre400sNamingTheField) {
  Reply r = Post(stack_->port(), "/v1/chat/completions",
                 {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                  {"tools", ToolsJson()},
                  {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}});
  ExpectOpenAIError(r, 400, "tool_choice.function.name");
}

}  // namespace
}  // namespace banyan::server::http::http_test
