// Read-only access to a whole model file, and a bounds-checked little-endian cursor over it.
//
// Every read is checked against the end of the mapping; running off the end returns
// absl::DataLossError naming the file, the offset and the field being read, so a truncated or
// corrupt file never reads out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace banyan::model {

// A file mapped read-only into memory (mmap). Not copyable; unmaps on destruction.
class MappedFile {
 public:
  // NotFound for a missing file, InvalidArgument for a directory, Internal for mmap failures.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;  // nullptr when size_ == 0
  size_t size_;          // bytes
};

// Sequential reader over [data, data + size). `source` names the file in error messages.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string source)
      : data_(data), size_(size), source_(std::move(source)) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& source() const { return source_; }

  // DataLoss unless `n` more bytes exist; `what` names the field for the message.
  absl::Status Require(size_t n, absl::string_view what) const {
    if (n <= remaining()) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat(source_, ": truncated at byte ", pos_, " reading ",
                                            what, " (need ", n, " bytes, ", remaining(), " left)"));
  }

  absl::Status Skip(size_t n, absl::string_view what) {
    if (absl::Status s = Require(n, what); !s.ok()) return s;
    pos_ += n;
    return absl::OkStatus();
  }

  absl::Status Seek(size_t offset, absl::string_view what) {
    if (offset > size_) {
      return absl::DataLossError(absl::StrCat(source_, ": offset ", offset, " of ", what,
                                              " is past the end (", size_, " bytes)"));
    }
    pos_ = offset;
    return absl::OkStatus();
  }

  // A trivially copyable value, little-endian.
  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (absl::Status s = Require(sizeof(T), what); !s.ok()) return s;
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A view of the next n bytes (valid while the underlying buffer lives).
  absl::StatusOr<absl::string_view> Bytes(size_t n, absl::string_view what) {
    if (absl::Status s = Require(n, what); !s.ok()) return s;
    absl::string_view v(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return v;
  }

  const uint8_t* cursor() const { return data_ + pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string source_;
};

}  // namespace banyan::model
