// Transparent hash and equality over std::string_view for abseil's hash containers.
//
// Debian's abseil (20220623) is built with its own absl::string_view rather than
// std::string_view, so absl's default string hashing does not accept std::string_view keys or
// lookups. Maps declared with these functors take std::string keys and std::string_view
// lookups without copying.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace banyan::text {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

}  // namespace banyan::text
