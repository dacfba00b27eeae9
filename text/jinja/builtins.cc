#include "text/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "text/jinja/string_methods.h"

namespace banyan::text::jinja {
namespace {

const Value kUndefined{};

std::string ArgStr(const CallArgs& a, size_t pos, std::string_view name, std::string dflt) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || v->is_undefined() || v->is_none()) return dflt;
  if (!v->is_string()) {
    throw Error("argument '" + std::string(name) + "' must be a string, got " +
                std::string(v->TypeName()));
  }
  return v->str();
}

int64_t ArgInt(const CallArgs& a, size_t pos, std::string_view name, int64_t dflt) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || v->is_undefined() || v->is_none()) return dflt;
  if (v->is_bool()) return v->bool_value();
  if (!v->is_int()) {
    throw Error("argument '" + std::string(name) + "' must be an integer, got " +
                std::string(v->TypeName()));
  }
  return v->int_value();
}

bool ArgBool(const CallArgs& a, size_t pos, std::string_view name, bool dflt) {
  const Value* v = a.Get(pos, name);
  return v == nullptr || v->is_undefined() ? dflt : v->Truthy();
}

// Jinja's attribute lookup for filters: "a.b.0" walks dict keys and list indices.
Value Attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits && cur.is_list() ? GetItem(cur, Value(static_cast<int64_t>(std::stoll(part))))
                                  : GetItem(cur, Value(part));
    if (dot == std::string::npos || cur.is_undefined()) return cur;
    start = dot + 1;
  }
}

// The arguments after the first `skip` positional ones, for a test or filter applied per item.
CallArgs Rest(const CallArgs& a, size_t skip) {
  CallArgs r;
  r.line = a.line;
  for (size_t i = skip; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  return r;
}

// Python's ordering for sort/min/max: numbers with numbers, strings with strings.
bool Less(const Value& a, const Value& b, bool case_sensitive) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    auto num = [](const Value& v) { return v.is_bool() ? (v.bool_value() ? 1.0 : 0.0) : v.float_value(); };
    return num(a) < num(b);
  }
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) return a.str() < b.str();
    return AsciiLower(a.str()) < AsciiLower(b.str());
  }
  throw Error("cannot compare '" + std::string(a.TypeName()) + "' with '" +
              std::string(b.TypeName()) + "'");
}

Value SelectOrReject(Interpreter& in, const Value& seq, CallArgs& args, bool by_attr,
                     bool select) {
  List out;
  const size_t skip = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) attr = ArgStr(args, 0, "attribute", "");
  const Value* test = args.positional.size() > skip ? &args.positional[skip] : nullptr;
  if (test != nullptr && !test->is_string()) throw Error("the test name must be a string");
  CallArgs rest = Rest(args, skip + 1);
  Cursor items(seq, args.line);
  for (Value item; items.Next(&item);) {
    in.Tick(args.line);
    const Value v = by_attr ? Attribute(item, attr) : item;
    const bool ok = test ? ApplyTest(in, test->str(), v, rest) : v.Truthy();
    if (ok != select) continue;
    in.CheckItems(out.size() + 1, args.line);
    out.push_back(std::move(item));
  }
  return Value(std::move(out));
}

Value ToInt(const Value& v, const CallArgs& args) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.bool_value()});
  // Doubles outside int64's range would be undefined behaviour to convert.
  auto fits = [](double d) { return std::isfinite(d) && std::fabs(d) < 9.2e18; };
  if (v.is_float() && fits(v.float_value())) {
    return Value(static_cast<int64_t>(v.float_value()));
  }
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), nullptr, true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(i));
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && fits(d)) return Value(static_cast<int64_t>(d));
  }
  return Value(ArgInt(args, 0, "default", 0));
}

Value ToFloat(const Value& v, const CallArgs& args) {
  if (v.is_number()) return Value(v.float_value());
  if (v.is_bool()) return Value(v.bool_value() ? 1.0 : 0.0);
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), nullptr, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  const Value* d = args.Get(0, "default");
  return d ? *d : Value(0.0);
}

std::string Escape(const std::string& s, Interpreter& in, int line) {
  size_t size = s.size();
  for (char c : s) size += c == '&' ? 4 : c == '<' || c == '>' ? 3 : c == '"' || c == '\'' ? 4 : 0;
  in.CheckSize(size, line);
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank,
                   Interpreter& in, int line) {
  // The size first: a long pad times many lines must be refused before it is built.
  size_t lines = 1;
  for (char c : s) lines += c == '\n';
  size_t total = 0;
  if (__builtin_mul_overflow(lines, pad.size(), &total) ||
      __builtin_add_overflow(total, s.size(), &total)) {
    total = SIZE_MAX;
  }
  in.CheckSize(total, line);
  std::string out;
  size_t start = 0;
  bool is_first = true;
  for (;;) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? nl : nl - start);
    if ((is_first ? first : true) && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}


constexpr std::string_view kTests[] = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
    "equalto", "even", "false", "float", "ge", "gt", "in", "integer", "iterable", "le", "lower",
    "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "true",
    "undefined", "upper"};

// --- filters: one function each, one table (kFilters) of names

using FilterFn = Value (*)(Interpreter& in, std::string_view name, const Value& v, CallArgs& args);

Value FilterSafe(Interpreter&, std::string_view, const Value& v, CallArgs&) { return v; }

Value FilterDefault(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  const bool boolean = ArgBool(args, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.Truthy())) {
    const Value* d = args.Get(0, "default_value");
    return d ? *d : Value(std::string());
  }
  return v;
}

Value FilterToJson(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  const int64_t indent = ArgInt(args, 0, "indent", 0);
  return Value(v.ToJson(static_cast<int>(std::clamp<int64_t>(indent, 0, 64)),
                        in.max_output_bytes()));
}

Value FilterString(Interpreter& in, std::string_view, const Value& v, CallArgs&) {
  return Value(in.Str(v));
}

Value FilterTrim(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  const std::string chars = ArgStr(args, 0, "chars", "");
  return Value(PyStrip(in.Str(v), chars.empty() ? nullptr : &chars, true, true));
}

Value FilterLength(Interpreter&, std::string_view, const Value& v, CallArgs&) {
  if (v.is_string()) return Value(static_cast<int64_t>(Utf8Length(v.str())));
  if (v.is_range()) return Value(v.range().size());
  if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().size()));
  if (v.is_undefined()) return Value(int64_t{0});
  throw Error("object of type '" + std::string(v.TypeName()) + "' has no length");
}

Value FilterList(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  return Value(in.Items(v, args.line));
}

Value FilterFirst(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  Value item;
  Cursor(v, args.line).Next(&item);
  return item;
}

Value FilterLast(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  if (v.is_list() || v.is_range()) return GetItem(v, Value(int64_t{-1}));
  Cursor items(v, args.line);
  Value item;
  while (items.Next(&item)) {
  }
  return item;
}

Value FilterItems(Interpreter&, std::string_view, const Value& v, CallArgs&) {
  if (!v.is_dict()) throw Error("items filter needs a mapping, got " + std::string(v.TypeName()));
  List out;
  for (const auto& [k, item] : v.dict().items()) out.push_back(Value(List{Value(k), item}));
  return Value(std::move(out));
}

Value FilterDictSort(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  if (!v.is_dict()) throw Error("dictsort needs a mapping");
  const bool case_sensitive = ArgBool(args, 0, "case_sensitive", false);
  const bool by_value = ArgStr(args, 1, "by", "key") == "value";
  const bool reverse = ArgBool(args, 2, "reverse", false);
  List out;
  for (const auto& [k, item] : v.dict().items()) out.push_back(Value(List{Value(k), item}));
  std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
    const size_t i = by_value ? 1 : 0;
    return reverse ? Less(b.list()[i], a.list()[i], case_sensitive)
                   : Less(a.list()[i], b.list()[i], case_sensitive);
  });
  return Value(std::move(out));
}

Value FilterJoin(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  const std::string sep = ArgStr(args, 0, "d", "");
  const Value* attr = args.Get(1, "attribute");
  const std::string attr_path = attr ? in.Str(*attr) : "";
  std::string out;
  bool first = true;
  Cursor items(v, args.line);
  for (Value item; items.Next(&item);) {
    in.Tick(args.line);
    const std::string s = in.Str(attr ? Attribute(item, attr_path) : item);
    in.CheckSize(out.size() + (first ? 0 : sep.size()) + s.size(), args.line);
    if (!first) out += sep;
    first = false;
    out += s;
  }
  return Value(std::move(out));
}

Value FilterMap(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  List out;
  Cursor items(v, args.line);
  if (const Value* attr = args.Get(99, "attribute")) {
    const Value* dflt = args.Get(99, "default");
    const std::string path = in.Str(*attr);
    for (Value item; items.Next(&item);) {
      in.CheckItems(out.size() + 1, args.line);
      Value x = Attribute(item, path);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    throw Error("map needs a filter name or attribute=");
  }
  CallArgs rest = Rest(args, 1);
  for (Value item; items.Next(&item);) {
    in.Tick(args.line);
    in.CheckItems(out.size() + 1, args.line);
    out.push_back(ApplyFilter(in, args.positional[0].str(), item, rest));
  }
  return Value(std::move(out));
}

Value FilterSelect(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep = name == "selectattr" || name == "select";
  return SelectOrReject(in, v, args, by_attr, keep);
}

Value FilterInt(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  return ToInt(v, args);
}

Value FilterFloat(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  return ToFloat(v, args);
}

Value FilterAbs(Interpreter&, std::string_view, const Value& v, CallArgs&) {
  if (v.is_int() && v.int_value() == INT64_MIN) throw Error("integer overflow");
  if (v.is_int()) return Value(v.int_value() < 0 ? -v.int_value() : v.int_value());
  if (v.is_float()) return Value(std::fabs(v.float_value()));
  throw Error("abs needs a number");
}

Value FilterRound(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  if (!v.is_number()) throw Error("round needs a number");
  const int64_t precision = ArgInt(args, 0, "precision", 0);
  const std::string method = ArgStr(args, 1, "method", "common");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.float_value() * scale;
  const double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x)
                                                                        : std::round(x);
  return Value(r / scale);
}

// upper, lower, title, capitalize: the string methods of the same names.
Value FilterCase(Interpreter& in, std::string_view name, const Value& v, CallArgs&) {
  CallArgs none;
  return *CallStringMethod(in, in.Str(v), name, none);
}

Value FilterReplace(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  CallArgs a = args;
  return *CallStringMethod(in, in.Str(v), "replace", a);
}

Value FilterEscape(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  return Value(Escape(in.Str(v), in, args.line));
}

Value FilterIndent(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  const Value* w = args.Get(0, "width");
  const std::string pad = w && w->is_string() ? w->str()
                                              : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                                ArgInt(args, 0, "width", 4), 0, 256)),
                                                            ' ');
  return Value(Indent(in.Str(v), pad, ArgBool(args, 1, "first", false),
                      ArgBool(args, 2, "blank", false), in, args.line));
}

Value FilterWordCount(Interpreter& in, std::string_view, const Value& v, CallArgs&) {
  return Value(PyWordCount(in.Str(v)));
}

Value FilterReverse(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  if (v.is_string()) return Slice(v, Value(), Value(), Value(int64_t{-1}), args.line);
  List l = in.Items(v, args.line);
  std::reverse(l.begin(), l.end());
  return Value(std::move(l));
}

// sort, unique, min, max: over the items, by an attribute when given, case-insensitive by default.
Value FilterOrdered(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  const bool case_sensitive = ArgBool(args, 99, "case_sensitive", false);
  const Value* attr = args.Get(99, "attribute");
  const std::string path = attr ? in.Str(*attr) : "";
  auto key = [&](const Value& x) { return attr ? Attribute(x, path) : x; };
  List l = in.Items(v, args.line);
  if (name == "unique") {
    List out;
    for (const Value& x : l) {
      bool seen = false;
      for (const Value& y : out) {
        in.Tick(args.line);  // quadratic: count the comparisons
        Value kx = key(x), ky = key(y);
        seen = seen || (!case_sensitive && kx.is_string() && ky.is_string()
                            ? AsciiLower(kx.str()) == AsciiLower(ky.str())
                            : kx.Equals(ky));
      }
      if (!seen) out.push_back(x);
    }
    return Value(std::move(out));
  }
  auto less = [&](const Value& a, const Value& b) { return Less(key(a), key(b), case_sensitive); };
  if (name == "min" || name == "max") {
    if (l.empty()) return Value();
    return name == "min" ? *std::min_element(l.begin(), l.end(), less)
                         : *std::max_element(l.begin(), l.end(), less);
  }
  std::stable_sort(l.begin(), l.end(), less);
  if (ArgBool(args, 0, "reverse", false)) std::reverse(l.begin(), l.end());
  return Value(std::move(l));
}

Value FilterSum(Interpreter& in, std::string_view, const Value& v, CallArgs& args) {
  const Value* attr = args.Get(0, "attribute");
  const Value* start = args.Get(1, "start");
  Value total = start ? *start : Value(int64_t{0});
  const std::string path = attr ? in.Str(*attr) : "";
  Cursor items(v, args.line);
  for (Value x; items.Next(&x);) {
    in.Tick(args.line);
    const Value y = attr ? Attribute(x, path) : x;
    if (!y.is_number() || !total.is_number()) throw Error("sum needs numbers");
    total = total.is_int() && y.is_int() ? Value(total.int_value() + y.int_value())
                                         : Value(total.float_value() + y.float_value());
  }
  return total;
}

Value FilterAttr(Interpreter&, std::string_view, const Value& v, CallArgs& args) {
  const std::string a = ArgStr(args, 0, "name", "");
  return GetItem(v, Value(a));
}

struct FilterDef {
  std::string_view name;
  FilterFn fn;
  bool takes_undefined;  // false: applied to an undefined value it is an error
};

// Every filter the interpreter knows (the parser refuses others at load).
constexpr FilterDef kFilters[] = {
    {"abs", FilterAbs, false},           {"attr", FilterAttr, false},
    {"capitalize", FilterCase, false},   {"count", FilterLength, true},
    {"d", FilterDefault, true},          {"default", FilterDefault, true},
    {"dictsort", FilterDictSort, false}, {"e", FilterEscape, false},
    {"escape", FilterEscape, false},     {"first", FilterFirst, false},
    {"float", FilterFloat, false},       {"indent", FilterIndent, false},
    {"int", FilterInt, false},           {"items", FilterItems, false},
    {"join", FilterJoin, true},          {"last", FilterLast, false},
    {"length", FilterLength, true},      {"list", FilterList, true},
    {"lower", FilterCase, false},        {"map", FilterMap, true},
    {"max", FilterOrdered, false},       {"min", FilterOrdered, false},
    {"reject", FilterSelect, true},      {"rejectattr", FilterSelect, true},
    {"replace", FilterReplace, false},   {"reverse", FilterReverse, false},
    {"round", FilterRound, false},       {"safe", FilterSafe, true},
    {"select", FilterSelect, true},      {"selectattr", FilterSelect, true},
    {"sort", FilterOrdered, false},      {"string", FilterString, true},
    {"sum", FilterSum, false},           {"title", FilterCase, false},
    {"tojson", FilterToJson, true},      {"trim", FilterTrim, false},
    {"unique", FilterOrdered, false},    {"upper", FilterCase, false},
    {"wordcount", FilterWordCount, false},
};

const FilterDef* FindFilter(std::string_view name) {
  for (const FilterDef& f : kFilters) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace

bool IsFilter(std::string_view name) { return FindFilter(name) != nullptr; }

bool IsTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value ApplyFilter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  const FilterDef* f = FindFilter(name);
  if (f == nullptr) throw Error("unknown filter '" + std::string(name) + "'");
  if (v.is_undefined() && !f->takes_undefined) {
    throw Error("filter '" + std::string(name) + "' applied to an undefined value");
  }
  return f->fn(in, name, v, args);
}

bool ApplyTest(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  (void)in;
  const Value& arg = args.positional.empty() ? kUndefined : args.positional[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.bool_value();
  if (name == "false") return v.is_bool() && !v.bool_value();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence" || name == "iterable") {
    return v.is_list() || v.is_string() || v.is_dict() || v.is_range();
  }
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) throw Error("test '" + std::string(name) + "' needs an integer");
    return (v.int_value() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!v.is_int() || !arg.is_int() || arg.int_value() == 0) {
      throw Error("divisibleby needs a non-zero integer");
    }
    return v.int_value() % arg.int_value() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(arg);
  if (name == "ne" || name == "!=") return !v.Equals(arg);
  if (name == "lt" || name == "<") return Less(v, arg, true);
  if (name == "gt" || name == ">") return Less(arg, v, true);
  if (name == "le" || name == "<=") return !Less(arg, v, true);
  if (name == "ge" || name == ">=") return !Less(v, arg, true);
  if (name == "sameas") {
    if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == arg.kind() && v.Equals(arg);
    return (v.is_list() && arg.is_list() && &v.list() == &arg.list()) ||
           (v.is_dict() && arg.is_dict() && &v.dict() == &arg.dict());
  }
  if (name == "in") {
    if (arg.is_list()) {
      for (const Value& x : arg.list()) {
        if (x.Equals(v)) return true;
      }
      return false;
    }
    if (arg.is_range()) return v.is_int() && arg.range().Has(v.int_value());
    if (arg.is_string() && v.is_string()) return arg.str().find(v.str()) != std::string::npos;
    if (arg.is_dict() && v.is_string()) return arg.dict().Find(v.str()) != nullptr;
    throw Error("test 'in' needs a container");
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return name == "lower" ? AsciiLower(v.str()) == v.str() : AsciiUpper(v.str()) == v.str();
  }
  throw Error("unknown test '" + std::string(name) + "'");
}

void AddGlobals(Dict* g, int64_t now_unix_s) {
  g->Set("namespace", Value::Callable("namespace", [](Interpreter&, CallArgs& a) {
           Dict d;
           for (const Value& p : a.positional) {
             if (!p.is_dict()) throw Error("namespace() takes keyword arguments or a mapping");
             for (const auto& [k, v] : p.dict().items()) d.Set(k, v);
           }
           for (const auto& [k, v] : a.keyword) d.Set(k, v);
           return Value::Namespace(std::move(d));
         }));
  g->Set("dict", Value::Callable("dict", [](Interpreter&, CallArgs& a) {
           Dict d;
           for (const auto& [k, v] : a.keyword) d.Set(k, v);
           return Value(std::move(d));
         }));
  // A range, not its list: loops walk it, and a list is made only when asked (|list, ...).
  g->Set("range", Value::Callable("range", [](Interpreter&, CallArgs& a) {
           if (a.positional.empty() || a.positional.size() > 3) {
             throw Error("range() takes 1 to 3 integer arguments");
           }
           int64_t start = 0, stop = 0, step = 1;
           if (a.positional.size() == 1) {
             stop = ArgInt(a, 0, "stop", 0);
           } else {
             start = ArgInt(a, 0, "start", 0);
             stop = ArgInt(a, 1, "stop", 0);
             step = ArgInt(a, 2, "step", 1);
           }
           if (step == 0) throw Error("range() step must not be zero");
           // Python's len() fails past ssize_t; a Range's size must fit int64_t.
           const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
           const __int128 s = step > 0 ? __int128{step} : -__int128{step};
           if ((span + s - 1) / s > INT64_MAX) {
             throw Error("range() has more than 9223372036854775807 items");
           }
           return Value(Range{start, stop, step});
         }));
  g->Set("raise_exception", Value::Callable("raise_exception", [](Interpreter& in, CallArgs& a) -> Value {
           throw Error(a.positional.empty() ? "raise_exception() was called"
                                            : in.Str(a.positional[0]));
         }));
  g->Set("strftime_now", Value::Callable("strftime_now", [now_unix_s](Interpreter&, CallArgs& a) {
           const std::string fmt = ArgStr(a, 0, "format", "");
           const std::time_t t = now_unix_s >= 0 ? static_cast<std::time_t>(now_unix_s)
                                                 : std::time(nullptr);
           std::tm tm{};
           localtime_r(&t, &tm);
           char buf[256];
           const size_t n = fmt.size() > 64 ? 0 : std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
           return Value(std::string(buf, n));
         }));
}

std::optional<Value> BindMethod(const Value& obj, std::string_view name) {
  if (obj.is_string()) {
    if (!IsStringMethod(name)) return std::nullopt;
    const Value self = obj;
    const std::string n(name);
    return Value::Callable(n, [self, n](Interpreter& in, CallArgs& a) {
      return *CallStringMethod(in, self.str(), n, a);
    }, self.depth());
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    if (name != "items" && name != "keys" && name != "values" && name != "get") {
      return std::nullopt;
    }
    const Value self = obj;
    const std::string n(name);
    return Value::Callable(n, [self, n](Interpreter&, CallArgs& a) -> Value {
      const Dict& d = self.dict();
      if (n == "get") {
        const Value* key = a.Get(0, "key");
        const Value* dflt = a.Get(1, "default");
        const Value* v = key && key->is_string() ? d.Find(key->str()) : nullptr;
        return v ? *v : dflt ? *dflt : Value::None();
      }
      List out;
      for (const auto& [k, v] : d.items()) {
        out.push_back(n == "items" ? Value(List{Value(k), v}) : n == "keys" ? Value(k) : v);
      }
      return Value(std::move(out));
    }, self.depth());
  }
  if (obj.is_list() && (name == "index" || name == "count")) {
    const Value self = obj;
    const bool index = name == "index";
    return Value::Callable(std::string(name), [self, index](Interpreter&, CallArgs& a) -> Value {
      const Value* x = a.Get(0, "value");
      if (!x) throw Error("list method needs a value");
      int64_t count = 0;
      for (size_t i = 0; i < self.list().size(); ++i) {
        if (!self.list()[i].Equals(*x)) continue;
        if (index) return Value(static_cast<int64_t>(i));
        ++count;
      }
      if (index) throw Error(x->ShortRepr() + " is not in list");
      return Value(count);
    }, self.depth());
  }
  return std::nullopt;
}

}  // namespace banyan::text::jinja
