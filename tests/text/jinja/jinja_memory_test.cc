// Memory of Jinja renders (issue 43): peak RSS growth of a forked child that renders loop bombs
// (refused) and ordinary chat conversations many times in a row. A refused render must cost at
// most a few MB, whatever the loop count, and 1,000 ordinary renders must not accumulate.
//
// Each case runs in its own child so that the parent's heap and earlier cases do not hide the
// growth: ru_maxrss (the child's high-water mark, KiB) is read before and after the renders.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "text/jinja/template.h"

namespace banyan::text::jinja {
namespace {

using json = nlohmann::ordered_json;

int64_t MaxRssKiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs `work` in a forked child; the growth of the child's peak RSS (KiB) across it, or -1
// when `work` returned false or the child died (a crash, or the kernel's OOM killer).
int64_t PeakGrowthKiB(const std::function<bool()>& work) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const int64_t before = MaxRssKiB();
    const bool ok = work();
    const int64_t growth = ok ? MaxRssKiB() - before : -1;
    const ssize_t n = write(fds[1], &growth, sizeof(growth));
    _exit(n == sizeof(growth) ? 0 : 1);
  }
  close(fds[1]);
  int64_t growth = -1;
  if (pid < 0 || read(fds[0], &growth, sizeof(growth)) != sizeof(growth)) growth = -1;
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  return growth;
}

constexpr int64_t kBoundKiB = 32 << 10;

// Renders `src` `times` times; each must fail with an error containing `error`.
bool AllRefused(const std::string& src, int times, const std::string& error) {
  absl::StatusOr<Template> t = Template::Parse(src);
  if (!t.ok()) return false;
  for (int i = 0; i < times; ++i) {
    absl::StatusOr<std::string> out = t->Render(json::object());
    if (out.ok() || out.status().message().find(error) == std::string::npos) {
      std::fprintf(stderr, "render %d of %s: %s\n", i, src.c_str(),
                   out.ok() ? "rendered" : std::string(out.status().message()).c_str());
      return false;
    }
  }
  return true;
}

TEST(JinjaMemoryTest, RefusedLoopBombsCostAFewMegabytes) {
  // The issue's case ten times in a row; the others (as slow: 5,000,000 steps each) twice.
  struct Case {
    std::string src;
    std::string error;
    int times = 2;
  } cases[] = {
      {"{% for i in range(100000000) %}{% endfor %}", "steps", 10},
      {"{% for i in range(1000000000) %}{% set x = i %}{% endfor %}", "steps"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"},
      {"{% for i in range(100000000) if i is even %}x{% endfor %}", "items"},
      {"{% for i in range(100000000) %}{{ loop.index }}{% endfor %}", "rendered text"},
  };
  for (const Case& c : cases) {
    const int64_t growth = PeakGrowthKiB([&] { return AllRefused(c.src, c.times, c.error); });
    std::printf("[ peak RSS ] %d refused renders of %s: +%lld KiB\n", c.times, c.src.c_str(),
                static_cast<long long>(growth));
    EXPECT_GE(growth, 0) << c.src;
    EXPECT_LT(growth, kBoundKiB) << c.src;
  }
}

TEST(JinjaMemoryTest, AMillionStepLoopThatRendersStaysSmall) {
  const int64_t growth = PeakGrowthKiB([] {
    absl::StatusOr<Template> t =
        Template::Parse("{% for i in range(1000000) %}{% endfor %}{{ range(3) | join(',') }}");
    if (!t.ok()) return false;
    for (int i = 0; i < 10; ++i) {
      absl::StatusOr<std::string> out = t->Render(json::object());
      if (!out.ok() || *out != "0,1,2") return false;
    }
    return true;
  });
  std::printf("[ peak RSS ] 10 renders of a 1,000,000-step loop: +%lld KiB\n",
              static_cast<long long>(growth));
  EXPECT_GE(growth, 0);
  EXPECT_LT(growth, kBoundKiB);
}

// A chat template in the style of Llama 3's (header tags, tools as JSON, tool calls and
// results, a namespace carried out of a loop), written for this test.
constexpr char kChatTemplate[] = R"({{- bos_token }}
{%- set ns = namespace(system='', calls=0) %}
{%- if messages[0].role == 'system' %}
  {%- set ns.system = messages[0].content | trim %}
  {%- set turns = messages[1:] %}
{%- else %}
  {%- set turns = messages %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\n\n' }}
{%- if tools is defined and tools %}
  {{- 'You may call these functions:\n' }}
  {%- for t in tools %}{{ t | tojson(indent=4) }}{{ '\n\n' }}{% endfor %}
{%- endif %}
{{- ns.system ~ '<|eot_id|>' }}
{%- for m in turns %}
  {%- if (m.role == 'user') == (loop.index0 % 2 == 1) and m.role != 'tool' and not m.tool_calls %}
    {{- raise_exception('roles must alternate') }}
  {%- endif %}
  {{- '<|start_header_id|>' ~ (m.role if m.role != 'tool' else 'ipython') ~ '<|end_header_id|>\n\n' }}
  {%- if m.tool_calls %}
    {%- for c in m.tool_calls %}
      {%- set ns.calls = ns.calls + 1 %}
      {{- '{"name": "' ~ c.function.name ~ '", "parameters": ' ~ c.function.arguments | tojson ~ '}' }}
    {%- endfor %}
  {%- else %}
    {{- m.content | trim }}
  {%- endif %}
  {{- '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
)";

json ChatContext() {
  json params = {{"type", "object"},
                 {"properties",
                  {{"city", {{"type", "string"}, {"description", "the city's name"}}},
                   {"unit", {{"type", "string"}, {"enum", {"c", "f"}}}}}},
                 {"required", {"city"}}};
  json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "weather"}, {"description", "Today's weather"}, {"parameters", params}}}}});
  json call = {{"type", "function"},
               {"function", {{"name", "weather"}, {"arguments", {{"city", "Oslo"}}}}}};
  json messages =
      json::array({{{"role", "system"}, {"content", "  You are a helpful assistant.  "}},
                   {{"role", "user"}, {"content", "What is the weather in Oslo?"}},
                   {{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}},
                   {{"role", "tool"}, {"content", "{\"temp\": 3}"}},
                   {{"role", "assistant"}, {"content", "It is 3 degrees in Oslo."}},
                   {{"role", "user"}, {"content", std::string(2000, 'q') + " and tomorrow?"}}});
  return {{"messages", messages},
          {"tools", tools},
          {"add_generation_prompt", true},
          {"bos_token", "<|begin_of_text|>"}};
}

TEST(JinjaMemoryTest, ThousandChatRendersDoNotAccumulate) {
  absl::StatusOr<Template> t = Template::Parse(kChatTemplate);
  ASSERT_TRUE(t.ok()) << t.status();
  const json ctx = ChatContext();
  absl::StatusOr<std::string> first = t->Render(ctx);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(first->find("<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 3}<|eot_id|>"),
            std::string::npos)
      << *first;
  EXPECT_NE(first->find("{\"name\": \"weather\", \"parameters\": {\"city\": \"Oslo\"}}"),
            std::string::npos)
      << *first;
  const int64_t growth = PeakGrowthKiB([&] {
    for (int i = 0; i < 1000; ++i) {
      absl::StatusOr<std::string> out = t->Render(ctx);
      if (!out.ok() || *out != *first) return false;
    }
    return true;
  });
  std::printf("[ peak RSS ] 1,000 chat renders: +%lld KiB\n", static_cast<long long>(growth));
  EXPECT_GE(growth, 0);
  EXPECT_LT(growth, kBoundKiB);
}

}  // namespace
}  // namespace banyan::text::jinja
