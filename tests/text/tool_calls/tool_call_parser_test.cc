// The tool-call parser on whole texts, and streamed: split at every byte, and a byte at a time
// (content and arguments only grow, and end as when read whole).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "text/tool_calls/tool_call_parser.h"

namespace banyan::text::tool_calls {
namespace {

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

Expected Read(ToolCallParser& p) {
  Expected e{p.content(), {}};
  for (const ParsedToolCall& c : p.calls()) e.calls.emplace_back(c.name, c.arguments);
  return e;
}

void ExpectParses(ToolFamily family, const std::string& text, const Expected& want) {
  SCOPED_TRACE(text);
  {
    ToolCallParser p(family);
    p.Feed(text);
    p.Finish();
    const Expected got = Read(p);
    EXPECT_EQ(got.content, want.content);
    EXPECT_EQ(got.calls, want.calls);
    for (const ParsedToolCall& c : p.calls()) EXPECT_TRUE(c.complete);
  }
  for (size_t split = 0; split <= text.size(); ++split) {
    ToolCallParser p(family);
    p.Feed(text.substr(0, split));
    p.Feed(text.substr(split));
    p.Finish();
    const Expected got = Read(p);
    EXPECT_EQ(got.content, want.content) << "split at " << split;
    EXPECT_EQ(got.calls, want.calls) << "split at " << split;
  }
  // A byte at a time: what was shown stays a prefix of what comes after.
  ToolCallParser p(family);
  Expected shown;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size()) {
      p.Feed(text.substr(i, 1));
    } else {
      p.Finish();
    }
    const Expected now = Read(p);
    EXPECT_EQ(now.content.compare(0, shown.content.size(), shown.content), 0) << "byte " << i;
    for (size_t k = 0; k < shown.calls.size() && k < now.calls.size(); ++k) {
      if (!shown.calls[k].first.empty()) {
        EXPECT_EQ(now.calls[k].first, shown.calls[k].first);
      }
      EXPECT_EQ(now.calls[k].second.compare(0, shown.calls[k].second.size(),
                                            shown.calls[k].second),
                0)
          << "byte " << i;
    }
    shown = now;
  }
}

TEST(ToolCallParserTest, Hermes) {
  ExpectParses(ToolFamily::kHermes,
               "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
               "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
               "\"arguments\": {\"a\": 1, \"b\": [2, {\"c\": \"}\"}]}}\n</tool_call>\n",
               {"Let me check.",
                {{"get_weather", "{\"city\": \"Paris\"}"},
                 {"add", "{\"a\": 1, \"b\": [2, {\"c\": \"}\"}]}"}}});
  // Whitespace anywhere, keys in another order, a missing close tag, arguments as a string.
  ExpectParses(ToolFamily::kHermes,
               "<tool_call>{ \"name\" :\"f\" ,\"arguments\":{ } }</tool_call>",
               {"", {{"f", "{ }"}}});
  ExpectParses(ToolFamily::kHermes,
               "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"f\"}",
               {"", {{"f", "{\"x\":1}"}}});
  ExpectParses(ToolFamily::kHermes,
               "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
               {"", {{"f", "{\"x\": 1}"}}});
  ExpectParses(ToolFamily::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call> done",
               {"done", {{"f", "{}"}}});
}

TEST(ToolCallParserTest, HermesTextThatIsNoCall) {
  ExpectParses(ToolFamily::kHermes, "a < b <tool", {"a < b <tool", {}});
  ExpectParses(ToolFamily::kHermes, "  just text  ", {"  just text  ", {}});
  // Bad JSON, no name, cut short: the call's text is content.
  ExpectParses(ToolFamily::kHermes, "x <tool_call>{\"name\": \"f\", \"arguments\": {]}",
               {"x<tool_call>{\"name\": \"f\", \"arguments\": {]}", {}});
  ExpectParses(ToolFamily::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>",
               {"<tool_call>{\"arguments\": {}}</tool_call>", {}});
  ExpectParses(ToolFamily::kHermes, "<tool_call>{\"name\": \"f\", \"argu",
               {"<tool_call>{\"name\": \"f\", \"argu", {}});
  // A good call stands when a later one fails.
  ExpectParses(ToolFamily::kHermes,
               "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops",
               {"<tool_call>oops", {{"f", "{}"}}});
}

TEST(ToolCallParserTest, Mistral) {
  ExpectParses(ToolFamily::kMistral,
               "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1]}}, {\"name\": \"g\", "
               "\"arguments\": {}}]",
               {"", {{"f", "{\"a\": [1]}"}, {"g", "{}"}}});
  // The marker dropped by the detokenizer (a control token).
  ExpectParses(ToolFamily::kMistral, " [ {\"name\": \"f\", \"arguments\": {}} ]",
               {"", {{"f", "{}"}}});
  ExpectParses(ToolFamily::kMistral, "Sure. [TOOL_CALLS] [{\"name\": \"f\"}]",
               {"Sure.", {{"f", "{}"}}});
  ExpectParses(ToolFamily::kMistral, "[1, 2] is a list", {"[1, 2] is a list", {}});
  ExpectParses(ToolFamily::kMistral, "see [this]", {"see [this]", {}});
}

TEST(ToolCallParserTest, Llama3) {
  ExpectParses(ToolFamily::kLlama3, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}",
               {"", {{"f", "{\"a\": 1}"}}});
  ExpectParses(ToolFamily::kLlama3,
               "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", "
               "\"parameters\": {\"b\": \"x\"}}",
               {"", {{"f", "{}"}, {"g", "{\"b\": \"x\"}"}}});
  ExpectParses(ToolFamily::kLlama3, "Hello {\"name\": \"f\"}", {"Hello {\"name\": \"f\"}", {}});
  ExpectParses(ToolFamily::kLlama3, "{not json}", {"{not json}", {}});
}

TEST(ToolCallParserTest, NameIsKnownBeforeTheArgumentsEnd) {
  ToolCallParser p(ToolFamily::kHermes);
  p.Feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  ASSERT_EQ(p.calls().size(), 1u);
  EXPECT_EQ(p.calls()[0].name, "get_weather");
  EXPECT_EQ(p.calls()[0].arguments, "{\"city\": \"Pa");
  EXPECT_FALSE(p.calls()[0].complete);
  p.Feed("ris\"}}\n</tool_call>");
  EXPECT_TRUE(p.calls()[0].complete);
  EXPECT_EQ(p.calls()[0].arguments, "{\"city\": \"Paris\"}");
}

}  // namespace
}  // namespace banyan::text::tool_calls
