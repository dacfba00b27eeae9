// Reading optional fields of a request's JSON object: one answer to "is this field given?".
#pragma once

#include "nlohmann/json.hpp"

namespace banyan::server {

// The field `key` of `obj`, or null when it is absent or JSON null (OpenAI clients send null for
// "not given").
inline const nlohmann::ordered_json* PresentField(const nlohmann::ordered_json& obj,
                                                  const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace banyan::server
