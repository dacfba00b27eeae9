// Helpers shared by the libFuzzer harnesses (tests/fuzz/*_fuzzer.cc).
//
// Loaders that take a path read each fuzz input from an anonymous in-memory file (memfd): no
// disk traffic, and nothing is left behind when a run is killed. FUZZ_CHECK aborts with a
// message, so a broken property is reported by libFuzzer like a crash, with its input saved.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                      \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

namespace banyan::fuzz {

// An anonymous file, reachable by path as /proc/self/fd/N, whose contents each input replaces.
// One per harness (a function-local static): the fd stays open for the process's life.
class MemFile {
 public:
  MemFile() {
    fd_ = memfd_create("banyan-fuzz", MFD_CLOEXEC);
    FUZZ_CHECK(fd_ >= 0);
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }

  // Makes the file hold exactly data[0, size).
  void Assign(const uint8_t* data, size_t size) {
    FUZZ_CHECK(ftruncate(fd_, 0) == 0);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      FUZZ_CHECK(n > 0);
      done += static_cast<size_t>(n);
    }
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// `s` with bytes outside printable ASCII as \xNN, for failure messages.
inline std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

// The bundled tokenizer, models/stories260K/tok512.model, under the source tree the harness was
// built from (BANYAN_SOURCE_DIR) or under $BANYAN_SOURCE_DIR when set.
inline std::string BundledTokenizerPath() {
  const char* env = std::getenv("BANYAN_SOURCE_DIR");
  return std::string(env != nullptr ? env : BANYAN_SOURCE_DIR) +
         "/models/stories260K/tok512.model";
}

}  // namespace banyan::fuzz
