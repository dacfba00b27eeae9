// Python's str methods as chat templates call them (message.content.strip(), .split('</think>'),
// .startswith(...), '{}'.format(...)). Case changes touch ASCII letters only; whitespace is
// ASCII whitespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/interpreter.h"
#include "text/jinja/value.h"

namespace banyan::text::jinja {

std::string AsciiLower(std::string_view s);
std::string AsciiUpper(std::string_view s);
// str.strip / lstrip / rstrip: `chars` null strips whitespace.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split: `sep` null splits on runs of whitespace and drops empty parts; maxsplit < 0: all.
// Error past `max_parts` parts, before they are made.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 size_t max_parts);
// len(s.split()), with no list.
int64_t PyWordCount(std::string_view s);

bool IsStringMethod(std::string_view name);
// s.name(args); nullopt when str has no such method.
std::optional<Value> CallStringMethod(Interpreter& in, const std::string& s,
                                      std::string_view name, CallArgs& args);

}  // namespace banyan::text::jinja
