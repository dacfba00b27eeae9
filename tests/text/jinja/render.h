// The Jinja tests' render helper: a template rendered with a context, or the error.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "text/jinja/template.h"

namespace banyan::text::jinja {

// Renders `src` with `ctx`; "PARSE ERROR: ..." or "ERROR: ..." with the message when parsing or
// rendering fails.
inline std::string R(const std::string& src,
                     const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                     RenderOptions opt = {}) {
  absl::StatusOr<Template> t = Template::Parse(src);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(ctx, opt);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

}  // namespace banyan::text::jinja
