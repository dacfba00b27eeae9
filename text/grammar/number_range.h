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

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

// InvalidArgument when no integer of at most max_digits digits lies in [lo, hi]. max_digits is
// at most 18 (the bounds are int64).
absl::StatusOr<Expr> IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi,
                                  int max_digits);

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_NUMBER_RANGE_H_
