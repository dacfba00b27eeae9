#include "server/http/body_decoding.h"

#include <zlib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/common/header_value.h"
#include "server/http/http_types.h"

namespace banyan::server::http {
namespace {

// window_bits: 15 + 32 detects a zlib or gzip header; -15 is a raw deflate stream.
absl::Status Inflate(int window_bits, int64_t max_bytes, const std::string& in, std::string* out) {
  z_stream zs{};
  if (inflateInit2(&zs, window_bits) != Z_OK) return absl::InternalError("zlib: inflateInit2");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  char buf[16384];
  int rc = Z_OK;
  absl::Status status;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      status = absl::InvalidArgumentError(
          absl::StrCat("the request body is not valid compressed data (zlib: ",
                       zs.msg != nullptr ? zs.msg : "truncated", ")"));
      break;
    }
    const size_t produced = sizeof(buf) - zs.avail_out;
    if (static_cast<int64_t>(out->size() + produced) > max_bytes) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("The decompressed request body is larger than this server's limit of ",
                       max_bytes, " bytes."));
      break;
    }
    out->append(buf, produced);
    if (rc == Z_OK && produced == 0 && zs.avail_in == 0) {
      status = absl::InvalidArgumentError("the compressed request body is truncated");
      break;
    }
  }
  inflateEnd(&zs);
  return status;
}

}  // namespace

absl::Status DecodeBody(std::string_view content_encoding, int64_t max_bytes, std::string* body) {
  const std::string_view enc = StripOptionalWhitespace(content_encoding);
  if (enc.empty() || EqualsIgnoreCase(enc, "identity")) return absl::OkStatus();
  int window_bits = 0;
  if (EqualsIgnoreCase(enc, "gzip") || EqualsIgnoreCase(enc, "x-gzip")) {
    window_bits = 15 + 16;
  } else if (EqualsIgnoreCase(enc, "deflate")) {
    // RFC 9110's deflate is the zlib format; some clients send raw deflate. Try both.
    window_bits = 15 + 32;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "Content-Encoding '", std::string(enc.substr(0, 64)),
        "' is not supported; send the body as identity, gzip or deflate"));
  }
  std::string out;
  absl::Status s = Inflate(window_bits, max_bytes, *body, &out);
  if (!s.ok() && window_bits == 15 + 32 && absl::IsInvalidArgument(s)) {
    out.clear();
    s = Inflate(-15, max_bytes, *body, &out);
  }
  if (!s.ok()) return s;
  *body = std::move(out);
  return absl::OkStatus();
}

}  // namespace banyan::server::http
