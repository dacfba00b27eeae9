// Request bodies sent with Content-Encoding gzip or deflate, inflated with a bound on the
// *decompressed* size, so a small compressed body cannot cost memory or CPU beyond the limit
// that applies to plain bodies (a 1 MB gzip bomb stops after `max_bytes` of output).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace banyan::server::http {

// Replaces *body by its decoding under `content_encoding` ("", "identity", "gzip", "x-gzip",
// "deflate"; case-insensitive). ResourceExhausted when the output would pass `max_bytes`,
// InvalidArgument for corrupt data, Unimplemented for any other encoding (or a list of them).
absl::Status DecodeBody(std::string_view content_encoding, int64_t max_bytes, std::string* body);

}  // namespace banyan::server::http
