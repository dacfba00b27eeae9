#include "text/grammar/json_schema_disjoint.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace banyan::text::grammar {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxRefs = 16;  // $ref hops followed before giving up (then: not disjoint)

enum Kind : uint32_t {
  kNull = 1, kBoolean = 2, kInteger = 4, kFraction = 8, kString = 16, kArray = 32, kObject = 64,
  kAny = 127,
};

// The schema after following $ref (siblings of $ref are refused by the compiler), or nullptr.
const ojson* Deref(const ojson& s, const SchemaResolver& resolve) {
  const ojson* at = &s;
  for (int i = 0; i < kMaxRefs; ++i) {
    if (!at->is_object() || !at->contains("$ref") || !at->at("$ref").is_string()) return at;
    at = resolve(at->at("$ref").get<std::string>());
    if (at == nullptr) return nullptr;
  }
  return nullptr;
}

uint32_t KindOfValue(const ojson& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBoolean;
  if (v.is_number_integer()) return kInteger;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d) ? kInteger : kFraction;
  }
  if (v.is_string()) return kString;
  if (v.is_array()) return kArray;
  return kObject;
}

uint32_t KindOfType(const std::string& t) {
  if (t == "null") return kNull;
  if (t == "boolean") return kBoolean;
  if (t == "integer") return kInteger;
  if (t == "number") return kInteger | kFraction;
  if (t == "string") return kString;
  if (t == "array") return kArray;
  if (t == "object") return kObject;
  return kAny;  // unknown: the compiler refuses it anyway
}

// Values of enum/const, compared as unordered JSON (ordered_json's == would see {"a":1,"b":2}
// and {"b":2,"a":1} as different and call overlapping lists disjoint).
std::optional<std::vector<nlohmann::json>> Values(const ojson& s) {
  if (!s.is_object()) return std::nullopt;
  std::vector<nlohmann::json> out;
  if (s.contains("const")) {
    out.push_back(nlohmann::json::parse(s.at("const").dump()));
    return out;
  }
  if (s.contains("enum") && s.at("enum").is_array()) {
    for (const ojson& v : s.at("enum")) out.push_back(nlohmann::json::parse(v.dump()));
    return out;
  }
  return std::nullopt;
}

uint32_t Kinds(const ojson& schema, const SchemaResolver& resolve, int depth) {
  const ojson* s = Deref(schema, resolve);
  if (s == nullptr || depth > kMaxRefs) return kAny;
  if (s->is_boolean()) return s->get<bool>() ? static_cast<uint32_t>(kAny) : 0u;
  if (!s->is_object()) return kAny;
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s->contains(key) && s->at(key).is_array()) {
      uint32_t out = 0;
      for (const ojson& branch : s->at(key)) out |= Kinds(branch, resolve, depth + 1);
      return out;
    }
  }
  if (s->contains("allOf") && s->at("allOf").is_array()) {
    uint32_t out = kAny;
    for (const ojson& branch : s->at("allOf")) out &= Kinds(branch, resolve, depth + 1);
    return out;
  }
  uint32_t out = kAny;
  if (s->contains("type")) {
    const ojson& t = s->at("type");
    uint32_t typed = 0;
    if (t.is_string()) typed = KindOfType(t.get<std::string>());
    if (t.is_array()) {
      for (const ojson& x : t) typed |= x.is_string() ? KindOfType(x.get<std::string>()) : kAny;
    }
    if (s->contains("nullable") && s->at("nullable") == true) typed |= kNull;
    out &= typed;
  }
  if (const auto values = Values(*s); values.has_value()) {
    uint32_t listed = 0;
    for (const nlohmann::json& v : *values) listed |= KindOfValue(ojson::parse(v.dump()));
    out &= listed;
  }
  return out;
}

bool ValuesDisjoint(const ojson& a, const ojson& b) {
  const auto va = Values(a);
  const auto vb = Values(b);
  if (!va.has_value() || !vb.has_value()) return false;
  for (const nlohmann::json& x : *va) {
    for (const nlohmann::json& y : *vb) {
      if (x == y) return false;
    }
  }
  return true;
}

bool Requires(const ojson& s, const std::string& key) {
  if (!s.contains("required") || !s.at("required").is_array()) return false;
  for (const ojson& r : s.at("required")) {
    if (r == key) return true;
  }
  return false;
}

// Rule 3: a property both objects require, with value lists that share nothing.
bool DiscriminatedObjects(const ojson& a, const ojson& b, const SchemaResolver& resolve) {
  if (!a.contains("properties") || !b.contains("properties")) return false;
  const ojson& pa = a.at("properties");
  const ojson& pb = b.at("properties");
  if (!pa.is_object() || !pb.is_object()) return false;
  for (const auto& [key, sa] : pa.items()) {
    if (!pb.contains(key) || !Requires(a, key) || !Requires(b, key)) continue;
    const ojson* da = Deref(sa, resolve);
    const ojson* db = Deref(pb.at(key), resolve);
    if (da != nullptr && db != nullptr && ValuesDisjoint(*da, *db)) return true;
  }
  return false;
}

}  // namespace

bool ProvablyDisjoint(const ojson& a, const ojson& b, const SchemaResolver& resolve) {
  const uint32_t ka = Kinds(a, resolve, 0);
  const uint32_t kb = Kinds(b, resolve, 0);
  if ((ka & kb) == 0) return true;
  const ojson* da = Deref(a, resolve);
  const ojson* db = Deref(b, resolve);
  if (da == nullptr || db == nullptr || !da->is_object() || !db->is_object()) return false;
  if (ValuesDisjoint(*da, *db)) return true;
  return ka == kObject && kb == kObject && DiscriminatedObjects(*da, *db, resolve);
}

}  // namespace banyan::text::grammar
