#include "server/http/openai_json.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/common/validation.h"

namespace banyan::server::http {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string DefaultType(int http_status) {
  if (http_status == 429) return "requests";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

}  // namespace

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = StatusParam(status);
  e.code = StatusCode(status);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      if (e.code.empty()) e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      if (e.code.empty()) e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      if (e.code.empty()) e.code = "service_unavailable";
      break;
    default:
      e.http_status = 500;
      break;
  }
  e.type = DefaultType(e.http_status);
  if (e.message.empty()) e.message = absl::StatusCodeToString(status.code());
  return e;
}

ApiError ErrorForHttpStatus(int http_status, std::string message, std::string code) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = DefaultType(http_status);
  e.code = std::move(code);
  return e;
}

Json ErrorJson(const ApiError& error) {
  Json inner = {{"message", error.message}, {"type", error.type}};
  inner["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  inner["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  return Json{{"error", inner}};
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string JsonPreview(const Json& j) {
  constexpr size_t kMaxStringBytes = 48;
  if (j.is_array()) {
    return absl::StrCat("[...] (", j.size(), j.size() == 1 ? " element)" : " elements)");
  }
  if (j.is_object()) {
    return absl::StrCat("{...} (", j.size(), j.size() == 1 ? " member)" : " members)");
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s.size() <= kMaxStringBytes) return Dump(j);
    size_t cut = kMaxStringBytes;
    // Back to the start of a UTF-8 character (continuation bytes are 10xxxxxx).
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return absl::StrCat(Dump(Json(s.substr(0, cut))), "... (", s.size(), " bytes)");
  }
  return Dump(j);  // a number, boolean or null: a few bytes
}

absl::StatusOr<Json> ParseBody(std::string_view body) {
  size_t bad = 0;
  if (!IsValidUtf8(body, &bad)) {
    return InvalidParam("",
                        absl::StrCat("the request body is not valid UTF-8 (first bad byte at "
                                     "offset ",
                                     bad, ")"),
                        "invalid_utf8");
  }
  // Depth checked before any DOM: nothing later (dump, copy, compare) may recurse deeper.
  JsonFailure why = JsonFailure::kNone;
  absl::StatusOr<Json> parsed = ParseJson(body, "request body", kRequestBodyJsonLimits, &why);
  if (!parsed.ok()) {
    return InvalidParam("", std::string(parsed.status().message()),
                        why == JsonFailure::kTooDeep ? "json_too_deep" : "");
  }
  if (!parsed->is_object()) {
    return InvalidParam("", absl::StrCat("the request body must be a JSON object, got ",
                                         Sv(JsonTypeName(*parsed))));
  }
  return parsed;
}

std::string_view JsonTypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    default:
      return "value";
  }
}

FieldReader::FieldReader(const Json& object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {}

const Json* FieldReader::Get(const char* key) const {
  if (!status_.ok() || !object_.is_object()) return nullptr;
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool FieldReader::Has(const char* key) const {
  if (!object_.is_object()) return false;
  auto it = object_.find(key);
  return it != object_.end() && !it->is_null();
}

void FieldReader::Fail(const char* key, std::string_view message) {
  if (!status_.ok()) return;
  status_ = InvalidParam(Name(key), message);
}

void FieldReader::TypeError(const char* key, const char* want, const Json& got) {
  Fail(key, absl::StrCat(Name(key), " must be ", want, ", got ", Sv(JsonTypeName(got))));
}

void FieldReader::Int(const char* key, int64_t* out) {
  std::optional<int64_t> v;
  Int(key, &v);
  if (v.has_value()) *out = *v;
}

void FieldReader::Int(const char* key, std::optional<int64_t>* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Fail(key, absl::StrCat(Name(key), " is out of range"));
      return;
    }
    *out = v->get<int64_t>();
    return;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // 2^63 is exactly representable; anything at or above it does not fit.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2233720368547758e18) {
      *out = static_cast<int64_t>(d);
      return;
    }
    Fail(key, absl::StrCat(Name(key), " must be an integer, got ", d));
    return;
  }
  TypeError(key, "an integer", *v);
}

void FieldReader::IntRange(const char* key, int64_t lo, int64_t hi, int64_t* out) {
  std::optional<int64_t> v;
  Int(key, &v);
  if (!v.has_value()) return;
  if (*v < lo || *v > hi) {
    Fail(key, absl::StrCat(Name(key), " must be between ", lo, " and ", hi, ", got ", *v));
    return;
  }
  *out = *v;
}

void FieldReader::Number(const char* key, double* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_number()) {
    TypeError(key, "a number", *v);
    return;
  }
  *out = v->get<double>();
}

void FieldReader::Float(const char* key, float* out) {
  double d = *out;
  const bool had = Has(key);
  Number(key, &d);
  if (!had || !status_.ok()) return;
  if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) {
    Fail(key, absl::StrCat(Name(key), " is out of range: ", d));
    return;
  }
  *out = static_cast<float>(d);
}

void FieldReader::Bool(const char* key, bool* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_boolean()) {
    TypeError(key, "a boolean", *v);
    return;
  }
  *out = v->get<bool>();
}

void FieldReader::String(const char* key, std::string* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  if (!v->is_string()) {
    TypeError(key, "a string", *v);
    return;
  }
  *out = v->get<std::string>();
}

void FieldReader::StringOrList(const char* key, std::vector<std::string>* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  if (v->is_string()) {
    *out = {v->get<std::string>()};
    return;
  }
  if (!v->is_array()) {
    TypeError(key, "a string or an array of strings", *v);
    return;
  }
  std::vector<std::string> list;
  for (const Json& e : *v) {
    if (!e.is_string()) {
      TypeError(key, "a string or an array of strings", e);
      return;
    }
    list.push_back(e.get<std::string>());
  }
  *out = std::move(list);
}

void FieldReader::IntList(const char* key, std::vector<int32_t>* out) {
  const Json* v = Get(key);
  if (v == nullptr) return;
  absl::Status s = ReadTokenIds(*v, Name(key), out);
  if (!s.ok()) status_ = s;
}

absl::Status ReadTokenIds(const Json& value, std::string_view name, std::vector<int32_t>* out) {
  if (!value.is_array()) {
    return InvalidParam(name, absl::StrCat(Sv(name), " must be an array of token ids, got ",
                                           Sv(JsonTypeName(value))));
  }
  std::vector<int32_t> list;
  list.reserve(value.size());
  for (const Json& e : value) {
    const bool fits =
        e.is_number_integer() &&
        (e.is_number_unsigned() ? e.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
                                : e.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                                      e.get<int64_t>() <= std::numeric_limits<int32_t>::max());
    if (!fits) {
      return InvalidParam(name, absl::StrCat(Sv(name),
                                             " must be an array of token ids "
                                             "(integers), found ",
                                             Sv(JsonTypeName(e)), " ", JsonPreview(e)));
    }
    list.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  *out = std::move(list);
  return absl::OkStatus();
}

}  // namespace banyan::server::http
