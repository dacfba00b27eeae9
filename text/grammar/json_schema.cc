#include "text/grammar/json_schema.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include <deque>
#include <string>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "text/grammar/automaton.h"
#include "text/grammar/number_range.h"
#include "text/grammar/regex.h"
#include "text/grammar/string_format.h"
#include "text/grammar/json_schema_disjoint.h"

namespace banyan::text::grammar {
namespace {

using json = nlohmann::ordered_json;

Expr Digit() { return Byte(ByteSet::Range('0', '9')); }
Expr Chars(std::string_view set) { return Byte(ByteSet::Chars(set)); }
ByteSet HexSet() {
  ByteSet s = ByteSet::Range('0', '9');
  s.AddRange('a', 'f');
  s.AddRange('A', 'F');
  return s;
}
Expr Hex() { return Byte(HexSet()); }

std::string PointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

const absl::flat_hash_set<std::string_view>& Annotations() {
  static const auto* set = new absl::flat_hash_set<std::string_view>{
      "title", "description", "default", "examples", "$schema", "$id", "$comment",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return *set;
}

const absl::flat_hash_set<std::string_view>& Supported() {
  static const auto* set = new absl::flat_hash_set<std::string_view>{
      "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
      "oneOf", "allOf", "$ref", "items", "prefixItems", "minItems", "maxItems", "minLength",
      "maxLength", "format", "nullable", "pattern", "minimum", "maximum", "exclusiveMinimum",
      "exclusiveMaximum", "multipleOf"};
  return *set;
}

bool ValueHasType(const json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class SchemaCompiler {
 public:
  // Rules are added to `*g`, which may hold other rules already (other schemas' ones).
  SchemaCompiler(const json& root, const JsonSchemaOptions& options, Grammar* g)
      : root_(root), opt_(options), g_(g) {}

  // The rule matching the schema.
  absl::StatusOr<int32_t> Run() {
    const int32_t root_rule = g_->AddRule("root");
    refs_.emplace("#", root_rule);
    absl::StatusOr<Expr> body = Compile(root_, "#", 0);
    if (!body.ok()) return body.status();
    g_->SetBody(root_rule, *std::move(body));
    while (!pending_.empty()) {
      auto [ref, rule] = pending_.front();
      pending_.pop_front();
      const json* target = Resolve(ref);
      if (target == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("$ref '", ref, "' does not resolve within the schema"));
      }
      absl::StatusOr<Expr> def = Compile(*target, ref, 0);
      if (!def.ok()) return def.status();
      g_->SetBody(rule, *std::move(def));
    }
    return root_rule;
  }

  Expr AnyValue() {
    if (any_value_ < 0) {
      any_value_ = g_->AddRule("any-value");
      const Expr value = Ref(any_value_);
      const Expr member = Seq({String(0, -1), Ws(), Literal(":"), Ws(), value});
      const Expr object = Seq({Literal("{"), Ws(),
                               Opt(Seq({member, Star(Seq({Sep(), member}))})), Ws(),
                               Literal("}")});
      const Expr array = Seq({Literal("["), Ws(), Opt(Seq({value, Star(Seq({Sep(), value}))})),
                              Ws(), Literal("]")});
      g_->SetBody(any_value_, Alt({object, array, String(0, -1), Number(), Literal("true"),
                                  Literal("false"), Literal("null")}));
    }
    return Ref(any_value_);
  }

  Expr AnyObject() {
    const Expr member = Seq({String(0, -1), Ws(), Literal(":"), Ws(), AnyValue()});
    return Seq({Literal("{"), Ws(), Opt(Seq({member, Star(Seq({Sep(), member}))})), Ws(),
                Literal("}")});
  }

 private:
  Expr Ws() const {
    return opt_.max_whitespace <= 0 ? Empty()
                                    : Repeat(Chars(" \t\n"), 0, opt_.max_whitespace);
  }
  Expr Sep() const { return Seq({Ws(), Literal(","), Ws()}); }

  Expr Integer(int digits) const {
    return Seq({Opt(Literal("-")),
                Alt({Literal("0"), Seq({Byte(ByteSet::Range('1', '9')),
                                        Repeat(Digit(), 0, digits - 1)})})});
  }
  Expr Number() const {
    return Seq({Integer(opt_.max_digits), Opt(Seq({Literal("."), Repeat(Digit(), 1, opt_.max_digits)})),
                // Two exponent digits: every number stays finite as a double (JSON parsers
                // refuse or turn into infinity what overflows).
                Opt(Seq({Chars("eE"), Opt(Chars("+-")), Repeat(Digit(), 1, 2)}))});
  }
  // One character as minLength/maxLength count it: a code point. A \u escape of a UTF-16
  // surrogate comes only as a high-low pair (one code point; a validator counts the pair as
  // one, so letting the halves count as two would pass strings that are too short); a lone
  // surrogate, which is no character, is never written.
  Expr StringChar() const {
    ByteSet excluded = ByteSet::Range(0x00, 0x1F);
    excluded.Add('"');
    excluded.Add('\\');
    ByteSet not_d = HexSet();
    not_d.Remove('d');
    not_d.Remove('D');
    const Expr d = Chars("dD");
    const Expr bmp = Alt({Seq({Byte(not_d), Hex(), Hex(), Hex()}),
                          Seq({d, Byte(ByteSet::Range('0', '7')), Hex(), Hex()})});
    const Expr high = Seq({d, Chars("89abAB"), Hex(), Hex()});
    const Expr low = Seq({d, Chars("cdefCDEF"), Hex(), Hex()});
    const Expr escape_u = Seq({Literal("u"), Alt({bmp, Seq({high, Literal("\\u"), low})})});
    return Alt({Utf8Char(excluded),
                Seq({Literal("\\"), Alt({Chars("\"\\/bfnrt"), escape_u})})});
  }
  Expr String(int32_t min, int32_t max) const {
    return Seq({Literal("\""), Repeat(StringChar(), min, max), Literal("\"")});
  }

  absl::StatusOr<int32_t> Count(const json& s, const std::string& key, const std::string& path,
                                int32_t fallback) const {
    if (!s.contains(key)) return fallback;
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' at ", path, " must be a non-negative integer"));
    }
    if (v.get<int64_t>() > opt_.max_items) {
      return absl::InvalidArgumentError(absl::StrCat("'", key, "' at ", path, " is ",
                                                     v.get<int64_t>(), "; at most ",
                                                     opt_.max_items, " is supported"));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  const json* Resolve(const std::string& ref) const {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0) return nullptr;
    try {
      const json::json_pointer ptr(ref.substr(1));
      if (!root_.contains(ptr)) return nullptr;
      return &root_.at(ptr);
    } catch (const json::exception&) {
      return nullptr;
    }
  }

  absl::StatusOr<Expr> CompileRef(const json& s, const std::string& path) {
    if (!s.at("$ref").is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("'$ref' at ", path, " must be a string"));
    }
    const std::string ref = s.at("$ref").get<std::string>();
    for (const auto& [key, value] : s.items()) {
      if (key != "$ref" && !Annotations().contains(key)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", key, "' beside '$ref' at ", path, " is not supported (only annotations)"));
      }
    }
    if (ref != "#" && ref.rfind("#/", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "$ref '", ref, "' at ", path, " is not supported (only references within the schema)"));
    }
    auto it = refs_.find(ref);
    if (it == refs_.end()) {
      if (Resolve(ref) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("$ref '", ref, "' at ", path, " does not resolve within the schema"));
      }
      const int32_t rule = g_->AddRule(ref);
      it = refs_.emplace(ref, rule).first;
      pending_.emplace_back(ref, rule);
    }
    return Ref(it->second);
  }

  absl::StatusOr<Expr> CompileAlternatives(const json& s, const std::string& key,
                                           const std::string& path, int depth) {
    const json& list = s.at(key);
    if (!list.is_array() || list.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", key, "' at ", path, " must be a non-empty array of schemas"));
    }
    for (const auto& [k, v] : s.items()) {
      if (k != key && !Annotations().contains(k)) {
        return absl::InvalidArgumentError(absl::StrCat("'", k, "' beside '", key, "' at ", path,
                                                       " is not supported (only annotations)"));
      }
    }
    if (key == "allOf" && list.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'allOf' at ", path, " with more than one schema is not supported"));
    }
    if (key == "oneOf") {
      const SchemaResolver resolve = [this](const std::string& ref) { return Resolve(ref); };
      for (size_t i = 0; i < list.size(); ++i) {
        for (size_t j = i + 1; j < list.size(); ++j) {
          if (!ProvablyDisjoint(list[i], list[j], resolve)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "'oneOf' at ", path, " is not supported: branches ", i, " and ", j,
                " may both match a value (supported when the branches differ in type, in their "
                "enum/const values or in a required property's const; else use anyOf)"));
          }
        }
      }
    }
    std::vector<Expr> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      absl::StatusOr<Expr> e = Compile(list[i], absl::StrCat(path, "/", key, "/", i), depth + 1);
      if (!e.ok()) return e.status();
      alts.push_back(*std::move(e));
    }
    return Alt(std::move(alts));
  }

  absl::StatusOr<Expr> CompileObject(const json& s, const std::string& path, int depth) {
    struct Prop {
      Expr kv;
      bool required;
    };
    std::vector<Prop> props;
    absl::flat_hash_map<std::string, size_t> index;
    if (s.contains("properties")) {
      const json& p = s.at("properties");
      if (!p.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'properties' at ", path, " must be an object"));
      }
      for (const auto& [key, sub] : p.items()) {
        absl::StatusOr<Expr> value =
            Compile(sub, absl::StrCat(path, "/properties/", PointerToken(key)), depth + 1);
        if (!value.ok()) return value.status();
        index.emplace(key, props.size());
        props.push_back(Prop{Seq({Literal(json(key).dump()), Ws(), Literal(":"), Ws(),
                                  *std::move(value)}),
                             false});
      }
    }
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'required' at ", path, " must be an array of strings"));
      }
      for (const json& key : r) {
        if (!key.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("'required' at ", path, " must be an array of strings"));
        }
        const std::string name = key.get<std::string>();
        auto it = index.find(name);
        if (it == index.end()) {
          // Outside `properties`, the value is additionalProperties' to constrain.
          Expr value = AnyValue();
          if (s.contains("additionalProperties")) {
            const json& a = s.at("additionalProperties");
            if (a.is_boolean() && !a.get<bool>()) {
              return absl::InvalidArgumentError(
                  absl::StrCat("'required' at ", path, " names '", name,
                               "', which additionalProperties false forbids: no value satisfies "
                               "the schema"));
            }
            if (a.is_object()) {
              absl::StatusOr<Expr> v =
                  Compile(a, absl::StrCat(path, "/additionalProperties"), depth + 1);
              if (!v.ok()) return v.status();
              value = *std::move(v);
            }
          }
          index.emplace(name, props.size());
          props.push_back(Prop{Seq({Literal(json(name).dump()), Ws(), Literal(":"), Ws(),
                                    std::move(value)}),
                               true});
        } else {
          props[it->second].required = true;
        }
      }
    }
    if (s.contains("additionalProperties")) {
      const json& a = s.at("additionalProperties");
      if (a.is_object() && props.empty()) {
        // A map: any keys, each value of the given schema.
        absl::StatusOr<Expr> value =
            Compile(a, absl::StrCat(path, "/additionalProperties"), depth + 1);
        if (!value.ok()) return value.status();
        const Expr member = Seq({String(0, -1), Ws(), Literal(":"), Ws(), *std::move(value)});
        return Seq({Literal("{"), Ws(), Opt(Seq({member, Star(Seq({Sep(), member}))})), Ws(),
                    Literal("}")});
      }
      if (!a.is_boolean() && !a.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'additionalProperties' at ", path, " must be a boolean or a schema"));
      }
    } else if (!s.contains("properties") && !s.contains("required")) {
      return AnyObject();
    }
    // after[i]: properties i.. once something was written; first[i]: the same when nothing
    // was written yet (no leading comma).
    const size_t n = props.size();
    std::vector<Expr> after(n + 1), first(n + 1);
    for (size_t i = n; i-- > 0;) {
      const Prop& p = props[i];
      if (p.required) {
        after[i] = Seq({Sep(), p.kv, after[i + 1]});
        first[i] = Seq({p.kv, after[i + 1]});
      } else {
        after[i] = Seq({Opt(Seq({Sep(), p.kv})), after[i + 1]});
        first[i] = Alt({Seq({p.kv, after[i + 1]}), first[i + 1]});
      }
    }
    return Seq({Literal("{"), Ws(), std::move(first[0]), Ws(), Literal("}")});
  }

  absl::StatusOr<Expr> CompileArray(const json& s, const std::string& path, int depth) {
    std::vector<Expr> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s.at("prefixItems");
      if (!p.is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'prefixItems' at ", path, " must be an array of schemas"));
      }
      for (size_t i = 0; i < p.size(); ++i) {
        absl::StatusOr<Expr> e =
            Compile(p[i], absl::StrCat(path, "/prefixItems/", i), depth + 1);
        if (!e.ok()) return e.status();
        prefix.push_back(*std::move(e));
      }
    }
    absl::StatusOr<int32_t> min = Count(s, "minItems", path, 0);
    if (!min.ok()) return min.status();
    absl::StatusOr<int32_t> max = Count(s, "maxItems", path, -1);
    if (!max.ok()) return max.status();
    const int32_t p = static_cast<int32_t>(prefix.size());
    bool rest_allowed = true;
    Expr items;
    if (s.contains("items") && s.at("items").is_boolean() && !s.at("items").get<bool>()) {
      rest_allowed = false;
    } else if (s.contains("items")) {
      absl::StatusOr<Expr> e = Compile(s.at("items"), absl::StrCat(path, "/items"), depth + 1);
      if (!e.ok()) return e.status();
      items = *std::move(e);
    } else {
      items = AnyValue();
    }
    int32_t hi = *max;
    if (!rest_allowed) hi = hi < 0 ? p : std::min(hi, p);
    if (hi >= 0 && *min > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("the array at ", path, " can hold no number of items (minItems ", *min,
                       " is above what maxItems/items allow, ", hi, ")"));
    }
    // tail(i): what follows once i items were written.
    std::function<Expr(int32_t)> tail = [&](int32_t i) -> Expr {
      if (hi >= 0 && i >= hi) return Empty();
      if (i >= p) {
        const int32_t need = std::max(0, *min - i);
        return Repeat(Seq({Sep(), items}), need, hi < 0 ? -1 : hi - i);
      }
      Expr step = Seq({Sep(), prefix[i], tail(i + 1)});
      return i < *min ? step : Opt(std::move(step));
    };
    Expr body;
    if (hi == 0) {
      body = Empty();
    } else {
      Expr first_item = Seq({p > 0 ? prefix[0] : items, tail(1)});
      body = *min >= 1 ? std::move(first_item) : Opt(std::move(first_item));
    }
    return Seq({Literal("["), Ws(), std::move(body), Ws(), Literal("]")});
  }

  absl::StatusOr<Expr> StringFormat(const json& s, const std::string& path) const {
    if (!s.at("format").is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("'format' at ", path, " must be a string"));
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'format' with 'minLength'/'maxLength' at ", path, " is not supported"));
    }
    return StringFormatExpr(s.at("format").get<std::string>(), path);
  }

  absl::StatusOr<Expr> CompileType(const json& s, const std::string& type, const std::string& path,
                                   int depth) {
    if (type == "string") {
      if (s.contains("pattern")) {
        if (!s.at("pattern").is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("'pattern' at ", path, " must be a string"));
        }
        if (s.contains("minLength") || s.contains("maxLength")) {
          return absl::InvalidArgumentError(absl::StrCat(
              "'pattern' with 'minLength'/'maxLength' at ", path, " is not supported"));
        }
        // JSON Schema's pattern matches anywhere in the string unless anchored, and the
        // string's characters are written as a JSON string literal writes them.
        absl::StatusOr<Expr> body = RegexToExpr(s.at("pattern").get<std::string>(),
                                                RegexMatch::kSearch, RegexText::kJsonString);
        if (!body.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("'pattern' at ", path, ": ", body.status().message()));
        }
        Expr quoted = Seq({Literal("\""), *std::move(body), Literal("\"")});
        if (!s.contains("format")) return quoted;
        // Both (zod 4 sends its own pattern beside each format): the strings both automata
        // accept, within the compile limits.
        absl::StatusOr<Expr> format = StringFormat(s, path);
        if (!format.ok()) return format.status();
        absl::StatusOr<Expr> both = IntersectExprs(quoted, *format);
        if (!both.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("'pattern' with 'format' at ", path,
                                                         ": ", both.status().message()));
        }
        return both;
      }
      if (s.contains("format")) return StringFormat(s, path);
      absl::StatusOr<int32_t> min = Count(s, "minLength", path, 0);
      if (!min.ok()) return min.status();
      absl::StatusOr<int32_t> max = Count(s, "maxLength", path, -1);
      if (!max.ok()) return max.status();
      if (*max >= 0 && *max < *min) {
        return absl::InvalidArgumentError(
            absl::StrCat("'maxLength' is below 'minLength' at ", path));
      }
      return String(*min, *max);
    }
    if (type == "integer" || type == "number") return CompileNumber(s, type, path);
    if (type == "boolean") return Alt({Literal("true"), Literal("false")});
    if (type == "null") return Literal("null");
    if (type == "object") return CompileObject(s, path, depth);
    if (type == "array") return CompileArray(s, path, depth);
    return absl::InvalidArgumentError(absl::StrCat("unknown type '", type, "' at ", path));
  }

  // The integers every bound admits (Window).
  struct IntegerWindow {
    std::optional<int64_t> lo, hi;
  };

  // ajv-formats' number formats: int32 (an integer within 32 bits: at most 9 digits here),
  // int64 (any integer), float and double (any number). A string format beside a number type
  // constrains only strings; any other format is refused.
  absl::StatusOr<Expr> CompileNumber(const json& s, const std::string& type,
                                     const std::string& path) const {
    const std::string format =
        s.contains("format") && s.at("format").is_string() ? s.at("format").get<std::string>() : "";
    const bool integer = type == "integer" || format == "int32" || format == "int64";
    const int digits = format == "int32" ? std::min(opt_.max_digits, 9) : opt_.max_digits;
    if (!format.empty() && format != "int32" && format != "int64" && format != "float" &&
        format != "double" && !StringFormatExpr(format, path).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported number format '", format,
                                                     "' at ", path,
                                                     " (supported: int32, int64, float, double)"));
    }
    absl::StatusOr<IntegerWindow> window = Window(s, path);
    if (!window.ok()) return window.status();
    if (s.contains("multipleOf")) {
      return Multiples(s.at("multipleOf"), *window, integer, digits, path);
    }
    return Bounded(*window, integer, digits, path);
  }

  // The numbers (integers where `integer`) within the window, in the canonical form.
  absl::StatusOr<Expr> Bounded(const IntegerWindow& w, bool integer, int digits,
                               const std::string& path) const {
    const IntegerWindow* window = &w;
    if (!window->lo.has_value() && !window->hi.has_value()) {
      return integer ? Integer(digits) : Number();
    }
    const std::string where = absl::StrCat("the bounds at ", path);
    absl::StatusOr<Expr> whole = IntegerRange(window->lo, window->hi, digits);
    if (integer || !whole.ok()) {
      if (!whole.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", whole.status().message()));
      }
      return whole;
    }
    // A bounded number: the integers of the window, and the decimals strictly inside it
    // (integer part k, a fraction, no exponent), which keeps every value within the bounds;
    // decimals between a fractional bound and the nearest integer are not written.
    const Expr fraction = Seq({Literal("."), Repeat(Digit(), 1, opt_.max_digits)});
    std::vector<Expr> alts = {*std::move(whole)};
    const int64_t kMax = std::numeric_limits<int64_t>::max() / 4;
    const int64_t a = window->lo.value_or(-kMax), b = window->hi.value_or(kMax);
    if (b - 1 >= std::max<int64_t>(a, 0)) {
      absl::StatusOr<Expr> k = IntegerRange(std::max<int64_t>(a, 0),
                                            window->hi ? std::optional<int64_t>(b - 1)
                                                       : std::nullopt,
                                            digits);
      if (k.ok()) alts.push_back(Seq({*std::move(k), fraction}));
    }
    const int64_t neg_lo = std::max<int64_t>(-std::min<int64_t>(b, 0), 0);
    if (a <= -1 && -a - 1 >= neg_lo) {
      absl::StatusOr<Expr> k =
          IntegerRange(neg_lo, window->lo ? std::optional<int64_t>(-a - 1) : std::nullopt, digits);
      if (k.ok()) alts.push_back(Seq({Literal("-"), *std::move(k), fraction}));
    }
    return Alt(std::move(alts));
  }

  // The integers every bound admits: [lo, hi] from minimum / maximum and exclusiveMinimum /
  // exclusiveMaximum (numbers, as since draft 6, or draft 4's booleans beside minimum/maximum).
  absl::StatusOr<IntegerWindow> Window(const json& s, const std::string& path) const {
    IntegerWindow w;
    auto number = [&](const char* key) -> absl::StatusOr<std::optional<double>> {
      if (!s.contains(key)) return std::optional<double>();
      const json& v = s.at(key);
      if (v.is_boolean()) return std::optional<double>();
      if (!v.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat("'", key, "' at ", path,
                                                       " must be a number"));
      }
      return std::optional<double>(v.get<double>());
    };
    auto flag = [&](const char* key) { return s.contains(key) && s.at(key).is_boolean() &&
                                              s.at(key).get<bool>(); };
    // Beyond +-2^62 the grammar's digit bound decides anyway.
    const double kClamp = 4.0e18;
    auto clamp = [&](double v) { return static_cast<int64_t>(std::clamp(v, -kClamp, kClamp)); };
    for (const char* key : {"minimum", "exclusiveMinimum"}) {
      absl::StatusOr<std::optional<double>> v = number(key);
      if (!v.ok()) return v.status();
      if (!v->has_value()) continue;
      const bool exclusive = std::string_view(key) == "exclusiveMinimum" ||
                             flag("exclusiveMinimum");
      double lo = std::ceil(**v);
      if (exclusive && lo == **v) lo += 1;
      w.lo = w.lo ? std::max(*w.lo, clamp(lo)) : clamp(lo);
    }
    for (const char* key : {"maximum", "exclusiveMaximum"}) {
      absl::StatusOr<std::optional<double>> v = number(key);
      if (!v.ok()) return v.status();
      if (!v->has_value()) continue;
      const bool exclusive = std::string_view(key) == "exclusiveMaximum" ||
                             flag("exclusiveMaximum");
      double hi = std::floor(**v);
      if (exclusive && hi == **v) hi -= 1;
      w.hi = w.hi ? std::min(*w.hi, clamp(hi)) : clamp(hi);
    }
    return w;
  }

  // multipleOf k. Whole and at most kMaxMultipleOf: the integers of the window that k divides
  // (also for "number": its canonical subset is then these integers). A decimal m / 10^s (m up
  // to kMaxMultipleOf, s up to kMaxMultipleOfScale; read exactly from the number's shortest
  // decimal spelling, never as a double): the numbers of the window, written with at most s
  // decimals, that k divides in exact decimal arithmetic (DecimalMultiplesDfa).
  absl::StatusOr<Expr> Multiples(const json& k, const IntegerWindow& window, bool integer,
                                 int digits, const std::string& path) const {
    if (!k.is_number() || !(k.get<double>() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'multipleOf' at ", path, " must be a number greater than 0"));
    }
    const std::string where = absl::StrCat("'multipleOf' at ", path, ": ");
    int64_t m = 0;
    int scale = 0;
    if (!ExactDecimal(k.dump(), &m, &scale) || m > kMaxMultipleOf ||
        scale > kMaxMultipleOfScale) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'multipleOf' at ", path, " is ", k.dump(), ": supported are whole numbers from 1 to ",
          kMaxMultipleOf, " and decimals of at most ", kMaxMultipleOfScale,
          " places whose digits make a number up to ", kMaxMultipleOf, " (0.01, 0.5, 2.5)"));
    }
    if (scale > 0) {
      absl::StatusOr<Expr> base = Bounded(window, integer, digits, path);
      if (!base.ok()) return base.status();
      absl::StatusOr<Expr> both = IntersectExprs(
          *base, Dfa(std::make_shared<const ByteDfa>(DecimalMultiplesDfa(m, scale))));
      if (!both.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, both.status().message()));
      }
      return both;
    }
    const double v = static_cast<double>(m);
    Expr whole = Integer(digits);
    if (window.lo.has_value() || window.hi.has_value()) {
      absl::StatusOr<Expr> range = IntegerRange(window.lo, window.hi, digits);
      if (!range.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, range.status().message()));
      }
      whole = *std::move(range);
    }
    if (v == 1) return whole;
    absl::StatusOr<Expr> both = IntersectExprs(
        whole, Dfa(std::make_shared<const ByteDfa>(MultiplesDfa(static_cast<int64_t>(v)))));
    if (!both.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, both.status().message()));
    }
    return both;
  }

  absl::StatusOr<std::vector<std::string>> Types(const json& s, const std::string& path) const {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat("'type' at ", path, " must be a string or an array of strings"));
          }
          types.push_back(x.get<std::string>());
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("'type' at ", path, " must be a string or an array of strings"));
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("pattern") || s.contains("minimum") || s.contains("maximum") ||
               s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum") ||
               s.contains("multipleOf")) {
      // Without a type, these constrain only strings or numbers and let every other value
      // pass: each type, with the keyword applied where it applies.
      types = {"string", "number", "boolean", "null", "object", "array"};
    }
    if (s.contains("nullable") && s.at("nullable").is_boolean() && s.at("nullable").get<bool>()) {
      types.push_back("null");
    }
    return types;
  }

  absl::StatusOr<Expr> Compile(const json& s, const std::string& path, int depth) {
    if (depth > opt_.max_depth) {
      return absl::InvalidArgumentError(absl::StrCat("the schema nests more than ", opt_.max_depth,
                                                     " levels deep at ", path));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyValue();
      return absl::InvalidArgumentError(absl::StrCat("the schema at ", path,
                                                     " is false: no value satisfies it"));
    }
    if (!s.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the schema at ", path, " must be an object or a boolean"));
    }
    for (const auto& [key, value] : s.items()) {
      if (!Supported().contains(key) && !Annotations().contains(key)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported JSON Schema keyword '", key, "' at ", path));
      }
    }
    if (s.contains("$id") && path != "#") {
      // A nested $id would make "#" inside it mean that subschema, not the document.
      return absl::InvalidArgumentError(
          absl::StrCat("'$id' at ", path, " is not supported (only at the root)"));
    }
    if (s.contains("$ref")) return CompileRef(s, path);
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (s.contains(key)) return CompileAlternatives(s, key, path, depth);
    }
    absl::StatusOr<std::vector<std::string>> types = Types(s, path);
    if (!types.ok()) return types.status();
    if (s.contains("enum") || s.contains("const")) {
      // The listed values are written as they are, so nothing but their type may constrain
      // them further: a sibling such as minLength or required would be ignored.
      const char* listed = s.contains("const") ? "const" : "enum";
      for (const auto& [k, v] : s.items()) {
        if (k == listed || k == "type" || k == "nullable" || Annotations().contains(k)) continue;
        return absl::InvalidArgumentError(
            absl::StrCat("'", k, "' beside '", listed, "' at ", path,
                         " is not supported (only type, nullable and annotations)"));
      }
      std::vector<json> values;
      if (s.contains("const")) {
        values.push_back(s.at("const"));
      } else if (s.at("enum").is_array()) {
        values.assign(s.at("enum").begin(), s.at("enum").end());
      } else {
        return absl::InvalidArgumentError(absl::StrCat("'enum' at ", path, " must be an array"));
      }
      std::vector<Expr> alts;
      for (const json& v : values) {
        bool typed = types->empty();
        for (const std::string& t : *types) typed = typed || ValueHasType(v, t);
        if (typed) alts.push_back(Literal(v.dump()));
      }
      if (alts.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("no value of 'enum'/'const' at ", path, " satisfies the schema's type"));
      }
      return Alt(std::move(alts));
    }
    if (types->empty()) return AnyValue();
    std::vector<Expr> alts;
    for (const std::string& t : *types) {
      absl::StatusOr<Expr> e = CompileType(s, t, path, depth);
      if (!e.ok()) return e.status();
      alts.push_back(*std::move(e));
    }
    return Alt(std::move(alts));
  }

  const json& root_;
  JsonSchemaOptions opt_;
  Grammar* g_;
  absl::flat_hash_map<std::string, int32_t> refs_;
  std::deque<std::pair<std::string, int32_t>> pending_;
  int32_t any_value_ = -1;
};

}  // namespace

absl::StatusOr<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema,
                                            const JsonSchemaOptions& options) {
  Grammar g;
  absl::StatusOr<int32_t> root = AddJsonSchemaRules(schema, options, &g);
  if (!root.ok()) return root.status();
  g.set_root(*root);
  return g;
}

absl::StatusOr<int32_t> AddJsonSchemaRules(const nlohmann::ordered_json& schema,
                                           const JsonSchemaOptions& options, Grammar* grammar) {
  SchemaCompiler compiler(schema, options, grammar);
  return compiler.Run();
}

Grammar AnyJsonObjectGrammar(const JsonSchemaOptions& options) {
  const nlohmann::ordered_json schema = {{"type", "object"}};
  absl::StatusOr<Grammar> g = JsonSchemaToGrammar(schema, options);
  return *std::move(g);
}

}  // namespace banyan::text::grammar
