// Model files at their edges, loaded the way banyand's start-up loads them (LoadModelBundle on a
// Hugging Face folder): a tokenizer.json nested 100,000 deep, nesting at the depth limit, a
// chat_template of the wrong type, a quantization_config. Each is a clear error naming the file
// and the field or limit, never a crash and never a silent fallback.
#include "model/model_bundle.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/json_limits.h"
#include "model/dummy_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"

namespace banyan::model {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteBytes;

// A four-piece Metaspace BPE tokenizer.json with `normalizer` in its "normalizer" slot.
std::string TokenizerJson(const std::string& normalizer = "null") {
  return R"({"model":{"type":"BPE","vocab":{"<unk>":0,"\u2581":1,"a":2,"\u2581a":3},)"
         R"("merges":[["\u2581","a"]],"unk_token":"<unk>","fuse_unk":true},)"
         R"("added_tokens":[{"id":0,"content":"<unk>","special":true}],"normalizer":)" +
         normalizer +
         R"(,"pre_tokenizer":{"type":"Metaspace","replacement":"\u2581","prepend_scheme":)"
         R"("first","split":true},"post_processor":null,"decoder":{"type":"Metaspace",)"
         R"("replacement":"\u2581","prepend_scheme":"always"}})";
}

// `levels` Sequence normalizers, each inside the previous one, around a Lowercase: a valid
// document nesting 2 + 2 * levels deep (the root object, then per level an object and its array,
// then the Lowercase object).
std::string NestedSequences(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += R"({"type":"Sequence","normalizers":[)";
  s += R"({"type":"Lowercase"})";
  for (int i = 0; i < levels; ++i) s += "]}";
  return s;
}

// A Hugging Face folder: config.json and model.safetensors of a small random llama, and the
// tokenizer files given.
class HfFolder {
 public:
  explicit HfFolder(const std::string& config_json = "") {
    const ModelWeights w = MakeDummyWeights(testing::SmallArchConfig("llama"), 7);
    WriteBytes(dir_.File("config.json"),
               config_json.empty() ? testing::HfConfigJson(w.config) : config_json);
    WriteBytes(dir_.File("model.safetensors"), testing::SafetensorsBytes(testing::HfEntries(w)));
  }
  void Write(const std::string& name, const std::string& text) {
    WriteBytes(dir_.File(name), text);
  }
  std::string File(const std::string& name) const { return dir_.File(name); }
  std::string path() const { return dir_.path(); }
  absl::StatusOr<ModelBundle> Load() const { return LoadModelBundle(dir_.path()); }

 private:
  TempDir dir_;
};

TEST(ModelBundleTest, TheFolderLoads) {
  HfFolder f;
  f.Write("tokenizer.json", TokenizerJson());
  absl::StatusOr<ModelBundle> b = f.Load();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->tokenizer->vocab_size(), 4);
  EXPECT_EQ(b->tokenizer_path, f.File("tokenizer.json"));
}

// Issue 43, finding 1: this file crashed banyand at start-up (SIGSEGV in a recursive copy of
// the parsed "model"). It is refused before any DOM is built, naming the file and the limit.
TEST(ModelBundleTest, TokenizerJsonNestedHundredThousandDeepIsAnError) {
  std::string model;
  for (int i = 0; i < 100000; ++i) model += R"({"a":)";
  model += "1" + std::string(100000, '}');
  HfFolder f;
  f.Write("tokenizer.json", R"({"model":)" + model + "}");
  absl::StatusOr<ModelBundle> b = f.Load();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(b.status().message());
  EXPECT_THAT(msg, HasSubstr(f.File("tokenizer.json") + ": nests arrays/objects more than 64"));
  EXPECT_THAT(msg, HasSubstr("the limit is 64"));

  // The same file passed on its own (--tokenizer) takes the same path.
  b = LoadModelBundle(f.path(), f.File("tokenizer.json"));
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("the limit is 64"));
}

TEST(ModelBundleTest, NestingAtTheLimitLoadsOneLevelMoreDoesNot) {
  ASSERT_EQ(kMaxJsonDepth % 2, 0);
  const int at_limit = (kMaxJsonDepth - 2) / 2;  // 2 + 2 * 31 = 64 levels
  ASSERT_FALSE(JsonNestsDeeperThan(TokenizerJson(NestedSequences(at_limit)), kMaxJsonDepth));
  {
    HfFolder f;
    f.Write("tokenizer.json", TokenizerJson(NestedSequences(at_limit)));
    absl::StatusOr<ModelBundle> b = f.Load();
    ASSERT_TRUE(b.ok()) << b.status();
    // The Lowercase at the bottom of the nesting is applied.
    EXPECT_EQ(b->tokenizer->Encode("A", /*add_bos=*/false),
              b->tokenizer->Encode("a", /*add_bos=*/false));
  }
  HfFolder f;
  f.Write("tokenizer.json", TokenizerJson(NestedSequences(at_limit + 1)));
  absl::StatusOr<ModelBundle> b = f.Load();
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("the limit is 64"));
}

TEST(ModelBundleTest, DeepTokenizerConfigAndConfigJsonAreErrorsToo) {
  const std::string deep = R"({"x":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  {
    HfFolder f;
    f.Write("tokenizer.json", TokenizerJson());
    f.Write("tokenizer_config.json", deep);
    absl::StatusOr<ModelBundle> b = f.Load();
    ASSERT_FALSE(b.ok());
    EXPECT_THAT(std::string(b.status().message()),
                HasSubstr(f.File("tokenizer_config.json") + ": nests"));
  }
  HfFolder f(deep);
  f.Write("tokenizer.json", TokenizerJson());
  absl::StatusOr<ModelBundle> b = f.Load();
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr(f.File("config.json") + ": nests"));
}

// Issue 43, finding 5: "chat_template": 5 started with the plain template without a word.
TEST(ModelBundleTest, ChatTemplateOfTheWrongTypeIsAnErrorNamingFileAndField) {
  for (const char* bad : {"5", "true", R"({"default": "x"})", R"(["x"])",
                          R"([{"name": "default"}])", R"([{"name": 1, "template": "x"}])"}) {
    HfFolder f;
    f.Write("tokenizer.json", TokenizerJson());
    f.Write("tokenizer_config.json", std::string(R"({"chat_template": )") + bad + "}");
    absl::StatusOr<ModelBundle> b = f.Load();
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_THAT(std::string(b.status().message()),
                HasSubstr(f.File("tokenizer_config.json") + ": chat_template"))
        << bad;
  }
  // The accepted shapes: a string, a list with a "default", null.
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {R"("{{ x }}")", "{{ x }}"},
           {R"([{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}])",
            "d"},
           {"null", ""}}) {
    HfFolder f;
    f.Write("tokenizer.json", TokenizerJson());
    f.Write("tokenizer_config.json", R"({"chat_template": )" + text + "}");
    absl::StatusOr<ModelBundle> b = f.Load();
    ASSERT_TRUE(b.ok()) << text << ": " << b.status();
    EXPECT_EQ(b->chat_template, want);
  }
}

// Issue 43, finding 5: an AWQ config over bf16 tensors loaded without a word.
TEST(ModelBundleTest, QuantizationConfigIsRefusedNamingTheMethod) {
  const ModelWeights w = MakeDummyWeights(testing::SmallArchConfig("llama"), 7);
  nlohmann::json cfg = nlohmann::json::parse(testing::HfConfigJson(w.config));
  for (const auto& [q, method] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"quant_method", "awq"}, {"bits", 4}}, "\"awq\""},
           {{{"quant_method", "gptq"}}, "\"gptq\""},
           {nlohmann::json::object(), "(none named)"}}) {
    cfg["quantization_config"] = q;
    HfFolder f(cfg.dump());
    f.Write("tokenizer.json", TokenizerJson());
    absl::StatusOr<ModelBundle> b = f.Load();
    ASSERT_FALSE(b.ok()) << q;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
    const std::string msg(b.status().message());
    EXPECT_THAT(msg, HasSubstr(f.File("config.json") + ": quantization_config.quant_method " +
                               method));
    EXPECT_THAT(msg, HasSubstr("not supported yet"));
  }
  cfg["quantization_config"] = nullptr;  // null is no quantization
  HfFolder f(cfg.dump());
  f.Write("tokenizer.json", TokenizerJson());
  EXPECT_TRUE(f.Load().ok());
}

// Issue 43, finding 5: with no --model, a models/ folder in the working directory was taken
// before the installation's own copy.
TEST(FindBundledModelTest, TheInstallationsCopyComesBeforeTheWorkingDirectorys) {
  namespace fs = std::filesystem;
  const fs::path rel = fs::path("models") / "stories260K" / "stories260K.bin";
  fs::path installed;
  for (fs::path p = fs::canonical("/proc/self/exe").parent_path();
       !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (fs::exists(p / rel)) {
      installed = p / rel;
      break;
    }
  }
  if (installed.empty()) GTEST_SKIP() << "the test binary lives outside a checkout";

  TempDir cwd;
  fs::create_directories(fs::path(cwd.path()) / rel.parent_path());
  WriteBytes((fs::path(cwd.path()) / rel).string(), "not the shipped model");
  const fs::path before = fs::current_path();
  fs::current_path(cwd.path());
  const std::string found = FindBundledModel(nullptr);
  fs::current_path(before);
  EXPECT_EQ(found, installed.string());
}

}  // namespace
}  // namespace banyan::model
