// GBNF → Grammar: llama.cpp's grammar format (its server's `grammar`, vLLM's `guided_grammar`).
//
// The dialect is llama.cpp's, over Unicode code points:
//   - rules `name ::= body`, names of ASCII letters, digits and '-'; `root` is the start rule;
//     a rule defined twice is refused (llama.cpp keeps the last, silently);
//   - a body is alternatives `|` of sequences of items: string literals "...", character
//     classes [...] and [^...] with ranges, `.` (any code point), rule names and groups `( )`,
//     each optionally followed by `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`;
//   - escapes in literals and classes: \n \t \r \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH (code
//     points, not bytes: "\xe9" is é, two bytes of UTF-8); any other escape is refused;
//   - `#` starts a comment to the end of the line; a newline ends a rule, except inside a group,
//     right after `::=` and right after `|`.
// The output is the shortest-form UTF-8 of the code points the grammar accepts (code_points.h).
// What llama.cpp has and is not supported here (token references `<...>`) is refused.
//
// Errors are InvalidArgument and name the line and column (1-based; columns count code points)
// of the construct: a syntax error, an unterminated literal, class or group, a bad escape, an
// undefined rule (at its first use), a rule defined twice; and an empty grammar, no `root`, a
// text or a repetition over GbnfLimits. Left recursion is refused when the grammar compiles
// (automaton.h), naming the rule, as are grammars over CompileLimits.
//
// Rules that do not recurse are inlined into their users (automaton.h: most matching is then
// plain DFA steps), unless large; only the rules reachable from `root` are kept.
#ifndef BANYAN_TEXT_GRAMMAR_GBNF_H_
#define BANYAN_TEXT_GRAMMAR_GBNF_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "text/grammar/grammar.h"

namespace banyan::text::grammar {

struct GbnfLimits {
  int max_length = 64 * 1024;  // bytes of grammar text
  int max_rules = 1024;        // rules defined
  int max_repeat = 2000;       // largest m or n in {m,n} (llama.cpp's own bound)
  int max_depth = 64;          // nesting of groups
};

absl::StatusOr<Grammar> GbnfToGrammar(std::string_view text, const GbnfLimits& limits = {});

}  // namespace banyan::text::grammar

#endif  // BANYAN_TEXT_GRAMMAR_GBNF_H_
