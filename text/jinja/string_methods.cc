#include "text/jinja/string_methods.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace banyan::text::jinja {
namespace {

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The code points of a short string (strip's `chars`).
std::vector<std::string_view> CodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t at = 0; at < s.size();) {
    const size_t len = Utf8Next(s, at);
    out.push_back(s.substr(at, len));
    at += len;
  }
  return out;
}

bool IsAlpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// '{}' / '{0}' / '{name}' replacement fields, with '{{' and '}}' escapes; no format specs.
std::string Format(const std::string& fmt, const CallArgs& a, Interpreter& in) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw Error("format(): a '{' is not closed");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) {
      throw Error("format(): format specifications are not supported ('{" + field + "}')");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      const size_t k = std::stoul(field);
      v = k < a.positional.size() ? &a.positional[k] : nullptr;
    } else {
      for (const auto& [name, value] : a.keyword) {
        if (name == field) v = &value;
      }
    }
    if (v == nullptr) throw Error("format(): no argument for '{" + field + "}'");
    const std::string text = in.Str(*v);
    in.CheckSize(out.size() + text.size(), a.line);
    out += text;
    i = close;
  }
  return out;
}

constexpr std::array<std::string_view, 21> kMethods = {
    "strip",   "lstrip",     "rstrip",   "split",   "rsplit", "splitlines", "startswith",
    "endswith", "upper",     "lower",    "title",   "capitalize", "replace", "find",
    "rfind",   "count",      "format",   "join",    "isdigit", "isalpha",  "isspace"};

const std::string* OptStr(const CallArgs& a, size_t pos, std::string_view name) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return nullptr;
  if (!v->is_string()) throw Error("argument '" + std::string(name) + "' must be a string");
  return &v->str();
}

const std::string& NeedStr(const CallArgs& a, size_t pos, std::string_view name) {
  const std::string* s = OptStr(a, pos, name);
  if (s == nullptr) throw Error("missing string argument '" + std::string(name) + "'");
  return *s;
}

int64_t OptInt(const CallArgs& a, size_t pos, std::string_view name, int64_t dflt) {
  const Value* v = a.Get(pos, name);
  if (v == nullptr || v->is_none() || v->is_undefined()) return dflt;
  if (!v->is_int()) throw Error("argument '" + std::string(name) + "' must be an integer");
  return v->int_value();
}

// startswith/endswith take a string or a tuple (list) of strings.
bool Affix(const std::string& s, const Value* arg, bool prefix) {
  if (arg == nullptr) throw Error(prefix ? "startswith() needs an argument" : "endswith() needs an argument");
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw Error("startswith/endswith need strings");
    const std::string& p = v.str();
    return prefix ? s.starts_with(p) : s.ends_with(p);
  };
  if (arg->is_list()) {
    return std::any_of(arg->list().begin(), arg->list().end(), one);
  }
  return one(*arg);
}

}  // namespace

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  if (chars == nullptr) {
    size_t a = 0, b = s.size();
    if (left) {
      while (a < b && IsWs(s[a])) ++a;
    }
    if (right) {
      while (b > a && IsWs(s[b - 1])) --b;
    }
    return std::string(s.substr(a, b - a));
  }
  const std::vector<std::string_view> set = CodePoints(*chars);
  auto in_set = [&](std::string_view cp) {
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t a = 0, b = s.size();  // byte offsets, on code point boundaries
  if (left) {
    while (a < b && in_set(s.substr(a, Utf8Next(s, a)))) a += Utf8Next(s, a);
  }
  if (right) {
    while (b > a && in_set(s.substr(Utf8Prev(s, b), b - Utf8Prev(s, b)))) b = Utf8Prev(s, b);
  }
  return std::string(s.substr(a, b - a));
}

int64_t PyWordCount(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) n += !IsWs(s[i]) && (i == 0 || IsWs(s[i - 1]));
  return n;
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 size_t max_parts) {
  std::vector<std::string> out;
  auto check = [&] {
    if (out.size() >= max_parts) {
      throw Error("split() would make more than " + std::to_string(max_parts) + " parts");
    }
  };
  if (sep == nullptr) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && IsWs(s[i])) ++i;
      if (i >= s.size()) break;
      check();
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && IsWs(s[end - 1])) --end;
        out.emplace_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsWs(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  if (sep->empty()) throw Error("split(): empty separator");
  size_t start = 0;
  for (;;) {
    check();
    const size_t at = s.find(*sep, start);
    if (at == std::string_view::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
}

bool IsStringMethod(std::string_view name) {
  return std::find(kMethods.begin(), kMethods.end(), name) != kMethods.end();
}

std::optional<Value> CallStringMethod(Interpreter& in, const std::string& s, std::string_view name,
                                      CallArgs& a) {
  in.Charge(s.size(), a.line);  // every method reads the string
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(PyStrip(s, OptStr(a, 0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const int64_t maxsplit = OptInt(a, 1, "maxsplit", -1);
    std::vector<std::string> parts;
    if (name == "rsplit" && maxsplit >= 0) {
      // Split from the right: reverse the problem on the reversed string of whole separators.
      const std::string* sep = OptStr(a, 0, "sep");
      std::vector<std::string> all = PySplit(s, sep, -1, in.max_list_items());
      if (static_cast<int64_t>(all.size()) > maxsplit + 1) {
        const size_t keep = all.size() - static_cast<size_t>(maxsplit);
        std::string head;
        for (size_t i = 0; i < keep; ++i) head += (i ? (sep ? *sep : " ") : "") + all[i];
        parts.push_back(head);
        parts.insert(parts.end(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end());
      } else {
        parts = std::move(all);
      }
    } else {
      parts = PySplit(s, OptStr(a, 0, "sep"), maxsplit, in.max_list_items());
    }
    List out;
    for (std::string& p : parts) out.push_back(Value(std::move(p)));
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    size_t start = 0;
    while (start < s.size()) {
      size_t nl = s.find_first_of("\r\n", start);
      in.CheckItems(out.size() + 1, a.line);
      if (nl == std::string::npos) {
        out.push_back(Value(s.substr(start)));
        break;
      }
      out.push_back(Value(s.substr(start, nl - start)));
      start = nl + (s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n' ? 2 : 1);
    }
    return Value(std::move(out));
  }
  if (name == "startswith") return Value(Affix(s, a.Get(0, "prefix"), true));
  if (name == "endswith") return Value(Affix(s, a.Get(0, "suffix"), false));
  if (name == "upper") return Value(AsciiUpper(s));
  if (name == "lower") return Value(AsciiLower(s));
  if (name == "title") {
    std::string out = s;
    bool prev_letter = false;
    for (char& c : out) {
      const bool letter = IsAlpha(c);
      if (letter) {
        c = static_cast<char>(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                          : std::toupper(static_cast<unsigned char>(c)));
      }
      prev_letter = letter;
    }
    return Value(std::move(out));
  }
  if (name == "capitalize") {
    std::string out = AsciiLower(s);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value(std::move(out));
  }
  if (name == "replace") {
    const std::string& from = NeedStr(a, 0, "old");
    const std::string& to = NeedStr(a, 1, "new");
    int64_t count = OptInt(a, 2, "count", -1);
    std::string out;
    if (from.empty()) {
      // Python inserts `to` between every character (and at both ends).
      for (size_t at = 0, i = 0;; ++i) {
        const size_t len = at < s.size() ? Utf8Next(s, at) : 0;
        const bool insert = count < 0 || static_cast<int64_t>(i) < count;
        in.CheckSize(out.size() + (insert ? to.size() : 0) + len, a.line);
        if (insert) out += to;
        if (at >= s.size()) break;
        out.append(s, at, len);
        at += len;
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    for (;;) {
      const size_t at = count == 0 ? std::string::npos : s.find(from, start);
      if (at == std::string::npos) break;
      in.CheckSize(out.size() + (at - start) + to.size(), a.line);
      out.append(s, start, at - start);
      out += to;
      start = at + from.size();
      if (count > 0) --count;
    }
    out.append(s, start);
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind") {
    const std::string& sub = NeedStr(a, 0, "sub");
    const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) return Value(int64_t{-1});
    return Value(static_cast<int64_t>(Utf8Length(std::string_view(s).substr(0, at))));
  }
  if (name == "count") {
    const std::string& sub = NeedStr(a, 0, "sub");
    if (sub.empty()) return Value(static_cast<int64_t>(Utf8Length(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "format") {
    return Value(Format(s, a, in));
  }
  if (name == "join") {
    const Value* items = a.Get(0, "iterable");
    if (items == nullptr) throw Error("join() needs an iterable");
    std::string out;
    bool first = true;
    Cursor cursor(*items, a.line);
    for (Value v; cursor.Next(&v);) {
      in.Tick(a.line);
      if (!v.is_string()) throw Error("join() needs strings, got " + std::string(v.TypeName()));
      in.CheckSize(out.size() + (first ? 0 : s.size()) + v.str().size(), a.line);
      if (!first) out += s;
      first = false;
      out += v.str();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      const bool ok = name == "isdigit" ? std::isdigit(u) != 0
                      : name == "isalpha" ? std::isalpha(u) != 0
                                          : IsWs(c);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return std::nullopt;
}

}  // namespace banyan::text::jinja
