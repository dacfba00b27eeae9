#include "text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace banyan::text::jinja {
namespace {

// Python's repr() of a float: the shortest round-trip digits, fixed notation for exponents in
// [-4, 16), scientific otherwise, and always a '.0' or exponent so it reads back as a float.
std::string PythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits;
      out.append(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0');
      out += ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
            digits.substr(static_cast<size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + m + ebuf;
}

// Serialization output: refuses to grow past max_bytes, and to walk deeper than kMaxValueDepth
// (values are never deeper, so that is a broken invariant turned into an error).
struct Sink {
  std::string out;
  size_t max_bytes;

  void Check() const {
    if (out.size() > max_bytes) {
      throw Error("the rendered text would exceed " + std::to_string(max_bytes) + " bytes");
    }
  }
  void Append(std::string_view s) {
    if (s.size() > max_bytes - std::min(max_bytes, out.size())) {
      throw Error("the rendered text would exceed " + std::to_string(max_bytes) + " bytes");
    }
    out.append(s);
  }
};

void JsonString(std::string_view s, Sink* sink) {
  std::string& out = sink->out;
  out.push_back('"');
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((i & 0xFFF) == 0xFFF) sink->Check();  // at most 6 bytes an input byte in between
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  sink->Check();
}

void CheckDepth(int depth) {
  if (depth > kMaxValueDepth) {
    throw Error("a value nests more than " + std::to_string(kMaxValueDepth) + " deep");
  }
}

void JsonInto(const Value& v, int indent, int depth, Sink* out) {
  CheckDepth(depth);
  std::string pad, child_pad;
  if (indent > 0) {
    pad.push_back('\n');
    pad.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
    child_pad = pad;
    child_pad.append(static_cast<size_t>(indent), ' ');
  }
  const char* sep = indent > 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      out->Append("null");
      return;
    case Value::Kind::kBool:
      out->Append(v.bool_value() ? "true" : "false");
      return;
    case Value::Kind::kInt:
      out->Append(std::to_string(v.int_value()));
      return;
    case Value::Kind::kFloat: {
      const double d = v.float_value();
      out->Append(std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                                          : PythonFloat(d));
      return;
    }
    case Value::Kind::kString:
      JsonString(v.str(), out);
      return;
    case Value::Kind::kList: {
      const List& l = v.list();
      if (l.empty()) {
        out->Append("[]");
        return;
      }
      out->Append("[");
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) out->Append(sep);
        out->Append(child_pad);
        JsonInto(l[i], indent, depth + 1, out);
      }
      out->Append(pad + "]");
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.dict();
      if (d.empty()) {
        out->Append("{}");
        return;
      }
      out->Append("{");
      bool first = true;
      for (const auto& [k, item] : d.items()) {
        if (!first) out->Append(sep);
        first = false;
        out->Append(child_pad);
        JsonString(k, out);
        out->Append(": ");
        JsonInto(item, indent, depth + 1, out);
      }
      out->Append(pad + "}");
      return;
    }
    case Value::Kind::kFunction:
      throw Error("Object of type function is not JSON serializable");
    case Value::Kind::kRange:
      throw Error("Object of type range is not JSON serializable");
  }
}

void ReprString(std::string_view s, Sink* sink) {
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string& out = sink->out;
  out.push_back(quote);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((i & 0xFFF) == 0xFFF) sink->Check();  // at most 4 bytes an input byte in between
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(quote);
  sink->Check();
}

// str() (repr = false) or repr() of v.
void StrInto(const Value& v, bool repr, int depth, Sink* out) {
  CheckDepth(depth);
  switch (v.kind()) {
    case Value::Kind::kString:
      if (repr) {
        ReprString(v.str(), out);
      } else {
        out->Append(v.str());
      }
      return;
    case Value::Kind::kList: {
      out->Append("[");
      const List& l = v.list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) out->Append(", ");
        StrInto(l[i], true, depth + 1, out);
      }
      out->Append("]");
      return;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) {
        out->Append("<Namespace>");
        return;
      }
      out->Append("{");
      bool first = true;
      for (const auto& [k, item] : v.dict().items()) {
        if (!first) out->Append(", ");
        first = false;
        ReprString(k, out);
        out->Append(": ");
        StrInto(item, true, depth + 1, out);
      }
      out->Append("}");
      return;
    }
    default:
      out->Append(v.ToString());
  }
}

}  // namespace

int64_t Range::size() const {
  const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
  if (span <= 0) return 0;
  const __int128 s = step > 0 ? __int128{step} : -__int128{step};
  return static_cast<int64_t>((span + s - 1) / s);
}

static_assert(sizeof(Value) <= 32, "a list costs 32 bytes an item (Limits::max_list_items)");

size_t Dict::size() const { return items_.size(); }
bool Dict::empty() const { return items_.empty(); }
void Dict::Reserve(size_t n) { items_.reserve(n); }

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::Find(std::string_view key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  if (Value* v = Find(key)) {
    *v = std::move(value);
  } else {
    items_.emplace_back(std::move(key), std::move(value));
  }
}

bool Dict::Erase(std::string_view key) {
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    if (it->first == key) {
      items_.erase(it);
      return true;
    }
  }
  return false;
}

const Value* CallArgs::Get(size_t pos, std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return pos < positional.size() ? &positional[pos] : nullptr;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
bool Range::Has(int64_t x) const {
  const __int128 d = __int128{x} - start;
  return d % step == 0 && d / step >= 0 && d / step < size();
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s)
    : kind_(Kind::kString), p_(std::make_shared<std::string>(std::move(s))) {}

namespace {

// One more than the deepest of `items`; Error past kMaxValueDepth.
uint16_t DepthOver(int deepest) {
  CheckDepth(deepest + 1);
  return static_cast<uint16_t>(deepest + 1);
}

}  // namespace

Value::Value(List list) : kind_(Kind::kList) {
  int deepest = 0;
  for (const Value& v : list) deepest = std::max<int>(deepest, v.depth_);
  depth_ = DepthOver(deepest);
  p_ = std::make_shared<List>(std::move(list));
}

Value::Value(Dict dict) : kind_(Kind::kDict) {
  int deepest = 0;
  for (const auto& [k, v] : dict.items()) deepest = std::max<int>(deepest, v.depth_);
  depth_ = DepthOver(deepest);
  p_ = std::make_shared<Dict>(std::move(dict));
}

Value::Value(Range range) : kind_(Kind::kRange), p_(std::make_shared<Range>(range)) {}

Value Value::Callable(std::string name, Function fn, int depth) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.depth_ = DepthOver(depth);
  v.p_ = std::make_shared<Fn>(std::move(name), std::move(fn));
  return v;
}

namespace {

void CheckNamespaceAttr(const std::string& name, const Value& v) {
  if (v.depth() >= kNamespaceDepth) {
    throw Error("namespace attribute '" + name +
                "' cannot hold a namespace (or a value nested " +
                std::to_string(kNamespaceDepth) + " deep)");
  }
}

}  // namespace

Value Value::Namespace(Dict dict) {
  for (const auto& [k, v] : dict.items()) CheckNamespaceAttr(k, v);
  Value v(std::move(dict));
  v.namespace_ = true;
  v.depth_ = kNamespaceDepth;
  return v;
}

void Value::SetAttr(std::string name, Value value) const {
  CheckNamespaceAttr(name, value);
  dict().Set(std::move(name), std::move(value));
}

namespace {

template <typename J>
Value FromAnyJson(const J& j, int depth) {
  CheckDepth(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(FromAnyJson(e, depth + 1));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.Set(k, FromAnyJson(e, depth + 1));
      return Value(std::move(d));
    }
    default:
      return Value::None();
  }
}

}  // namespace

Value Value::FromJson(const nlohmann::json& j) { return FromAnyJson(j, 0); }
Value Value::FromJson(const nlohmann::ordered_json& j) { return FromAnyJson(j, 0); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return namespace_ || !dict().empty();
    case Kind::kFunction:
      return true;
    case Kind::kRange:
      return range().size() > 0;
  }
  return false;
}

std::string Value::ToString(size_t max_bytes) const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return PythonFloat(d_);
    case Kind::kFunction:
      return "<function " + fn().first + ">";
    case Kind::kRange: {
      const Range& r = range();
      return "range(" + std::to_string(r.start) + ", " + std::to_string(r.stop) +
             (r.step == 1 ? "" : ", " + std::to_string(r.step)) + ")";
    }
    case Kind::kString:
      if (str().size() <= max_bytes) return str();
      break;
    default:
      break;
  }
  Sink sink{std::string(), max_bytes};
  StrInto(*this, false, 0, &sink);
  return std::move(sink.out);
}

std::string Value::Repr(size_t max_bytes) const {
  Sink sink{std::string(), max_bytes};
  StrInto(*this, true, 0, &sink);
  return std::move(sink.out);
}

std::string Value::ShortRepr() const {
  if (depth_ > 0 || (is_string() && str().size() > 100)) return std::string(TypeName());
  return Repr();
}

std::string Value::ToJson(int indent, size_t max_bytes) const {
  Sink sink{std::string(), max_bytes};
  JsonInto(*this, indent, 0, &sink);
  return std::move(sink.out);
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_int() && o.is_int()) return i_ == o.i_;
    return float_value() == o.float_value();
  }
  // Python: True == 1; bools compare as ints with numbers.
  if (is_bool() && o.is_number()) return Value(int64_t{b_}).Equals(o);
  if (is_number() && o.is_bool()) return Equals(Value(int64_t{o.b_}));
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return b_ == o.b_;
    case Kind::kString:
      return str() == o.str();
    case Kind::kList: {
      if (p_ == o.p_) return true;
      if (list().size() != o.list().size()) return false;
      for (size_t i = 0; i < list().size(); ++i) {
        if (!list()[i].Equals(o.list()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (p_ == o.p_) return true;
      if (namespace_ || o.namespace_) return false;
      if (dict().size() != o.dict().size()) return false;
      for (const auto& [k, v] : dict().items()) {
        const Value* ov = o.dict().Find(k);
        if (ov == nullptr || !v.Equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kRange: {
      // Python compares ranges as the sequences they make.
      const Range &a = range(), &b = o.range();
      const int64_t n = a.size();
      if (n != b.size()) return false;
      return n == 0 || (a.start == b.start && (n == 1 || a.step == b.step));
    }
    case Kind::kFunction:
      return p_ == o.p_;
    default:
      return false;
  }
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return namespace_ ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
    case Kind::kRange: return "range";
  }
  return "?";
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

size_t Utf8Next(std::string_view s, size_t at) {
  size_t i = at + 1;
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i - at;
}

size_t Utf8Prev(std::string_view s, size_t at) {
  size_t i = at - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

size_t Utf8Offset(std::string_view s, size_t i) {
  size_t at = 0;
  for (; i > 0 && at < s.size(); --i) at += Utf8Next(s, at);
  return at;
}

size_t Utf8Invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

}  // namespace banyan::text::jinja
