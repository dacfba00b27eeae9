// Jinja's built-in filters, tests, global functions, and the Python methods of str, list and
// dict that chat templates call. Unknown names are errors naming them.
//
// Filters: abs, attr, capitalize, count, d/default, dictsort, e/escape, first, float, indent,
//   int, items, join, last, length, list, lower, map, max, min, reject, rejectattr, replace,
//   reverse, round, safe, select, selectattr, sort, string, sum, title, tojson, trim, unique,
//   upper, wordcount.
// Tests: boolean, callable, defined, divisibleby, eq/equalto/==, even, false, float, ge/>=,
//   gt/>, in, integer, iterable, le/<=, lower, lt/<, mapping, ne/!=, none, number, odd, sameas,
//   sequence, string, true, undefined, upper.
// Globals: namespace, range, dict, raise_exception, strftime_now.
// Methods: str: strip lstrip rstrip split rsplit splitlines startswith endswith upper lower title
//   capitalize replace find rfind count format join isdigit isalpha isspace;
//   list: append extend pop index count insert; dict: items keys values get update pop.
// Strings change case for ASCII letters only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace banyan::text::jinja {

// Whether a filter / test of this name exists (Parse refuses templates that use others).
bool IsFilter(std::string_view name);
bool IsTest(std::string_view name);

Value ApplyFilter(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args);
bool ApplyTest(Interpreter& in, std::string_view name, const Value& operand, CallArgs& args);
// obj.name as a bound method; nullopt when the value's type has no such method.
std::optional<Value> BindMethod(const Value& obj, std::string_view name);
// The globals every template sees. `now_unix_s` (< 0: the clock) is what strftime_now formats.
void AddGlobals(Dict* globals, int64_t now_unix_s);

}  // namespace banyan::text::jinja
