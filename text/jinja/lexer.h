// The Jinja lexer: template source -> tokens.
//
// Whitespace control as transformers configures Jinja for chat templates (trim_blocks and
// lstrip_blocks on, keep_trailing_newline off):
//  - one trailing newline of the source is dropped;
//  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it;
//  - lstrip_blocks: spaces and tabs from the start of a line up to `{%` or `{#` are dropped;
//  - trim_blocks: the first newline after `%}` or `#}` is dropped.
// Comments produce no tokens. Throws jinja::Error (with the line) on malformed input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace banyan::text::jinja {

enum class TokenType {
  kText,        // literal template text
  kExprBegin,   // {{
  kExprEnd,     // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifiers and keywords
  kString,      // a string literal (text holds the unescaped value)
  kInt,
  kFloat,
  kOp,          // punctuation and operators: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEnd,         // end of the source
};

struct Token {
  TokenType type;
  std::string text;
  int line;  // 1-based
};

std::vector<Token> Lex(std::string_view source);

}  // namespace banyan::text::jinja
