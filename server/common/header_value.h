// Header values as both front ends read them (HTTP headers, gRPC metadata carrying the same
// Authorization value).
#pragma once

#include <string_view>

namespace banyan::server {

// `value` without the spaces and tabs around it: HTTP's optional whitespace (RFC 9110 section
// 5.5), which is not part of a field value. Used for every header value the server reads.
inline std::string_view StripOptionalWhitespace(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

}  // namespace banyan::server
