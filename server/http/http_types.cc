#include "server/http/http_types.h"

#include "absl/strings/match.h"

namespace banyan::server::http {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  // Debian's abseil has its own string_view type, not std::string_view.
  return absl::EqualsIgnoreCase(absl::string_view(a.data(), a.size()),
                                absl::string_view(b.data(), b.size()));
}

namespace {

const std::string* Find(const HeaderList& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return &v;
  }
  return nullptr;
}

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  const std::string* v = Find(headers, name);
  return v == nullptr ? std::string_view() : std::string_view(*v);
}

bool HttpRequest::HasHeader(std::string_view name) const { return Find(headers, name) != nullptr; }

void HttpResponse::SetHeader(std::string_view name, std::string value) {
  for (auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::move(value));
}

std::string_view HttpResponse::Header(std::string_view name) const {
  const std::string* v = Find(headers, name);
  return v == nullptr ? std::string_view() : std::string_view(*v);
}

}  // namespace banyan::server::http
