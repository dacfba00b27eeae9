// Statuses that name the request field at fault: an InvalidArgument whose message a user can act
// on, with the field's name ("param" in OpenAI's error JSON) and optionally a machine-readable
// code ("context_length_exceeded") attached as payloads and read back with StatusParam /
// StatusCode. Whatever checks a request (the server's validation, chat templates, grammars) makes
// them; the HTTP front end turns them into {"error":{"message","type","param","code"}}.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace banyan {

// InvalidArgument with `param` (and `code` when not empty) attached as payloads.
absl::Status InvalidParam(std::string_view param, std::string_view message,
                          std::string_view code = "");
// Attaches param / code to any status (no-op on OK).
void SetStatusParam(absl::Status* status, std::string_view param);
void SetStatusCode(absl::Status* status, std::string_view code);
// The field / code a status names; "" when none.
std::string StatusParam(const absl::Status& status);
std::string StatusCode(const absl::Status& status);

}  // namespace banyan
