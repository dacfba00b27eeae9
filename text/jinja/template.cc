#include "text/jinja/template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace banyan::text::jinja {

struct Template::Program {
  Body body;
};

namespace {

absl::Status ToStatus(const Error& e) {
  if (e.line() > 0) return absl::InvalidArgumentError(absl::StrCat("line ", e.line(), ": ", e.what()));
  return absl::InvalidArgumentError(e.what());
}

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  if (const size_t bad = Utf8Invalid(source); bad != std::string_view::npos) {
    const auto line = 1 + std::count(source.begin(), source.begin() + bad, '\n');
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ": the template is not valid UTF-8 (byte ", bad, ")"));
  }
  try {
    auto p = std::make_shared<Program>();
    p->body = jinja::Parse(Lex(source));
    return Template(std::move(p));
  } catch (const Error& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("template error: ", e.what()));
  }
}

absl::StatusOr<std::string> Template::Render(const nlohmann::json& context,
                                             const RenderOptions& options) const {
  return RenderAny(context, options);
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context,
                                             const RenderOptions& options) const {
  return RenderAny(context, options);
}

template <typename J>
absl::StatusOr<std::string> Template::RenderAny(const J& context,
                                                const RenderOptions& options) const {
  if (!context.is_object()) return absl::InvalidArgumentError("the context must be a JSON object");
  try {
    Dict globals;
    AddGlobals(&globals, options.now_unix_s);
    for (const auto& [k, v] : context.items()) globals.Set(k, Value::FromJson(v));
    Interpreter in(options.limits);
    return in.Run(program_->body, std::move(globals));
  } catch (const Error& e) {
    return ToStatus(e);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("the template ran out of memory");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("template error: ", e.what()));
  }
}

}  // namespace banyan::text::jinja
