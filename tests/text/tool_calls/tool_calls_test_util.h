// Tools shared by the tool-call tests, and a check of their arguments written apart from the
// grammar engine.
#pragma once

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "text/tool_calls/tool_syntax.h"

namespace banyan::text::tool_calls {

inline std::vector<ToolSpec> TestTools() {
  using OJ = nlohmann::ordered_json;
  return {
      {"get_weather", OJ::parse(R"({"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 10},
                         "unit": {"enum": ["c", "f"]}},
          "required": ["city"]})")},
      {"add", OJ::parse(R"({"type": "object",
          "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                  "maxItems": 2}},
          "required": ["a", "b"]})")},
      {"ping", OJ::parse(R"({"type": "object", "properties": {}})")},
  };
}

// Whether `args` (JSON text) satisfies the parameters of TestTools()'s tool `name`.
inline ::testing::AssertionResult ValidTestCall(const std::string& name, const std::string& args) {
  const nlohmann::json j = nlohmann::json::parse(args, nullptr, false);
  auto fail = [&](const char* why) {
    return ::testing::AssertionFailure() << why << ": " << name << " " << args;
  };
  if (!j.is_object()) return fail("arguments are not an object");
  auto chars = [](const std::string& s) {
    int n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  if (name == "get_weather") {
    if (!j.contains("city")) return fail("city missing");
    for (const auto& [k, v] : j.items()) {
      if (k == "city" && (!v.is_string() || chars(v.get<std::string>()) > 10)) return fail("city");
      if (k == "unit" && !(v == "c" || v == "f")) return fail("unit");
      if (k != "city" && k != "unit") return fail("unknown property");
    }
  } else if (name == "add") {
    if (!j.contains("a") || !j.contains("b")) return fail("a or b missing");
    for (const auto& [k, v] : j.items()) {
      if ((k == "a" || k == "b") && !v.is_number_integer()) return fail("a/b");
      if (k == "tags") {
        if (!v.is_array() || v.size() > 2) return fail("tags");
        for (const auto& t : v) {
          if (!t.is_string() || chars(t.get<std::string>()) > 4) return fail("tag");
        }
      }
      if (k != "a" && k != "b" && k != "tags") return fail("unknown property");
    }
  } else if (name == "ping") {
    if (!j.empty()) return fail("ping takes nothing");
  } else {
    return fail("unknown tool");
  }
  return ::testing::AssertionSuccess();
}

}  // namespace banyan::text::tool_calls
