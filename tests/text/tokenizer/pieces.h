// The tokenizer tests' helper: the pieces a text encodes to (no BOS).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace banyan::text {

inline std::vector<std::string> Pieces(const Tokenizer& t, std::string_view text) {
  std::vector<std::string> out;
  for (const int32_t id : t.Encode(text, false)) out.emplace_back(t.Piece(id));
  return out;
}

}  // namespace banyan::text
