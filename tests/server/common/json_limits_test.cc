// Bounded JSON: nesting limits at the door (http::ParseBody over common/json_limits.h) and bounded
// renderings of client values in error messages (http::JsonPreview); the prompt size limit
// checked before tokenizing (CheckPromptBytes).
#include <string>

#include "gtest/gtest.h"
#include "server/http/openai_json.h"
#include "server/common/server_context.h"
#include "server/common/validation.h"

namespace banyan::server {
namespace {

using http::Json;

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// Issue 14, finding 1: this body crashed banyand (SIGSEGV in the recursive serializer, called to
// quote the bad value in the error message).
TEST(ParseBodyDepthTest, DeepNestingIsA400BeforeAnyDom) {
  const std::string body = "{\"prompt\":[1," + Nested(80000, "") + "]}";
  absl::StatusOr<Json> j = http::ParseBody(body);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(j.status().message()).find("nest"), std::string::npos) << j.status();
  EXPECT_NE(std::string(j.status().message()).find("request body"), std::string::npos)
      << j.status();
  EXPECT_EQ(http::ErrorFromStatus(j.status()).http_status, 400);
  EXPECT_EQ(http::ErrorFromStatus(j.status()).code, "json_too_deep");

  // At the limit it parses (the object is level 1).
  EXPECT_TRUE(http::ParseBody("{\"a\":" + Nested(kMaxJsonDepth - 1) + "}").ok());
  EXPECT_FALSE(http::ParseBody("{\"a\":" + Nested(kMaxJsonDepth) + "}").ok());
}

// Values built by code (not through ParseBody) may be deep: quoting one must not recurse.
TEST(JsonPreviewTest, QuotingAClientValueIsBoundedAndNeverRecurses) {
  Json deep = Json::array();
  for (int i = 0; i < 200000; ++i) deep = Json::array({std::move(deep)});
  Json prompt = Json::array({1, std::move(deep)});
  std::vector<int32_t> ids;
  absl::Status s = http::ReadTokenIds(prompt, "prompt", &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(StatusParam(s), "prompt");
  EXPECT_LT(s.message().size(), 200u) << s.message();

  // A long string, a big object: a short rendering that says what it was.
  Json big = Json::array({1, std::string(1 << 20, 'x')});
  s = http::ReadTokenIds(big, "prompt", &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_NE(std::string(s.message()).find("string"), std::string::npos) << s.message();

  EXPECT_EQ(http::JsonPreview(Json(12)), "12");
  EXPECT_EQ(http::JsonPreview(Json(true)), "true");
  EXPECT_EQ(http::JsonPreview(Json("ab\"c")), "\"ab\\\"c\"");
  EXPECT_EQ(http::JsonPreview(Json::array({1, 2, 3})), "[...] (3 elements)");
  EXPECT_EQ(http::JsonPreview(Json::object({{"a", 1}})), "{...} (1 member)");
  // Truncated on a UTF-8 character boundary, never inside a character.
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xE2\x82\xAC";
  const std::string p = http::JsonPreview(Json(euros));
  EXPECT_LT(p.size(), 80u);
  EXPECT_TRUE(IsValidUtf8(p)) << p;
}

TEST(CheckPromptBytesTest, LimitBeforeTokenizing) {
  ServerOptions o;
  o.max_prompt_bytes = 100;
  EXPECT_TRUE(CheckPromptBytes(std::string(100, 'a'), o).ok());
  absl::Status s = CheckPromptBytes(std::string(101, 'a'), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusParam(s), "prompt");
  EXPECT_NE(std::string(s.message()).find("100"), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("101"), std::string::npos) << s;
  // The default is consistent with the body limit.
  ServerOptions d;
  EXPECT_GT(d.max_prompt_bytes, 0);
  EXPECT_LE(d.max_prompt_bytes, d.max_body_bytes);
}

}  // namespace
}  // namespace banyan::server
