#include "server/common/load_chat_template.h"

#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"

namespace banyan::server {

absl::StatusOr<std::shared_ptr<const text::JinjaChat>> LoadJinjaChat(const ServerOptions& options,
                                                               const model::ModelBundle& bundle) {
  std::string text, source;
  if (!options.chat_template_file.empty()) {
    source = options.chat_template_file;
    std::ifstream in(source, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--chat-template: cannot read ", source));
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--chat-template: ", source, " is empty"));
    }
  } else if (options.chat_template == text::ChatTemplate::kModel && !bundle.chat_template.empty()) {
    text = bundle.chat_template;
    source = bundle.chat_template_source;
  } else {
    return nullptr;
  }
  const text::Tokenizer& tok = *bundle.tokenizer;
  std::string bos = bundle.bos_token, eos = bundle.eos_token;
  if (bos.empty() && tok.bos_id() >= 0) bos = std::string(tok.Piece(tok.bos_id()));
  if (eos.empty() && tok.eos_id() >= 0) eos = std::string(tok.Piece(tok.eos_id()));
  return text::MakeJinjaChat(text, source, bos, eos, tok);
}

}  // namespace banyan::server
