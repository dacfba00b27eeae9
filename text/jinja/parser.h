// The Jinja parser: tokens -> syntax tree, with Jinja's operator precedence (lowest first):
// `x if c else y`, or, and, not, comparisons (in, not in, ==, !=, <, <=, >, >=), + -, ~,
// * / // %, **, unary - +, then postfix (.attr, [key], [a:b:c], call), filters (|f) and
// tests (is [not] t) binding to the operand before them.
// Statements: if/elif/else, for (with `if` filter, else, loop variables), set (also of a
// namespace attribute, and block set), macro, call blocks, filter blocks, break, continue, and
// transformers' generation/endgeneration markers (no-ops).
// Throws jinja::Error with the line on a syntax error, and on a filter or test that does not
// exist (as Python's Jinja does when it compiles a template: found at start-up, not at the
// first request). Nesting is bounded (kMaxNesting): nested expressions and blocks, and chains
// of operators, filters and postfixes, whose trees are as deep as they are long; neither the
// parser nor the interpreter recurses deeper than that.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace banyan::text::jinja {

inline constexpr int kMaxNesting = 200;  // nested expressions and blocks

Body Parse(const std::vector<Token>& tokens);

}  // namespace banyan::text::jinja
