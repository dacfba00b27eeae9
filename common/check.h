// BANYAN_CHECK: aborts with a message when an invariant is broken.
//
// Debian 12's abseil (20220623) predates absl/log, so ABSL_CHECK is unavailable; this is the
// project's stand-in. Use it for broken invariants only; expected failures return absl::Status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace banyan::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace banyan::internal

#define BANYAN_CHECK(cond) \
  if (cond) {              \
  } else                   \
    ::banyan::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()
