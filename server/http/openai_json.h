// JSON plumbing of the OpenAI HTTP front end: body parsing, typed field reading that names the
// offending field, and the one place where a Status becomes an HTTP status plus OpenAI error
// JSON {"error":{"message","type","param","code"}}.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/json_limits.h"
#include "nlohmann/json.hpp"

namespace banyan::server::http {

using Json = nlohmann::json;

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // "invalid_request_error", "requests", "server_error", ...
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

// The mapping, used for every error the front end returns:
//   InvalidArgument    -> 400 invalid_request_error (param / code from the status payloads)
//   NotFound           -> 404 invalid_request_error (code from the payload, e.g. model_not_found)
//   Unauthenticated    -> 401 invalid_request_error, code invalid_api_key
//   ResourceExhausted  -> 429 type "requests", code rate_limit_exceeded (queue full)
//   Unavailable        -> 503 server_error, code service_unavailable (draining / not ready)
//   FailedPrecondition -> 400 invalid_request_error
//   anything else      -> 500 server_error
ApiError ErrorFromStatus(const absl::Status& status);
// An error for a bare HTTP status (404 path, 405, 413, ...).
ApiError ErrorForHttpStatus(int http_status, std::string message, std::string code = "");
Json ErrorJson(const ApiError& error);

// Serialises without ever throwing: invalid UTF-8 (which should not occur) becomes U+FFFD.
// Recursive: only for values of bounded depth (what ParseBody returns, what we build).
std::string Dump(const Json& j);

// A short rendering of a client's value for an error message, never recursing and bounded (a
// few hundred bytes at most): scalars as JSON (strings cut at a character boundary, then
// "... (N bytes)"), arrays and objects as "[...] (3 elements)" / "{...} (1 member)".
std::string JsonPreview(const Json& j);

// Parses a request body: valid UTF-8 (400 naming the byte offset otherwise), nesting at most
// kMaxJsonDepth (code json_too_deep; common/json_limits.h's ParseJson, checked on the raw text
// before any DOM is built), valid JSON (400 with the parser's position), and a JSON object.
// Errors name the "request body".
absl::StatusOr<Json> ParseBody(std::string_view body);

// The limits ParseBody parses with: kMaxJsonDepth, and no size limit of its own since the
// transport refused bodies over max_body_bytes (413) before any parse.
inline constexpr JsonLimits kRequestBodyJsonLimits{
    .max_depth = kMaxJsonDepth, .max_bytes = std::numeric_limits<size_t>::max()};

// Reads optional fields of one JSON object with type checks. An absent or null field leaves the
// output untouched. The first error is kept (InvalidArgument naming the field) and later calls
// do nothing; check status() at the end. Integers accept JSON numbers with an integral value
// (16.0) like OpenAI's server does, never booleans.
class FieldReader {
 public:
  // `prefix` is prepended to field names in errors ("stream_options." ...).
  explicit FieldReader(const Json& object, std::string prefix = "");

  bool Has(const char* key) const;  // present and not null
  void Int(const char* key, int64_t* out);
  void Int(const char* key, std::optional<int64_t>* out);
  void IntRange(const char* key, int64_t lo, int64_t hi, int64_t* out);
  void Number(const char* key, double* out);
  void Float(const char* key, float* out);
  void Bool(const char* key, bool* out);
  void String(const char* key, std::string* out);
  // A string or an array of strings.
  void StringOrList(const char* key, std::vector<std::string>* out);
  void IntList(const char* key, std::vector<int32_t>* out);

  // Records an error for `key` unless one is already recorded.
  void Fail(const char* key, std::string_view message);
  const absl::Status& status() const { return status_; }
  std::string Name(const char* key) const { return prefix_ + key; }

 private:
  const Json* Get(const char* key) const;  // nullptr when absent or null
  void TypeError(const char* key, const char* want, const Json& got);

  const Json& object_;
  std::string prefix_;
  absl::Status status_;
};

// Reads a JSON array of int32 token ids; InvalidArgument naming `name` otherwise.
absl::Status ReadTokenIds(const Json& value, std::string_view name, std::vector<int32_t>* out);

// The JSON type name of a value, as users read it ("string", "integer", "array", ...).
std::string_view JsonTypeName(const Json& j);

}  // namespace banyan::server::http
