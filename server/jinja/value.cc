#include "server/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace banyan::jinja {
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

void JsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void JsonInto(const Value& v, int indent, int depth, std::string* out) {
  std::string pad, child_pad;
  if (indent > 0) {
    pad.push_back('\n');
    pad.append(static_cast<size_t>(indent * depth), ' ');
    child_pad = pad;
    child_pad.append(static_cast<size_t>(indent), ' ');
  }
  const char* sep = indent > 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      *out += "null";
      return;
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      return;
    case Value::Kind::kFloat: {
      const double d = v.float_value();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                                                     : PythonFloat(d);
      return;
    }
    case Value::Kind::kString:
      JsonString(v.str(), out);
      return;
    case Value::Kind::kList: {
      const List& l = v.list();
      if (l.empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      for (size_t i = 0; i < l.size(); ++i) {
        if (i > 0) *out += sep;
        *out += child_pad;
        JsonInto(l[i], indent, depth + 1, out);
      }
      *out += pad + "]";
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.dict();
      if (d.empty()) {
        *out += "{}";
        return;
      }
      *out += "{";
      bool first = true;
      for (const auto& [k, item] : d.items()) {
        if (!first) *out += sep;
        first = false;
        *out += child_pad;
        JsonString(k, out);
        *out += ": ";
        JsonInto(item, indent, depth + 1, out);
      }
      *out += pad + "}";
      return;
    }
    case Value::Kind::kFunction:
      throw Error("Object of type function is not JSON serializable");
  }
}

}  // namespace

size_t Dict::size() const { return items_.size(); }
bool Dict::empty() const { return items_.empty(); }

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
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s)
    : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}
Value::Value(List list) : kind_(Kind::kList), list_(std::make_shared<List>(std::move(list))) {}
Value::Value(Dict dict) : kind_(Kind::kDict), dict_(std::make_shared<Dict>(std::move(dict))) {}

Value Value::Callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<std::pair<std::string, Function>>(std::move(name), std::move(fn));
  return v;
}

Value Value::Namespace(Dict dict) {
  Value v(std::move(dict));
  v.namespace_ = true;
  return v;
}

namespace {

template <typename J>
Value FromAnyJson(const J& j) {
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
      for (const auto& e : j) l.push_back(FromAnyJson(e));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.Set(k, FromAnyJson(e));
      return Value(std::move(d));
    }
    default:
      return Value::None();
  }
}

}  // namespace

Value Value::FromJson(const nlohmann::json& j) { return FromAnyJson(j); }
Value Value::FromJson(const nlohmann::ordered_json& j) { return FromAnyJson(j); }

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
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return namespace_ || !dict_->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::ToString() const {
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
    case Kind::kString:
      return *s_;
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      return out + "]";
    }
    case Kind::kDict: {
      if (namespace_) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items()) {
        if (!first) out += ", ";
        first = false;
        out += Value(k).Repr() + ": " + v.Repr();
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function " + fn_->first + ">";
  }
  return "";
}

std::string Value::Repr() const {
  if (kind_ != Kind::kString) return ToString();
  const std::string& s = *s_;
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
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
  return out;
}

std::string Value::ToJson(int indent) const {
  std::string out;
  JsonInto(*this, indent, 0, &out);
  return out;
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
      return *s_ == *o.s_;
    case Kind::kList: {
      if (list_ == o.list_) return true;
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (namespace_ || o.namespace_) return false;
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : dict_->items()) {
        const Value* ov = o.dict_->Find(k);
        if (ov == nullptr || !v.Equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kFunction:
      return fn_ == o.fn_;
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
  }
  return "?";
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<size_t> Utf8Offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) off.push_back(i);
  }
  off.push_back(s.size());
  return off;
}

}  // namespace banyan::jinja
