#include "common/json_limits.h"

#include <filesystem>
#include <fstream>
#include <cstdint>
#include <iterator>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace banyan {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// nlohmann's message without its "[json.exception.parse_error.101] " tag, cut to a bounded
// length and reduced to printable ASCII: it quotes the bytes last read, which may be a long or
// invalid string.
std::string ParserReason(std::string_view what) {
  constexpr size_t kMaxReasonBytes = 200;
  const size_t tag_end = what.find("] ");
  if (what.rfind("[json.", 0) == 0 && tag_end != std::string_view::npos) {
    what.remove_prefix(tag_end + 2);
  }
  std::string out;
  for (const char c : what.substr(0, kMaxReasonBytes)) {
    out.push_back(c >= 0x20 && c < 0x7F ? c : '?');
  }
  if (what.size() > kMaxReasonBytes) out += "...";
  return out;
}

template <typename JsonT>
absl::StatusOr<JsonT> ParseLimited(std::string_view text, std::string_view source,
                                   const JsonLimits& limits, JsonFailure* failure) {
  JsonFailure ignored;
  JsonFailure& why = failure != nullptr ? *failure : ignored;
  why = JsonFailure::kNone;
  if (text.size() > limits.max_bytes) {
    why = JsonFailure::kTooLarge;
    return absl::InvalidArgumentError(absl::StrCat(Sv(source), ": ", text.size(),
                                                   " bytes of JSON, more than the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  size_t offset = 0;
  if (JsonNestsDeeperThan(text, limits.max_depth, &offset)) {
    why = JsonFailure::kTooDeep;
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(source), ": nests arrays/objects more than ", limits.max_depth,
        " levels deep (at byte ", offset, "); the limit is ", limits.max_depth));
  }
  // nlohmann's exceptions stay inside this function.
  try {
    return JsonT::parse(text.begin(), text.end());
  } catch (const typename JsonT::exception& e) {
    why = JsonFailure::kSyntax;
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(source), ": not valid JSON: ", ParserReason(e.what())));
  }
}

}  // namespace

bool JsonNestsDeeperThan(std::string_view text, int max_depth, size_t* offset) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          if (offset != nullptr) *offset = i;
          return true;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source,
                                         const JsonLimits& limits, JsonFailure* failure) {
  return ParseLimited<nlohmann::json>(text, source, limits, failure);
}

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text,
                                                        std::string_view source,
                                                        const JsonLimits& limits,
                                                        JsonFailure* failure) {
  return ParseLimited<nlohmann::ordered_json>(text, source, limits, failure);
}

absl::StatusOr<std::string> ReadJsonText(const std::string& path, const JsonLimits& limits) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return absl::NotFoundError(absl::StrCat(path, ": not found"));
  if (!fs::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (a FIFO, device or socket would block or never end)"));
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable: ", ec.message()));
  if (size > limits.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", size,
                                                   " bytes of JSON, more than the limit of ",
                                                   limits.max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return text;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, const JsonLimits& limits) {
  absl::StatusOr<std::string> text = ReadJsonText(path, limits);
  if (!text.ok()) return text.status();
  return ParseJson(*text, path, limits);
}

}  // namespace banyan
