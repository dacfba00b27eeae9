// The nesting limit of every JSON text the daemon reads (request bodies, the config file, the
// tenants file), checked by a linear scan of the raw text before any parser builds a DOM.
//
// Why: nlohmann's parser is iterative, but its serializer, copy, comparison and our own
// walkers recurse once per level, so a small body nesting 80,000 arrays overflowed the stack
// when an error message quoted it. Bounding the depth at the door keeps every later recursion
// shallow; values quoted in messages are rendered bounded as well (http::JsonPreview).
#pragma once

#include <string_view>

namespace banyan::server {

// Deepest nesting of arrays and objects accepted (the body {"a":[[1]]} nests 3 deep).
inline constexpr int kMaxJsonDepth = 64;

// Whether `text` opens more than `max_depth` arrays/objects without closing them, counting
// brackets outside string literals (escapes inside strings understood). It does not validate
// the JSON: for valid JSON the count is the nesting depth; invalid JSON fails the parser later.
inline bool JsonNestsDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return true;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

}  // namespace banyan::server
