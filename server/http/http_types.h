// The HTTP front end's own request and response types, independent of the wire library: the
// handlers (endpoints.h, generation.h) read an HttpRequest and fill an HttpResponse; the
// connection code (http_connection.h) moves them to and from the socket.
//
// Header values are the raw bytes the client sent: nothing is percent-decoded, trimmed or
// folded, so checks such as the API key's see exactly what arrived.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace banyan::server::http {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality (header names, media types, schemes) on std::string_view.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  HeaderList headers;  // in arrival order, raw
  std::string body;    // after Content-Encoding was undone

  // The first header named `name` (case-insensitive); "" when absent.
  std::string_view Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;  // besides Content-Type and Content-Length
  std::string error_code;  // an error's OpenAI "code" (SendError), for the refusal counters

  // Replaces a header of the same name (case-insensitive) or adds it.
  void SetHeader(std::string_view name, std::string value);
  std::string_view Header(std::string_view name) const;
};

}  // namespace banyan::server::http
