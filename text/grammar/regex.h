// Regular expressions → grammar expressions: JSON Schema's `pattern`, vLLM's guided_regex.
//
// The dialect is ECMAScript's (what JSON Schema specifies for `pattern`), over Unicode code
// points: literals and escapes (\d \w \s and their complements, \t \n \r \f \v \0, \xHH, \uHHHH,
// \u{H...}, escaped punctuation), `.` (any code point but line terminators), classes with
// ranges and negation, groups `( )` and `(?: )` and `(?<name> )`, alternation, and the greedy or
// lazy quantifiers * + ? {n} {n,} {n,m} (lazy matches the same language). `^` and `$` only at
// the start and end of a top-level alternative. What is not a regular language or needs
// backtracking — backreferences, lookaround, \b — and Unicode property escapes are refused with
// the construct and its offset: never approximated. The result is an automaton: matching never
// backtracks, whatever the pattern.
#ifndef BANYAN_TEXT_GRAMMAR_REGEX_H_
#define BANYAN_TEXT_GRAMMAR_REGEX_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

enum class RegexMatch {
  kWhole,   // the whole text matches (guided_regex); ^ and $ change nothing
  kSearch,  // a match anywhere in the text (JSON Schema's `pattern`) unless anchored by ^ / $
};

enum class RegexText {
  kUtf8,        // the text as raw UTF-8
  kJsonString,  // the text inside a JSON string literal: '"', '\' and controls escaped
};

struct RegexLimits {
  int max_repeat = 1000;  // largest n or m in {n,m}
  int max_depth = 64;     // nesting of groups
  int max_length = 4096;  // bytes of pattern
};

absl::StatusOr<Expr> RegexToExpr(std::string_view pattern, RegexMatch match, RegexText text,
                                 const RegexLimits& limits = {});

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_REGEX_H_
