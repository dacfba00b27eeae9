#include "common/param_status.h"

#include "absl/strings/cord.h"

namespace banyan {
namespace {

// Payload keys (type URLs) of the field name and the error code.
constexpr char kParamUrl[] = "type.banyan.dev/param";
constexpr char kCodeUrl[] = "type.banyan.dev/code";

std::string Payload(const absl::Status& status, const char* url) {
  auto p = status.GetPayload(url);  // absl::optional: not std::optional in Debian's abseil
  return p.has_value() ? std::string(*p) : std::string();
}

}  // namespace

absl::Status InvalidParam(std::string_view param, std::string_view message, std::string_view code) {
  absl::Status s = absl::InvalidArgumentError(absl::string_view(message.data(), message.size()));
  SetStatusParam(&s, param);
  SetStatusCode(&s, code);
  return s;
}

void SetStatusParam(absl::Status* status, std::string_view param) {
  if (status->ok() || param.empty()) return;
  status->SetPayload(kParamUrl, absl::Cord(absl::string_view(param.data(), param.size())));
}

void SetStatusCode(absl::Status* status, std::string_view code) {
  if (status->ok() || code.empty()) return;
  status->SetPayload(kCodeUrl, absl::Cord(absl::string_view(code.data(), code.size())));
}

std::string StatusParam(const absl::Status& status) { return Payload(status, kParamUrl); }
std::string StatusCode(const absl::Status& status) { return Payload(status, kCodeUrl); }

}  // namespace banyan
