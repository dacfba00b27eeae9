// The one door every JSON document banyan reads goes through: model files (config.json,
// tokenizer.json, tokenizer_config.json, safetensors headers and indexes, draft-head configs),
// banyand's config and tenants files, and request bodies.
//
// Contract: ParseJson refuses a text larger than `max_bytes` before reading it, and a text that
// nests arrays/objects deeper than `max_depth` before any DOM is built, so every DOM it returns
// is at most `max_depth` levels deep.
//
// Why: nlohmann's parser is iterative, but its copy, comparison, serializer and our own readers
// recurse once per level. A tokenizer.json whose "model" nested 100,000 objects (0.6 MB) crashed
// banyand at start-up in a recursive copy, and a request body nesting 80,000 arrays crashed it
// when an error message quoted it. Bounding the depth at the door keeps every later recursion
// shallow; nothing after ParseJson needs its own guard.
//
// The depth is checked by a linear scan of the raw text counting brackets outside string
// literals. For any text the parser accepts, that count is exactly the nesting depth (outside
// strings, brackets are structure); a text it miscounts is invalid and fails the parse anyway.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace banyan {

// Deepest nesting of arrays and objects accepted (the text {"a":[[1]]} nests 3 deep). The
// deepest real document seen is a tokenizer.json with nested Sequence normalizers, under 10.
inline constexpr int kMaxJsonDepth = 64;

// Largest JSON file read by default. The largest tokenizer.json in use (Gemma 3's) is 33 MB;
// a DOM costs several times its text.
inline constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;

struct JsonLimits {
  int max_depth = kMaxJsonDepth;
  size_t max_bytes = kMaxJsonFileBytes;
};

// Why a parse was refused, for callers that answer differently per reason (HTTP error codes).
enum class JsonFailure { kNone, kTooLarge, kTooDeep, kSyntax };

// Parses `text`. Errors are InvalidArgument, worded "<source>: <reason>" where the reason names
// the limit ("nests arrays/objects more than 64 levels deep (at byte 70); the limit is 64") or
// the parser's position; `source` is a file path or "request body". Never throws. `failure`,
// when given, receives the reason's kind (kNone on success).
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source,
                                         const JsonLimits& limits = {},
                                         JsonFailure* failure = nullptr);
// The same, keeping object keys in document order.
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text,
                                                        std::string_view source,
                                                        const JsonLimits& limits = {},
                                                        JsonFailure* failure = nullptr);

// The text of the regular file `path`, its size checked against `limits.max_bytes` before
// reading (a FIFO or device is refused: it would block or never end); errors name the path, a
// missing file is NotFound. For callers that parse the text themselves with ParseJson.
absl::StatusOr<std::string> ReadJsonText(const std::string& path, const JsonLimits& limits = {});

// ReadJsonText, then ParseJson with the path as the source.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path,
                                            const JsonLimits& limits = {});

// Whether `text` opens more than `max_depth` arrays/objects without closing them, counting
// brackets outside string literals (escapes understood); *offset (when given) receives the byte
// offset of the first bracket beyond the limit. Exposed for tests; use ParseJson.
bool JsonNestsDeeperThan(std::string_view text, int max_depth, size_t* offset = nullptr);

}  // namespace banyan
