// A model folder whose tokenizer_config.json carries a chat_template gets its chat prompts
// rendered by it: the loader finds the template, /tokenize and /v1/chat/completions use it (BOS
// once, special-token texts as their ids), a template's raise_exception is a 400 with its
// message, tools (tool_choice "none"), tool results and assistant tool_calls reach it; without
// a template of its own, tool messages are a 400.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/common/load_chat_template.h"
#include "text/chat_template.h"
#include "tests/server/http/http_test_util.h"

namespace banyan::server::http::http_test {
namespace {

namespace fs = std::filesystem;

// Our own small template: BOS once, a line per message (tools and tool calls too), EOS after
// each, the assistant cue when asked; an assistant message first is refused.
constexpr char kTemplate[] =
    "{{- bos_token }}\n"
    "{%- if messages[0].role == 'assistant' %}{{ raise_exception('the first message must not be "
    "the assistant') }}{% endif %}\n"
    "{%- if tools is defined %}[tools: {{ tools | map(attribute='function') | "
    "map(attribute='name') | join(', ') }}]{% endif %}\n"
    "{%- for m in messages %}\n"
    "<|{{ m.role }}|>{{ m.content | trim }}\n"
    "{%- for c in m.tool_calls | default([]) %} call {{ c.function.name }}({{ c.function.arguments "
    "}}){% endfor %}\n"
    "{%- if m.role == 'tool' %} for {{ m.tool_call_id }}{% endif %}{{ eos_token }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}\n";

// The bundled model copied into a fresh folder with a tokenizer_config.json.
class ChatTemplateServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("banyan_chat_template_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const fs::path src = fs::path(kModelPath).parent_path();
    fs::copy_file(src / "stories260K.bin", *dir_ / "stories260K.bin",
                  fs::copy_options::overwrite_existing);
    fs::copy_file(src / "tok512.model", *dir_ / "tokenizer.model",
                  fs::copy_options::overwrite_existing);
    std::ofstream(*dir_ / "tokenizer_config.json")
        << nlohmann::json{{"bos_token", {{"content", "<s>"}, {"special", true}}},
                          {"eos_token", "</s>"},
                          {"chat_template", kTemplate}}
               .dump();
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static fs::path* dir_;
};
fs::path* ChatTemplateServerTest::dir_ = nullptr;

TEST_F(ChatTemplateServerTest, ModelFolderTemplateRendersThePrompt) {
  absl::StatusOr<model::ModelBundle> bundle =
      model::LoadModelBundle((*dir_ / "stories260K.bin").string());
  ASSERT_TRUE(bundle.ok()) << bundle.status();
  EXPECT_EQ(bundle->chat_template, kTemplate);
  EXPECT_TRUE(bundle->chat_template_source.ends_with("tokenizer_config.json"));
  EXPECT_EQ(bundle->bos_token, "<s>");
  EXPECT_EQ(bundle->eos_token, "</s>");
  absl::StatusOr<std::shared_ptr<const text::JinjaChat>> chat = LoadJinjaChat(ServerOptions{}, *bundle);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_NE(*chat, nullptr);
  // A named built-in template replaces the model's.
  ServerOptions builtin;
  builtin.chat_template = text::ChatTemplate::kChatML;
  EXPECT_EQ(*LoadJinjaChat(builtin, *bundle), nullptr);

  Stack stack({}, {}, 1024, 16, *chat);
  const text::Tokenizer& tok = *Bundle().tokenizer;
  auto text = [&](const std::string& s) { return tok.Encode(s, false); };
  const int bos = tok.bos_id(), eos = tok.eos_id();
  ASSERT_GE(bos, 0);
  ASSERT_GE(eos, 0);

  const Json msgs = Json::array({{{"role", "system"}, {"content", " Be brief. "}},
                                 {{"role", "user"}, {"content", "Hi"}}});
  Reply r = Post(stack.port(), "/tokenize", {{"messages", msgs}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<int32_t> want = {bos};
  for (auto part : {text("<|system|>Be brief."), std::vector<int32_t>{eos}, text("<|user|>Hi"),
                    std::vector<int32_t>{eos}, text("<|assistant|>")}) {
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(r.json["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_NE(r.json["tokens"][1], bos);  // BOS once: the template's, none prepended

  r = Post(stack.port(), "/tokenize", {{"messages", msgs}, {"add_generation_prompt", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  want.resize(want.size() - text("<|assistant|>").size());
  EXPECT_EQ(r.json["tokens"].get<std::vector<int32_t>>(), want);

  // The completion's prompt is that rendering.
  r = Post(stack.port(), "/v1/chat/completions",
           {{"messages", msgs}, {"max_tokens", 2}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], want.size() + text("<|assistant|>").size());

  // The template's own error: a 400 carrying its message.
  r = Post(stack.port(), "/v1/chat/completions",
           {{"messages", {{{"role", "assistant"}, {"content", "x"}}}}, {"max_tokens", 1}});
  ExpectOpenAIError(r, 400, "messages");
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find(
                "the first message must not be the assistant"),
            std::string::npos)
      << r.body;

  // Tools with tool_choice "none", an assistant tool call and the tool's result reach the
  // template; tool calling itself (tool_choice auto) is refused: this template shows no
  // tool-call syntax.
  const Json tools = {{{"type", "function"},
                       {"function", {{"name", "get_weather"}, {"parameters", Json::object()}}}}};
  const Json convo = Json::array(
      {{{"role", "user"}, {"content", "Weather?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         {{{"id", "c1"},
           {"type", "function"},
           {"function", {{"name", "get_weather"}, {"arguments", "{}"}}}}}}},
       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}});
  r = Post(stack.port(), "/tokenize",
           {{"messages", convo}, {"tools", tools}, {"tool_choice", "none"}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<int32_t> got = r.json["tokens"].get<std::vector<int32_t>>();
  want = {bos};
  for (auto part : {text("[tools: get_weather]<|user|>Weather?"), std::vector<int32_t>{eos},
                    text("<|assistant|> call get_weather({})"), std::vector<int32_t>{eos},
                    text("<|tool|>sunny for c1"), std::vector<int32_t>{eos},
                    text("<|assistant|>")}) {
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(got, want);
  r = Post(stack.port(), "/v1/chat/completions",
           {{"messages", convo}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 1}});
  EXPECT_EQ(r.status, 200) << r.body;
  r = Post(stack.port(), "/v1/chat/completions",
           {{"messages", convo}, {"tools", tools}, {"max_tokens", 1}});
  ExpectOpenAIError(r, 400, "tool_choice");
}

TEST_F(ChatTemplateServerTest, WithoutATemplateToolMessagesAreRefused) {
  Stack stack;  // the built-in plain template
  Reply r = Post(stack.port(), "/v1/chat/completions",
                 {{"messages",
                   {{{"role", "user"}, {"content", "x"}},
                    {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "y"}}}},
                  {"max_tokens", 1}});
  ExpectOpenAIError(r, 400, "messages");
  r = Post(stack.port(), "/v1/chat/completions",
           {{"messages",
             {{{"role", "user"}, {"content", "x"}},
              {{"role", "assistant"},
               {"tool_calls",
                {{{"id", "c1"},
                  {"type", "function"},
                  {"function", {{"name", "f"}, {"arguments", "{}"}}}}}}}}},
            {"max_tokens", 1}});
  ExpectOpenAIError(r, 400, "messages");
  EXPECT_NE(r.json["error"]["message"].get<std::string>().find("chat template"),
            std::string::npos);
}

TEST_F(ChatTemplateServerTest, ABrokenTemplateFileIsAStartUpErrorWithItsLine) {
  const fs::path bad = *dir_ / "bad.jinja";
  std::ofstream(bad) << "ok\n{% if x %}\n{{ 1 + }}";
  ServerOptions opts;
  opts.chat_template_file = bad.string();
  absl::StatusOr<std::shared_ptr<const text::JinjaChat>> chat = LoadJinjaChat(opts, Bundle());
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("bad.jinja: line 3:"), std::string::npos)
      << chat.status();
  // A good file replaces the model's template.
  std::ofstream(bad) << "{{ bos_token }}{{ messages | length }}";
  chat = LoadJinjaChat(opts, Bundle());
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_NE(*chat, nullptr);
  EXPECT_EQ((*chat)->bos_token, "<s>");  // the tokenizer's BOS piece
}

// Found at start-up with the file named, not at every request: an unknown filter or test (even
// in a branch no request takes) and text that is not UTF-8.
TEST_F(ChatTemplateServerTest, UnknownFiltersAndBadUtf8AreStartUpErrorsNamingTheFile) {
  const fs::path bad = *dir_ / "bad_filter.jinja";
  ServerOptions opts;
  opts.chat_template_file = bad.string();
  for (const auto& [text, error] : std::vector<std::pair<std::string, std::string>>{
           {"{% if false %}\n{{ messages | frobnicate }}{% endif %}",
            "bad_filter.jinja: line 2: unknown filter 'frobnicate'"},
           {"{{ messages is frobnicated }}",
            "bad_filter.jinja: line 1: unknown test 'frobnicated'"},
           {"ok\n\xff{{ 1 }}",
            "bad_filter.jinja: line 2: the template is not valid UTF-8 (byte 3)"}}) {
    std::ofstream(bad, std::ios::trunc | std::ios::binary) << text;
    absl::StatusOr<std::shared_ptr<const text::JinjaChat>> chat = LoadJinjaChat(opts, Bundle());
    ASSERT_FALSE(chat.ok()) << text;
    EXPECT_NE(chat.status().message().find(error), std::string::npos) << chat.status();
  }
}

}  // namespace
}  // namespace banyan::server::http::http_test
