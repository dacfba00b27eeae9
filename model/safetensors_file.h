// Reading and writing single safetensors files.
//
// Format: uint64 little-endian N, then N bytes of JSON
//   {"__metadata__": {str: str} (optional), name: {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start (byte 8 + N). Open() checks every
// entry lies inside the file and, for known dtypes, that end - begin matches the shape, so
// ReadTensor never reads out of bounds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/dtype.h"
#include "model/mapped_file.h"
#include "model/model.h"

namespace banyan::model {

struct SafetensorsEntry {
  std::string dtype;            // as written: "F32", "BF16", "I8", ...
  std::vector<int64_t> shape;   // row-major
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file, begin <= end <= size
};

class SafetensorsFile {
 public:
  // Maps and parses `path`. DataLoss for truncation, InvalidArgument for a malformed header.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }

  // Widens tensor `name` to fp32 into *out (shape and data). NotFound for an unknown name,
  // InvalidArgument for a dtype other than F32 / F16 / BF16 (an FP8 tensor is named as such:
  // it needs its scales, so it is read with ReadFp8Codes by the FP8 loader).
  absl::Status ReadTensor(const std::string& name, Tensor* out) const;

  // Copies the bytes of F8_E4M3 tensor `name` into *codes. NotFound for an unknown name,
  // InvalidArgument naming the tensor for any other dtype (F8_E5M2 is refused by name).
  absl::Status ReadFp8Codes(const std::string& name, std::vector<uint8_t>* codes) const;

 private:
  explicit SafetensorsFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}

  std::unique_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// The FP8 dtype names of the format (model/dtype.h has the encodings).
inline constexpr const char* kSafetensorsF8E4M3 = "F8_E4M3";
inline constexpr const char* kSafetensorsF8E5M2 = "F8_E5M2";

// Parses "F32" / "F16" / "BF16"; InvalidArgument for any other name.
absl::StatusOr<WeightDtype> ParseSafetensorsDtype(const std::string& name);

struct SafetensorsItem {
  std::string name;
  const Tensor* tensor;  // fp32, written converted to the file's dtype
  // Optional: applied to *tensor just before its data is written, so a reordered copy lives
  // only while that one tensor is written. Must keep the shape.
  std::function<Tensor(const Tensor&)> transform;
};

// A tensor written byte for byte under a dtype name of the format (FP8 codes, their scales).
struct SafetensorsRawItem {
  std::string name;
  std::string dtype;           // "F8_E4M3", "F32", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel(shape) elements of `dtype`, little-endian
  uint64_t bytes = 0;
};

// Writes `items` in order to `path` as `dtype`, then `raw` as they are, with __metadata__
// {"format": "pt"}. The header is padded with spaces to a multiple of 8 bytes, as the reference
// implementation does.
absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                              WeightDtype dtype, const std::vector<SafetensorsRawItem>& raw = {});

}  // namespace banyan::model
