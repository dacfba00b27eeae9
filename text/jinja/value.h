// Values of the Jinja interpreter (text/jinja/template.h has the module's contract).
//
// A Value is what Python's Jinja would hold: undefined, None, bool, int (64-bit), float, str,
// list, dict, or a callable (macros, globals such as namespace(), bound methods). Lists, dicts
// and callables are shared by reference, as in Python: `{% set ns.x = 1 %}` changes the
// namespace every holder of it sees. Dict keys are strings only (chat templates use no other),
// and dicts keep their insertion order, as Python's do.
//
// Semantics follow Python (what transformers renders with), not JavaScript: equality of lists
// and dicts is by value, str() of None is "None", of True is "True", of 1.0 is "1.0".
// Strings are UTF-8; length, indexing and slicing count code points. range() is a value of its
// own, as in Python: loops walk it without making its list.
//
// Depth: a list, dict or bound method is one level deeper than the deepest value it holds, and
// no value is deeper than kMaxValueDepth, so printing, comparing and freeing values never
// recurse deeper than that. Namespaces are the only values that change after they are made:
// they count as kNamespaceDepth deep and their attributes must be shallower, so a namespace can
// hold no namespace, and no value can hold itself (no reference cycle, no leak).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace banyan::text::jinja {

// A template error: what went wrong and on which line of the template (0: unknown). Thrown
// inside the interpreter only; Template turns it into an absl::Status.
class Error : public std::runtime_error {
 public:
  Error(std::string message, int line = 0) : std::runtime_error(std::move(message)), line_(line) {}
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  int line_;
};

class Value;
using List = std::vector<Value>;

inline constexpr int kMaxValueDepth = 512;
inline constexpr int kNamespaceDepth = kMaxValueDepth / 2;
// What serialization limits default to: none.
inline constexpr size_t kNoSizeLimit = SIZE_MAX;

// range(start, stop, step): step != 0, and size() fits int64_t.
struct Range {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;

  int64_t size() const;
  int64_t At(int64_t i) const { return start + i * step; }  // 0 <= i < size()
  bool Has(int64_t x) const;
};

// An insertion-ordered string-keyed map (linear lookup: template dicts are small).
class Dict {
 public:
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  void Set(std::string key, Value value);
  void Reserve(size_t n);
  bool Erase(std::string_view key);
  // Out of line: Value is incomplete here, and clang instantiates the vector's members at once.
  size_t size() const;
  bool empty() const;
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;

  // The argument at `pos` or named `name`; nullptr when absent.
  const Value* Get(size_t pos, std::string_view name) const;
};

class Interpreter;
using Function = std::function<Value(Interpreter&, CallArgs&)>;

class Value {
 public:
  enum class Kind {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction, kRange
  };

  Value() = default;  // undefined
  static Value None();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  // Lists and dicts throw Error when they would be deeper than kMaxValueDepth.
  Value(List list);
  Value(Dict dict);
  Value(Range range);
  // `depth`: the depth of the deepest value `fn` holds (a bound method's object), 0 for none.
  static Value Callable(std::string name, Function fn, int depth = 0);
  // The namespace() object: a dict that `set ns.attr = ...` may change (SetAttr).
  static Value Namespace(Dict dict);
  // ns.name = value for a namespace; Error when `value` is or holds a namespace.
  void SetAttr(std::string name, Value value) const;

  // JSON objects keep their key order with ordered_json (nlohmann::json sorts the keys).
  // Error when deeper than kMaxValueDepth.
  static Value FromJson(const nlohmann::json& j);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kFunction; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_range() const { return kind_ == Kind::kRange; }
  int depth() const { return depth_; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return i_; }
  double float_value() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  List& list() const { return *static_cast<List*>(p_.get()); }
  Dict& dict() const { return *static_cast<Dict*>(p_.get()); }
  const Range& range() const { return *static_cast<const Range*>(p_.get()); }
  const std::string& function_name() const { return fn().first; }
  const Function& function() const { return fn().second; }

  bool Truthy() const;
  // The serializations throw Error ("the rendered text would exceed N bytes") rather than
  // build more than `max_bytes`.
  // Python's str(): what {{ value }} prints ("" for undefined).
  std::string ToString(size_t max_bytes = kNoSizeLimit) const;
  // Python's repr(): strings quoted (what str() of a list shows for its items).
  std::string Repr(size_t max_bytes = kNoSizeLimit) const;
  // Repr() for error messages: the type name instead when it is nested or long.
  std::string ShortRepr() const;
  // JSON as transformers' tojson writes it (json.dumps with ensure_ascii=False): ", " and ": "
  // separators, or "," and ": " with newlines when indent > 0.
  std::string ToJson(int indent = 0, size_t max_bytes = kNoSizeLimit) const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // Python's type name, for messages.
  std::string_view TypeName() const;

 private:
  using Fn = std::pair<std::string, Function>;
  const Fn& fn() const { return *static_cast<const Fn*>(p_.get()); }

  // 32 bytes: lists cost that much an item.
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  uint16_t depth_ = 0;
  union {
    int64_t i_ = 0;
    double d_;
  };
  // The string, List, Dict, Range or Fn of the kinds that have one (by kind_), shared.
  std::shared_ptr<void> p_;
};

// UTF-8 helpers: strings index by code point, as Python's do.
size_t Utf8Length(std::string_view s);
// The byte length of the code point starting at s[at] (at < s.size()).
size_t Utf8Next(std::string_view s, size_t at);
// The byte offset of the code point before the one at `at` (0 < at <= s.size()).
size_t Utf8Prev(std::string_view s, size_t at);
// The byte offset of code point `i` (0 <= i; s.size() when i is past the end).
size_t Utf8Offset(std::string_view s, size_t i);
// The byte offset of the first bad byte in `s`; npos when it is all valid UTF-8.
size_t Utf8Invalid(std::string_view s);

}  // namespace banyan::text::jinja
