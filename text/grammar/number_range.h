// Integers within bounds as grammar expressions: JSON Schema's minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on integers (zod 4 sends ±(2^53 - 1) on every integer).
//
// The expression accepts exactly the decimal integers v with lo <= v <= hi, written as JSON
// writes them: no leading zeros, no "-0", at most `max_digits` digits (the grammar's bound on
// how long a model may write digits). A missing bound is the largest such number.
#ifndef BANYAN_TEXT_GRAMMAR_NUMBER_RANGE_H_
#define BANYAN_TEXT_GRAMMAR_NUMBER_RANGE_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

// InvalidArgument when no integer of at most max_digits digits lies in [lo, hi]. max_digits is
// at most 18 (the bounds are int64).
absl::StatusOr<Expr> IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                  int max_digits);

// JSON Schema's multipleOf k on integers: a DFA that accepts the decimal integers divisible by
// k, written -?(0|[1-9][0-9]*) with any number of digits (intersect it with the grammar's
// integer expression for the digit bound and the bounds; "-0" is left to that expression). Its states are the remainders mod k
// plus three (start, after '-', after a leading '0'): k is at most kMaxMultipleOf.
inline constexpr int64_t kMaxMultipleOf = 1000;
ByteDfa MultiplesDfa(int64_t k);

// A decimal multipleOf k = m / 10^scale (m >= 1, scale >= 1, m not divisible by 10), in exact
// decimal arithmetic: a DFA that accepts -?(0|[1-9][0-9]*)(.[0-9]{1,scale})? whose value k
// divides, i.e. whose digits, the fraction padded to `scale` digits, form an integer that m
// divides (no floating point anywhere). States: the remainder mod m of the digits read so far,
// per position (integer part, just after '.', fraction digit 1..scale), plus start, '-' and a
// leading '0'. Intersect it with the grammar's number expression for the digit bound, the
// bounds and "-0". m is at most kMaxMultipleOf and scale at most kMaxMultipleOfScale.
inline constexpr int kMaxMultipleOfScale = 6;
ByteDfa DecimalMultiplesDfa(int64_t m, int scale);

// The exact decimal m / 10^scale that `text` (a JSON number as written: digits, an optional
// fraction, an optional exponent) stands for, reduced (m not divisible by 10 when scale > 0).
// False when it is not a positive number of that form or does not fit int64.
bool ExactDecimal(std::string_view text, int64_t* m, int* scale);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_NUMBER_RANGE_H_
