// Reasoning models through the HTTP front end (--reasoning-parser, text/reasoning.h):
//   - the request parser: with the parser on, a chat constraint holds only after "</think>"
//     (a trigger, held once), unless the prompt closed the thinking; completions are untouched;
//   - the response builder fed scripted outputs (the markers cut at every event boundary):
//     message.reasoning_content / content, deltas that never carry a piece of a marker, tool
//     calls and JSON read from the content only;
//   - the whole stack on the bundled model (which never writes "</think>"): the output is all
//     thinking, so a response_format does not constrain it, content is null and finish_reason
//     "length"; with the thinking closed in the prompt the content is the JSON.
#include <fstream>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/common/structured_outputs.h"
#include "server/common/tool_calling.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "tests/server/http/http_test_util.h"
#include "tests/server/http/request_fixture.h"

namespace banyan::server {
namespace {

using http::Json;
using Reasoning = http::ParsedGeneration::Reasoning;
namespace http_test = http::http_test;

// A ChatML template ending in the assistant's header and then `tail`.
std::shared_ptr<const text::JinjaChat> ChatWithTail(const std::string& tail,
                                                    const text::Tokenizer& tokenizer) {
  const std::string source =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
      "{% endfor %}<|im_start|>assistant\n" + tail;
  auto chat = text::MakeJinjaChat(source, "test", "<s>", "</s>", tokenizer);
  EXPECT_TRUE(chat.ok()) << chat.status();
  return chat.ok() ? *chat : nullptr;
}

// Qwen 3's two generation prompts: thinking on (opened in the prompt) and off (closed there).
constexpr char kOpened[] = "<think>\n";
constexpr char kClosed[] = "<think>\n\n</think>\n\n";

// --- the request parser

class ReasoningRequestTest : public BundledRequestTest {
 protected:
  void SetUp() override {
    BundledRequestTest::SetUp();
    ctx_.structured_outputs = std::make_shared<StructuredOutputs>(tokenizer_);
    ctx_.tool_calling = std::make_shared<ToolCalling>(tokenizer_);
    ctx_.options.reasoning_parser = text::ReasoningParser::kQwen3;
  }
  absl::StatusOr<http::ParsedGeneration> Chat(const std::string& extra) {
    const std::string body =
        R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
    return http::ParseChatRequest(Json::parse(body), ctx_, body);
  }
};

TEST_F(ReasoningRequestTest, AResponseFormatHoldsAfterTheThinking) {
  for (const char* tail : {"", kOpened}) {
    ctx_.jinja_chat = ChatWithTail(tail, *tokenizer_);
    auto r = Chat(R"("response_format": {"type": "json_object"})");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reasoning, Reasoning::kThinksFirst);
    const auto& c = r->inputs.at(0).constraint;
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->triggers, std::vector<std::string>{"</think>"});
    EXPECT_TRUE(c->trigger_once);
    EXPECT_TRUE(Accepts(*r, R"({"a": 1})")) << "the grammar itself is the JSON one";
  }
}

TEST_F(ReasoningRequestTest, AForcedToolCallHoldsAfterTheThinking) {
  const std::string path =
      std::string(BANYAN_SOURCE_DIR) + "/tests/testing/templates/hermes_tools.jinja";
  std::ifstream in(path);
  std::stringstream source;
  source << in.rdbuf();
  auto chat = text::MakeJinjaChat(source.str(), path, "<s>", "</s>", *tokenizer_);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ctx_.jinja_chat = *chat;
  auto r = Chat(R"("tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
      "tool_choice": "required")");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& c = r->inputs.at(0).constraint;
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->triggers, std::vector<std::string>{"</think>"});
  EXPECT_TRUE(c->trigger_once);
}

TEST_F(ReasoningRequestTest, AClosedThinkingOrNoParserLeavesTheConstraintAsItWas) {
  ctx_.jinja_chat = ChatWithTail(kClosed, *tokenizer_);
  auto closed = Chat(R"("response_format": {"type": "json_object"})");
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(closed->reasoning, Reasoning::kClosed);
  ASSERT_NE(closed->inputs.at(0).constraint, nullptr);
  EXPECT_TRUE(closed->inputs.at(0).constraint->triggers.empty());

  ctx_.jinja_chat = ChatWithTail(kOpened, *tokenizer_);
  ctx_.options.reasoning_parser = text::ReasoningParser::kNone;
  auto off = Chat(R"("response_format": {"type": "json_object"})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->reasoning, Reasoning::kOff);
  EXPECT_TRUE(off->inputs.at(0).constraint->triggers.empty());

  ctx_.options.reasoning_parser = text::ReasoningParser::kDeepSeekR1;
  const std::string body = R"({"prompt": "Once", "response_format": {"type": "json_object"}})";
  auto completion = http::ParseCompletionRequest(Json::parse(body), ctx_, body);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->reasoning, Reasoning::kOff);
  EXPECT_TRUE(completion->inputs.at(0).constraint->triggers.empty());
}

// --- the response builder on scripted outputs

http::ParsedGeneration ChatGeneration(Reasoning reasoning, text::tool_calls::ToolFamily family =
                                                               text::tool_calls::ToolFamily::kNone) {
  http::ParsedGeneration g;
  g.api = http::Api::kChat;
  g.inputs.resize(1);
  g.reasoning = reasoning;
  g.tool_family = family;
  return g;
}

// The output `text` as events cut at `cuts` (byte offsets), the last one finishing with `finish`.
std::vector<scheduler::TokenEvent> Events(const std::string& text, const std::vector<size_t>& cuts,
                                          scheduler::FinishReason finish) {
  std::vector<scheduler::TokenEvent> out;
  size_t at = 0;
  for (size_t cut : cuts) {
    scheduler::TokenEvent ev;
    ev.token = 1;
    ev.text = text.substr(at, cut - at);
    out.push_back(std::move(ev));
    at = cut;
  }
  scheduler::TokenEvent last;
  last.token = 1;
  last.text = text.substr(at);
  last.finish = finish;
  out.push_back(std::move(last));
  return out;
}

struct Streamed {
  std::string reasoning, content;
  std::vector<Json> calls;  // the tool_calls pieces
  std::string finish;
};

// A stream's deltas added up (a delta's text fields are never empty strings).
Streamed Stream(const http::ParsedGeneration& g, const std::vector<scheduler::TokenEvent>& evs) {
  http::ResponseBuilder b(g, "chatcmpl-test", 0, "m", http_test::Bundle().tokenizer.get(), 1);
  Streamed s;
  for (const Json& start : b.StartChunks()) {
    EXPECT_EQ(start["choices"][0]["delta"]["role"], "assistant");
  }
  for (const scheduler::TokenEvent& ev : evs) {
    Json chunk = b.Chunk(0, ev);
    if (chunk.is_null()) continue;
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    const Json& ch = chunk["choices"][0];
    const Json& d = ch["delta"];
    for (const char* field : {"reasoning_content", "content"}) {
      if (!d.contains(field)) continue;
      EXPECT_TRUE(d[field].is_string()) << chunk.dump();
      const std::string piece = d[field].get<std::string>();
      EXPECT_FALSE(piece.empty()) << chunk.dump();
      (std::string(field) == "content" ? s.content : s.reasoning) += piece;
    }
    for (const Json& c : d.value("tool_calls", Json::array())) s.calls.push_back(c);
    if (ch["finish_reason"].is_string()) s.finish = ch["finish_reason"].get<std::string>();
  }
  return s;
}

Json Whole(const http::ParsedGeneration& g, const std::vector<scheduler::TokenEvent>& evs) {
  http::ResponseBuilder b(g, "chatcmpl-test", 0, "m", http_test::Bundle().tokenizer.get(), 1);
  for (const scheduler::TokenEvent& ev : evs) b.Add(0, ev);
  Json j = b.Final({});
  EXPECT_EQ(j["object"], "chat.completion");
  return j["choices"][0];
}

struct Script {
  std::string text;
  scheduler::FinishReason finish;
  Json reasoning;  // message.reasoning_content
  Json content;    // message.content
};

TEST(ReasoningResponseTest, ThinkingAndAnswerAreTwoFieldsWholeAndStreamedAtEveryCut) {
  using FR = scheduler::FinishReason;
  const std::vector<Script> scripts = {
      {"<think>\nLet me see.\n</think>\n\n{\"answer\": 42}", FR::kStop, "\nLet me see.\n",
       "\n\n{\"answer\": 42}"},
      // The template opened the thinking in the prompt.
      {"Let me see.</think>Forty-two.", FR::kStop, "Let me see.", "Forty-two."},
      // Cut by max_tokens while thinking: all reasoning, no content.
      {"<think>Let me see, fir", FR::kLength, "Let me see, fir", nullptr},
      {"Let me see.</thi", FR::kLength, "Let me see.</thi", nullptr},
      {"</think>Only the answer.", FR::kStop, nullptr, "Only the answer."},
  };
  for (const Script& sc : scripts) {
    SCOPED_TRACE(sc.text);
    const http::ParsedGeneration g = ChatGeneration(Reasoning::kThinksFirst);
    const Json whole = Whole(g, Events(sc.text, {}, sc.finish));
    EXPECT_EQ(whole["message"]["role"], "assistant");
    EXPECT_EQ(whole["message"]["reasoning_content"], sc.reasoning) << whole.dump();
    EXPECT_EQ(whole["message"]["content"], sc.content) << whole.dump();
    EXPECT_EQ(whole["finish_reason"], sc.finish == FR::kStop ? "stop" : "length");
    if (sc.content.is_string() && sc.content.get<std::string>().find('{') != std::string::npos) {
      EXPECT_TRUE(Json::accept(sc.content.get<std::string>())) << "the content is the JSON";
    }
    // Streamed, cut once and twice at every pair of positions.
    for (size_t i = 0; i <= sc.text.size(); ++i) {
      for (size_t j = i; j <= sc.text.size(); j += 3) {
        const Streamed s = Stream(g, Events(sc.text, {i, j}, sc.finish));
        EXPECT_EQ(s.reasoning, sc.reasoning.is_null() ? "" : sc.reasoning.get<std::string>())
            << "cut at " << i << ", " << j;
        EXPECT_EQ(s.content, sc.content.is_null() ? "" : sc.content.get<std::string>())
            << "cut at " << i << ", " << j;
        EXPECT_EQ(s.finish, sc.finish == FR::kStop ? "stop" : "length");
      }
    }
  }
}

TEST(ReasoningResponseTest, AClosedThinkingIsAllContentAndNoParserShowsNoField) {
  const std::string text = "{\"a\": 1}";
  const Json closed =
      Whole(ChatGeneration(Reasoning::kClosed), Events(text, {3}, scheduler::FinishReason::kStop));
  EXPECT_TRUE(closed["message"]["reasoning_content"].is_null()) << closed.dump();
  EXPECT_TRUE(closed["message"].contains("reasoning_content"));
  EXPECT_EQ(closed["message"]["content"], text);
  const Streamed s =
      Stream(ChatGeneration(Reasoning::kClosed), Events(text, {3}, scheduler::FinishReason::kStop));
  EXPECT_EQ(s.content, text);
  EXPECT_EQ(s.reasoning, "");

  const std::string raw = "<think>x</think>y";
  const Json off =
      Whole(ChatGeneration(Reasoning::kOff), Events(raw, {}, scheduler::FinishReason::kStop));
  EXPECT_FALSE(off["message"].contains("reasoning_content")) << off.dump();
  EXPECT_EQ(off["message"]["content"], raw);
}

TEST(ReasoningResponseTest, ToolCallsAreReadFromTheContentOnly) {
  // A call written while thinking is thinking; the one after </think> is the call.
  const std::string text =
      "I could write <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call> here."
      "</think>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n"
      "</tool_call>";
  const http::ParsedGeneration g =
      ChatGeneration(Reasoning::kThinksFirst, text::tool_calls::ToolFamily::kHermes);
  const Json whole = Whole(g, Events(text, {}, scheduler::FinishReason::kStop));
  EXPECT_EQ(whole["finish_reason"], "tool_calls") << whole.dump();
  EXPECT_EQ(whole["message"]["reasoning_content"],
            "I could write <tool_call>{\"name\": \"no\", \"arguments\": {}}</tool_call> here.");
  ASSERT_EQ(whole["message"]["tool_calls"].size(), 1u) << whole.dump();
  EXPECT_EQ(whole["message"]["tool_calls"][0]["function"]["name"], "add");
  EXPECT_EQ(Json::parse(whole["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"a": 1, "b": 2})"));
  for (size_t cut = 0; cut <= text.size(); cut += 2) {
    const Streamed s = Stream(g, Events(text, {cut}, scheduler::FinishReason::kStop));
    EXPECT_EQ(s.reasoning, whole["message"]["reasoning_content"].get<std::string>()) << cut;
    EXPECT_EQ(s.finish, "tool_calls") << cut;
    std::string name, args;
    for (const Json& c : s.calls) {
      EXPECT_EQ(c["index"], 0) << cut;
      if (c["function"].contains("name")) name += c["function"]["name"].get<std::string>();
      args += c["function"].value("arguments", "");
    }
    EXPECT_EQ(name, "add") << cut;
    EXPECT_EQ(Json::parse(args), Json::parse(R"({"a": 1, "b": 2})")) << cut;
  }
}

// --- the whole stack on the bundled model

class ReasoningServerTest : public ::testing::Test {
 protected:
  void Start(const char* tail, text::ReasoningParser parser) {
    ServerOptions opts;
    opts.reasoning_parser = parser;
    stack_ = std::make_unique<http_test::Stack>(
        scheduler::SchedulerOptions{}, opts, 1024, 16,
        ChatWithTail(tail, *http_test::Bundle().tokenizer));
    stack_->ctx.structured_outputs = std::make_shared<StructuredOutputs>(stack_->ctx.tokenizer);
  }
  Json Body(bool stream) const {
    return {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
            {"response_format", {{"type", "json_object"}}},
            {"max_tokens", 24},
            {"temperature", 0},
            {"stream", stream}};
  }
  std::unique_ptr<http_test::Stack> stack_;
};

TEST_F(ReasoningServerTest, TheThinkingIsFreeAndAnOutputCutWhileThinkingHasNoContent) {
  Start(kOpened, text::ReasoningParser::kQwen3);
  http_test::Reply r = http_test::Post(stack_->port(), "/v1/chat/completions", Body(false));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& ch = r.json["choices"][0];
  EXPECT_EQ(ch["finish_reason"], "length") << r.body;
  EXPECT_TRUE(ch["message"]["content"].is_null()) << r.body;
  ASSERT_TRUE(ch["message"]["reasoning_content"].is_string()) << r.body;
  const std::string thinking = ch["message"]["reasoning_content"].get<std::string>();
  EXPECT_FALSE(thinking.empty());
  EXPECT_NE(thinking.front(), '{') << "the JSON grammar held while thinking: " << r.body;

  r = http_test::Post(stack_->port(), "/v1/chat/completions", Body(true));
  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::string streamed;
  std::string finish;
  for (const Json& ev : http_test::ParseSse(r.body, &done)) {
    for (const Json& c : ev["choices"]) {
      const Json& d = c["delta"];
      EXPECT_FALSE(d.contains("content") && d["content"].is_string() &&
                   !d["content"].get<std::string>().empty())
          << ev.dump();
      if (d.contains("reasoning_content")) streamed += d["reasoning_content"].get<std::string>();
      if (c["finish_reason"].is_string()) finish = c["finish_reason"].get<std::string>();
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(streamed, thinking);
  EXPECT_EQ(finish, "length");
}

TEST_F(ReasoningServerTest, WithTheThinkingClosedInThePromptTheContentIsTheJson) {
  Start(kClosed, text::ReasoningParser::kQwen3);
  Json body = Body(false);
  body["max_tokens"] = 200;
  http_test::Reply r = http_test::Post(stack_->port(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& ch = r.json["choices"][0];
  EXPECT_TRUE(ch["message"]["reasoning_content"].is_null()) << r.body;
  ASSERT_TRUE(ch["message"]["content"].is_string()) << r.body;
  const std::string content = ch["message"]["content"].get<std::string>();
  ASSERT_FALSE(content.empty()) << r.body;
  EXPECT_EQ(content.front(), '{') << r.body;
  if (ch["finish_reason"] == "stop") {
    EXPECT_TRUE(Json::accept(content)) << r.body;
  }
}

}  // namespace
}  // namespace banyan::server
