// common/json_limits.h: the depth and size limits every JSON document passes before any DOM.
#include "common/json_limits.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace banyan {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(JsonNestsDeeperThanTest, CountsBracketsOutsideStrings) {
  EXPECT_FALSE(JsonNestsDeeperThan("{}", 1));
  EXPECT_TRUE(JsonNestsDeeperThan("{\"a\":[]}", 1));
  EXPECT_FALSE(JsonNestsDeeperThan("{\"a\":[]}", 2));
  EXPECT_FALSE(JsonNestsDeeperThan("[1,[2],[3],{\"a\":[4]}]", 3));
  EXPECT_TRUE(JsonNestsDeeperThan("[1,[2],[3],{\"a\":[[4]]}]", 3));
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"s":"[[[[[[[[{{{{"})", 1));
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"s":"\"[[[[[[[[\\"})", 1));
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"s":"\\","a":[)", 1));  // the string ends at its quote
  EXPECT_FALSE(JsonNestsDeeperThan(Nested(kMaxJsonDepth), kMaxJsonDepth));
  size_t at = 0;
  EXPECT_TRUE(JsonNestsDeeperThan(Nested(kMaxJsonDepth + 1), kMaxJsonDepth, &at));
  EXPECT_EQ(at, static_cast<size_t>(kMaxJsonDepth));
}

TEST(ParseJsonTest, DepthAtTheLimitParsesOneMoreIsRefusedNamingSourceAndLimit) {
  absl::StatusOr<nlohmann::json> ok = ParseJson(Nested(kMaxJsonDepth), "a.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->is_array());

  JsonFailure why = JsonFailure::kNone;
  absl::StatusOr<nlohmann::json> deep = ParseJson(Nested(kMaxJsonDepth + 1), "a.json", {}, &why);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(why, JsonFailure::kTooDeep);
  EXPECT_THAT(Message(deep.status()), HasSubstr("a.json: nests arrays/objects more than 64"));
  EXPECT_THAT(Message(deep.status()), HasSubstr("the limit is 64"));

  // Objects count like arrays; a caller's own depth applies.
  EXPECT_TRUE(ParseJson(R"({"a":{"b":1}})", "x", JsonLimits{.max_depth = 2}).ok());
  EXPECT_FALSE(ParseJson(R"({"a":{"b":{}}})", "x", JsonLimits{.max_depth = 2}).ok());
}

// The shape that crashed banyand: 100,000 nested objects (0.6 MB) under one key, refused
// without building the DOM, so without recursing.
TEST(ParseJsonTest, HundredThousandNestedObjectsAreAnErrorNotACrash) {
  std::string text = "{\"model\":";
  for (int i = 0; i < 100000; ++i) text += "{\"a\":";
  text += "1";
  text += std::string(100000, '}');
  text += "}";
  absl::StatusOr<nlohmann::ordered_json> j = ParseOrderedJson(text, "tokenizer.json");
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(Message(j.status()), HasSubstr("tokenizer.json: nests"));
  EXPECT_THAT(Message(j.status()), HasSubstr("at byte 324"));  // the 65th "{": 9 + 5 * 63
}

TEST(ParseJsonTest, SizeIsCheckedFirst) {
  JsonFailure why = JsonFailure::kNone;
  absl::StatusOr<nlohmann::json> big =
      ParseJson(std::string(101, ' ') + "1", "big.json", JsonLimits{.max_bytes = 100}, &why);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(why, JsonFailure::kTooLarge);
  EXPECT_THAT(Message(big.status()), HasSubstr("big.json: 102 bytes"));
  EXPECT_THAT(Message(big.status()), HasSubstr("limit of 100 bytes"));
  EXPECT_TRUE(ParseJson(std::string(99, ' ') + "1", "big.json", JsonLimits{.max_bytes = 100}).ok());
}

TEST(ParseJsonTest, SyntaxErrorsNameTheSourceAndPositionBounded) {
  JsonFailure why = JsonFailure::kNone;
  absl::StatusOr<nlohmann::json> bad = ParseJson("{\"a\": ", "request body", {}, &why);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(why, JsonFailure::kSyntax);
  EXPECT_THAT(Message(bad.status()), HasSubstr("request body: not valid JSON: parse error at"));
  EXPECT_THAT(Message(bad.status()), ::testing::Not(HasSubstr("[json.exception")));
  // The parser quotes what it last read: a long bad token gives a short message of ASCII.
  const std::string long_bad = "[\"" + std::string(100000, 'x') + "\x01\"]";
  bad = ParseJson(long_bad, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_LT(bad.status().message().size(), 300u) << bad.status();
  for (const char c : bad.status().message()) EXPECT_TRUE(c >= 0x20 && c < 0x7F);
  // Trailing garbage, comments and invalid UTF-8 are syntax errors, not limits.
  EXPECT_FALSE(ParseJson("{} {}", "x").ok());
  EXPECT_FALSE(ParseJson("[1] // c", "x").ok());
  EXPECT_FALSE(ParseJson("[\"\xff\"]", "x").ok());
}

class ReadJsonFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("banyan_json_limits_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(ReadJsonFileTest, LimitsApplyToFilesAndErrorsNameThePath) {
  const std::string good = Write("good.json", R"({"a": [1, 2]})");
  absl::StatusOr<nlohmann::json> j = ReadJsonFile(good);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][1], 2);

  const std::string deep = Write("deep.json", Nested(100000));
  j = ReadJsonFile(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(Message(j.status()), HasSubstr(deep + ": nests"));

  // Too large: refused from the file's size, before reading it.
  j = ReadJsonFile(good, JsonLimits{.max_bytes = 4});
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(Message(j.status()),
              HasSubstr(good + ": 13 bytes of JSON, more than the limit of 4"));

  j = ReadJsonFile((dir_ / "missing.json").string());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(j.status()), HasSubstr("missing.json"));
  // A folder (or a FIFO) is not read.
  j = ReadJsonFile(dir_.string());
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(Message(j.status()), HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace banyan
