// Values of the Jinja interpreter (server/jinja/template.h has the module's contract).
//
// A Value is what Python's Jinja would hold: undefined, None, bool, int (64-bit), float, str,
// list, dict, or a callable (macros, globals such as namespace(), bound methods). Lists, dicts
// and callables are shared by reference, as in Python: `{% set ns.x = 1 %}` changes the
// namespace every holder of it sees. Dict keys are strings only (chat templates use no other),
// and dicts keep their insertion order, as Python's do.
//
// Semantics follow Python (what transformers renders with), not JavaScript: equality of lists
// and dicts is by value, str() of None is "None", of True is "True", of 1.0 is "1.0".
// Strings are UTF-8; length, indexing and slicing count code points.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace banyan::jinja {

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

// An insertion-ordered string-keyed map (linear lookup: template dicts are small).
class Dict {
 public:
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  void Set(std::string key, Value value);
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
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value None();
  Value(bool b);
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List list);
  Value(Dict dict);
  static Value Callable(std::string name, Function fn);
  // The namespace() object: a dict that `set ns.attr = ...` may change.
  static Value Namespace(Dict dict);

  // JSON objects keep their key order with ordered_json (nlohmann::json sorts the keys).
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

  bool bool_value() const { return b_; }
  int64_t int_value() const { return i_; }
  double float_value() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& str() const { return *s_; }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const std::string& function_name() const { return fn_->first; }
  const Function& function() const { return fn_->second; }

  bool Truthy() const;
  // Python's str(): what {{ value }} prints ("" for undefined).
  std::string ToString() const;
  // Python's repr(): strings quoted (what str() of a list shows for its items).
  std::string Repr() const;
  // JSON as transformers' tojson writes it (json.dumps with ensure_ascii=False): ", " and ": "
  // separators, or "," and ": " with newlines when indent > 0.
  std::string ToJson(int indent = 0) const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // Python's type name, for messages.
  std::string_view TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<std::pair<std::string, Function>> fn_;
};

// UTF-8 helpers: strings index by code point, as Python's do.
size_t Utf8Length(std::string_view s);
// Byte offset of each code point, plus s.size() at the end.
std::vector<size_t> Utf8Offsets(std::string_view s);

}  // namespace banyan::jinja
