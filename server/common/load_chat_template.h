// Which Jinja chat template banyand renders prompts with, read once at start-up.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/model_bundle.h"
#include "server/common/server_context.h"
#include "text/chat_template.h"

namespace banyan::server {

// The Jinja template prompts are rendered with: options.chat_template_file when set, else the
// model's own unless options names a built-in; null when none. BOS / EOS texts are the model's
// (its tokenizer's pieces where its config names none). A template that does not parse is an
// error naming its file and line (banyand stops).
absl::StatusOr<std::shared_ptr<const text::JinjaChat>> LoadJinjaChat(const ServerOptions& options,
                                                               const model::ModelBundle& bundle);

}  // namespace banyan::server
