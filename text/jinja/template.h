// A Jinja template interpreter for chat templates: the `chat_template` of a model's
// tokenizer_config.json or GGUF `tokenizer.chat_template`, rendered as transformers'
// apply_chat_template does (Jinja with trim_blocks and lstrip_blocks).
//
// Written here rather than taken from a library: no Debian package provides a C++ Jinja, and the
// subset chat templates use is small. Parts: lexer.h (text -> tokens, whitespace control),
// parser.h (tokens -> ast.h), interpreter.h (scopes, statements, operators), builtins.h and
// string_methods.h (filters, tests, globals, Python str/dict/list methods), value.h (values).
//
// Supported: {{ }}, {% %}, {# #}, `-` whitespace control; if/elif/else, for (loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem, cycle; `else`; an `if`
// filter; tuple unpacking), break/continue, set (also `set ns.attr`, tuples, and block set),
// namespace(), macros (defaults, keyword arguments, caller), call and filter blocks; literals
// (strings, numbers, lists, tuples, dicts, true/false/none), arithmetic, `~` and `+`
// concatenation, comparisons, `in`, and/or/not, `x if c else y`, attribute and item access,
// slicing. Semantics are Python's (what transformers renders with): see value.h.
// Not supported: template inheritance and includes, {% raw %}, recursive loops, autoescape,
// list/dict methods that mutate (transformers' sandbox forbids them too).
//
// Errors never crash: a syntax error fails Parse, a runtime error (undefined callable, bad
// operands, raise_exception(...), a limit reached) fails Render, each with the template line.
// Limits bound the output size, nested calls and evaluation steps.
// A Template is immutable after Parse and may render from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/jinja/interpreter.h"

namespace banyan::text::jinja {

struct RenderOptions {
  Limits limits;
  int64_t now_unix_s = -1;  // what strftime_now() formats (local time); < 0: the clock
};

class Template {
 public:
  // InvalidArgument "line N: ..." on a syntax error, a filter or test that does not exist, or
  // text that is not UTF-8.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with the keys of `context` (a JSON object) as variables. InvalidArgument
  // "line N: ..." on a runtime error; raise_exception(msg) gives "line N: msg".
  // ordered_json keeps the context's key order (what tojson and dict loops see).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context,
                                     const RenderOptions& options = {}) const;

 private:
  struct Program;
  template <typename J>
  absl::StatusOr<std::string> RenderAny(const J& context, const RenderOptions& options) const;
  explicit Template(std::shared_ptr<const Program> p) : program_(std::move(p)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace banyan::text::jinja
