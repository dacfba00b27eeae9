// response_format "structural_tag" through the HTTP front end on the bundled model (a real tiny
// model that knows nothing of tags: the grammar does the work). A bias makes the model write the
// trigger "<" now and then; the text before the first trigger is free (exactly what the same
// request without the tag writes), and from each "<" on the output is one structure: a begin,
// JSON that satisfies that structure's schema (checked apart from the grammar engine), the end;
// then free text again. Completions and chat, streaming and not.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/common/structured_outputs.h"
#include "tests/server/http/http_test_util.h"
#include "tests/text/tool_calls/tool_calls_test_util.h"

namespace banyan::server::http::http_test {
namespace {

using text::tool_calls::TestTools;
using text::tool_calls::ValidTestCall;

// get_weather and add of TestTools as structures behind one trigger, "<".
Json WeatherTag() {
  Json structures = Json::array();
  for (const auto& t : TestTools()) {
    if (t.name == "ping") continue;
    structures.push_back({{"begin", "<function=" + t.name + ">"},
                          {"schema", Json::parse(t.parameters.dump())},
                          {"end", "</function>"}});
  }
  return {{"type", "structural_tag"}, {"structures", structures}, {"triggers", {"<"}}};
}

int32_t TokenSpelled(const std::string& bytes) {
  const text::Tokenizer& tok = *Bundle().tokenizer;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.TokenBytes(id) == bytes) return id;
  }
  return -1;
}

struct Structure {
  std::string name, arguments;
  bool text_after = false;  // free text (no trigger) follows its end
};

// The structures of `text`: each "<" starts one; false where one is not whole (cut by
// max_tokens only, which the caller checks) or is no structure at all.
::testing::AssertionResult ReadStructures(const std::string& text, bool cut,
                                          std::vector<Structure>* out) {
  static const std::string kBegin = "<function=", kEnd = "</function>";
  size_t at = text.find('<');
  while (at != std::string::npos) {
    if (text.compare(at, kBegin.size(), kBegin) != 0) {
      if (cut && text.size() - at < kBegin.size()) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "a trigger with no begin at " << at << ": " << text;
    }
    const size_t name_start = at + kBegin.size();
    const size_t name_end = text.find('>', at);
    const size_t end = name_end == std::string::npos ? name_end : text.find(kEnd, name_end);
    if (end == std::string::npos) {
      if (cut) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "a structure with no end: " << text;
    }
    const size_t after = end + kEnd.size();
    at = text.find('<', after);
    out->push_back({text.substr(name_start, name_end - name_start),
                    text.substr(name_end + 1, end - name_end - 1),
                    std::min(at, text.size()) > after});
  }
  return ::testing::AssertionSuccess();
}

class StructuralTagServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stack_ = std::make_unique<Stack>();
    stack_->ctx.structured_outputs = std::make_shared<StructuredOutputs>(stack_->ctx.tokenizer);
    lt_ = TokenSpelled("<");
    ASSERT_GE(lt_, 0) << "the bundled vocabulary has no '<' token";
  }
  Json Body(bool chat, uint64_t seed, bool stream, bool tagged) {
    Json b = {{"temperature", 1.0},
              {"seed", seed},
              {"max_tokens", 250},
              {"stream", stream},
              {"logit_bias", {{std::to_string(lt_), bias_}}}};
    if (chat) {
      b["messages"] = {{{"role", "user"}, {"content", "Tell me a story."}}};
    } else {
      b["prompt"] = "Once upon a time";
    }
    if (tagged) b["response_format"] = WeatherTag();
    return b;
  }
  // The text and finish reason of one request's only choice, streamed or whole.
  std::pair<std::string, std::string> Run(bool chat, uint64_t seed, bool stream, bool tagged) {
    const char* path = chat ? "/v1/chat/completions" : "/v1/completions";
    Reply r = Post(stack_->port(), path, Body(chat, seed, stream, tagged));
    EXPECT_EQ(r.status, 200) << r.body;
    if (!stream) {
      const Json& c = r.json["choices"][0];
      return {chat ? c["message"].value("content", "") : c.value("text", ""),
              c.value("finish_reason", "")};
    }
    bool done = false;
    std::string text, finish;
    for (const Json& ev : ParseSse(r.body, &done)) {
      for (const Json& c : ev.value("choices", Json::array())) {
        if (chat) {
          text += c["delta"].value("content", "");
        } else {
          text += c.value("text", "");
        }
        if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
          finish = c["finish_reason"];
        }
      }
    }
    EXPECT_TRUE(done);
    return {text, finish};
  }
  std::unique_ptr<Stack> stack_;
  int32_t lt_ = -1;
  // '<' is a byte token the story model almost never writes: +24 makes it write the trigger
  // within a sentence or two, and again after most structures.
  double bias_ = 24;
};

TEST_F(StructuralTagServerTest, FreeTextThenTaggedJsonValidAgainstItsSchema) {
  int structures = 0, free_before = 0, text_after = 0;
  for (bool chat : {false, true}) {
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      const std::string what =
          std::string(chat ? "chat" : "completions") + " seed " + std::to_string(seed);
      const auto [text, finish] = Run(chat, seed, /*stream=*/false, /*tagged=*/true);
      const auto [streamed, streamed_finish] = Run(chat, seed, /*stream=*/true, true);
      EXPECT_EQ(streamed, text) << what << ": the same seed streamed";
      EXPECT_EQ(streamed_finish, finish) << what;
      // Before the first trigger the output is free: what the request without the tag writes.
      const auto [free, free_finish] = Run(chat, seed, /*stream=*/false, /*tagged=*/false);
      const size_t first = text.find('<');
      ASSERT_EQ(free.substr(0, std::min(free.find('<'), free.size())),
                text.substr(0, std::min(first, text.size())))
          << what << "\ntagged: " << text << "\nfree:   " << free;
      if (first == std::string::npos) continue;
      free_before += first > 0;
      std::vector<Structure> found;
      EXPECT_TRUE(ReadStructures(text, finish == "length", &found)) << what;
      for (const Structure& s : found) {
        EXPECT_TRUE(s.name == "get_weather" || s.name == "add") << what << ": " << text;
        EXPECT_TRUE(ValidTestCall(s.name, s.arguments)) << what << ": " << text;
        ++structures;
        text_after += s.text_after;
      }
    }
  }
  EXPECT_GE(structures, 4) << "the bias should make the model enter a few structures";
  EXPECT_GE(free_before, 2) << "some outputs should write free text before the first trigger";
  EXPECT_GE(text_after, 2) << "free text again after a structure's end";
}

TEST_F(StructuralTagServerTest, RefusalsAre400sNamingTheField) {
  Json tag = WeatherTag();
  tag["triggers"] = {"["};
  Json body = {{"prompt", "Once"}, {"response_format", tag}};
  ExpectOpenAIError(Post(stack_->port(), "/v1/completions", body), 400,
                    "response_format.structures[0].begin");
  body["response_format"] = {{"type", "structural_tag"},
                             {"format", {{"type", "triggered_tags"}}}};
  ExpectOpenAIError(Post(stack_->port(), "/v1/completions", body), 400, "response_format.format");
  // min_tokens would hold back the end a structure may need: refused, not dropped.
  body["response_format"] = WeatherTag();
  body["min_tokens"] = 3;
  body["max_tokens"] = 8;
  Reply r = Post(stack_->port(), "/v1/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
}

}  // namespace
}  // namespace banyan::server::http::http_test
