// Unicode code points as the grammar engine's front ends see them: UTF-8 decoding of a
// grammar's own text, and sets of code points (a regex class, a GBNF class) encoded as byte
// expressions that accept exactly the shortest-form UTF-8 of each member. Shared by regex.h and
// gbnf.h so that a class means the same bytes in both.
#ifndef BANYAN_TEXT_GRAMMAR_CODE_POINTS_H_
#define BANYAN_TEXT_GRAMMAR_CODE_POINTS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Inclusive ranges of code points. Normalized: sorted, disjoint and non-adjacent. Surrogates
// may be members (a complement contains them); they are dropped when encoding, since no UTF-8
// text holds them.
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

CodePointRanges NormalizeCodePoints(CodePointRanges r);
// Every code point up to kMaxCodePoint outside `r` (normalized).
CodePointRanges ComplementCodePoints(const CodePointRanges& r);

// The code point whose UTF-8 encoding starts at text[*pos], advancing *pos past it; nullopt
// (and *pos unchanged) for a malformed, overlong, surrogate or out-of-range sequence.
std::optional<uint32_t> DecodeUtf8(std::string_view text, size_t* pos);
void AppendUtf8(uint32_t cp, std::string* out);

// Appends to `alts` byte-range sequences that together accept the UTF-8 of lo..hi.
void AddUtf8Alternatives(uint32_t lo, uint32_t hi, std::vector<Expr>* alts);
// The UTF-8 of any one member of `set` (a byte set that matches nothing for an empty set).
Expr Utf8Set(const CodePointRanges& set);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_CODE_POINTS_H_
