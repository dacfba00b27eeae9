// JSON Schema's string formats as grammar expressions: each is the quoted JSON string of a
// value the format's check (ajv-formats, strict and fast modes alike) accepts.
//
//   date       YYYY-MM-DD, days within the month (February up to the 28th: no leap years)
//   time       hh:mm:ss with up to six fraction digits and Z or an offset ±hh:mm
//   date-time  date T time
//   uuid       8-4-4-4-12 hex digits
//   ipv4       four dotted decimal octets 0..255 without leading zeros
//   email      dot-separated atoms of letters, digits and !#$%&'*+/=?^_`{|}~- before the '@';
//              after it at least two dot-separated labels of letters, digits and inner hyphens,
//              each at most 63 long (no quoted local parts, no IP literals)
//
// Any other format is InvalidArgument naming it and `path`.
#ifndef BANYAN_TEXT_GRAMMAR_STRING_FORMAT_H_
#define BANYAN_TEXT_GRAMMAR_STRING_FORMAT_H_

#include <string>

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

absl::StatusOr<Expr> StringFormatExpr(const std::string& format, const std::string& path);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_STRING_FORMAT_H_
