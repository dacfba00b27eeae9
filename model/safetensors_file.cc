#include "model/safetensors_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/json_limits.h"
#include "nlohmann/json.hpp"

namespace banyan::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the reference reader's limit
constexpr uint64_t kMaxNumel = uint64_t{1} << 48;

// Element size of every dtype the format defines; 0 for unknown names.
size_t KnownDtypeSize(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

absl::StatusOr<WeightDtype> ParseSafetensorsDtype(const std::string& name) {
  if (name == "F32") return WeightDtype::kF32;
  if (name == "F16") return WeightDtype::kF16;
  if (name == "BF16") return WeightDtype::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", name));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<SafetensorsFile> st(new SafetensorsFile(*std::move(mapped)));
  const MappedFile& f = *st->file_;
  ByteReader r(f.data(), f.size(), path);
  absl::StatusOr<uint64_t> n = r.Read<uint64_t>("safetensors header length");
  if (!n.ok()) return n.status();
  if (*n > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors header length ", *n,
                                                   " exceeds ", kMaxHeaderBytes, " bytes"));
  }
  absl::StatusOr<absl::string_view> text = r.Bytes(*n, "safetensors JSON header");
  if (!text.ok()) return text.status();
  const uint64_t data_start = r.offset();
  const uint64_t data_size = f.size() - data_start;

  absl::StatusOr<nlohmann::json> parsed =
      ParseJson(std::string_view(text->data(), text->size()),
                absl::StrCat(path, ": safetensors header"),
                JsonLimits{.max_depth = kMaxJsonDepth, .max_bytes = kMaxHeaderBytes});
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& header = *parsed;
  if (!header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": safetensors header is not a JSON object"));
  }
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    // An init-capture, not [&]: clang before 16 can not capture a structured binding.
    auto bad = [&path, &name = name](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": safetensors entry ", name, ": ", why));
    };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return bad("needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    SafetensorsEntry entry;
    entry.dtype = e["dtype"].get<std::string>();
    uint64_t numel = 1;
    for (const nlohmann::json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxNumel ||
          (d.get<uint64_t>() > 0 && numel > kMaxNumel / d.get<uint64_t>())) {
        return bad("shape must hold non-negative integers with a sane product");
      }
      numel *= d.get<uint64_t>();
      entry.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const nlohmann::json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad("data_offsets must be non-negative integers");
    }
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", name, " data_offsets [", begin,
                                              ", ", end, "] lie outside the data section of ",
                                              data_size, " bytes (file truncated?)"));
    }
    if (const size_t es = KnownDtypeSize(entry.dtype); es != 0 && end - begin != numel * es) {
      return bad(absl::StrCat("data_offsets span ", end - begin, " bytes but dtype ", entry.dtype,
                              " x shape needs ", numel * es));
    }
    entry.begin = data_start + begin;
    entry.end = data_start + end;
    st->entries_.emplace(name, std::move(entry));
  }
  return st;
}

absl::Status SafetensorsFile::ReadTensor(const std::string& name, Tensor* out) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(path(), ": missing tensor ", name));
  }
  const SafetensorsEntry& e = it->second;
  absl::StatusOr<WeightDtype> dtype = ParseSafetensorsDtype(e.dtype);
  if (e.dtype == kSafetensorsF8E4M3 || e.dtype == kSafetensorsF8E5M2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path(), ": tensor ", name, " is FP8 (", e.dtype,
        "), which banyan reads only as a quantized projection weight with its scale, as the "
        "config.json's quantization_config describes"));
  }
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": unsupported dtype ", e.dtype,
                                                   " for tensor ", name,
                                                   " (supported: F32, F16, BF16)"));
  }
  out->shape = e.shape;
  const size_t numel = static_cast<size_t>(out->numel());
  // Open() guaranteed end - begin == numel * size for known dtypes.
  out->data.resize(numel);
  ConvertToFloat(*dtype, file_->data() + e.begin, numel, out->data.data());
  return absl::OkStatus();
}

absl::Status SafetensorsFile::ReadFp8Codes(const std::string& name,
                                           std::vector<uint8_t>* codes) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(path(), ": missing tensor ", name));
  }
  const SafetensorsEntry& e = it->second;
  if (e.dtype == kSafetensorsF8E5M2) {
    return absl::InvalidArgumentError(
        absl::StrCat(path(), ": tensor ", name,
                     " is F8_E5M2; FP8 weights must be F8_E4M3 (E5M2 weights are not supported)"));
  }
  if (e.dtype != kSafetensorsF8E4M3) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": tensor ", name, " is ", e.dtype,
                                                   "; expected F8_E4M3"));
  }
  // Open() guaranteed end - begin == numel bytes for F8_E4M3.
  codes->assign(file_->data() + e.begin, file_->data() + e.end);
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsItem>& items,
                              WeightDtype dtype, const std::vector<SafetensorsRawItem>& raw) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const SafetensorsItem& item : items) {
    const uint64_t bytes = static_cast<uint64_t>(item.tensor->numel()) * DtypeSize(dtype);
    if (item.tensor->data.size() != static_cast<size_t>(item.tensor->numel())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", item.name, " has ",
                                                     item.tensor->data.size(),
                                                     " values for its shape"));
    }
    header[item.name] = {{"dtype", std::string(DtypeName(dtype))},
                         {"shape", item.tensor->shape},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  for (const SafetensorsRawItem& item : raw) {
    const size_t es = KnownDtypeSize(item.dtype);
    uint64_t numel = 1;
    for (int64_t d : item.shape) numel *= static_cast<uint64_t>(d);
    if (es == 0 || numel * es != item.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", item.name, " has ",
                                                     item.bytes, " bytes for ", item.dtype,
                                                     " of ", numel, " elements"));
    }
    header[item.name] = {{"dtype", item.dtype},
                         {"shape", item.shape},
                         {"data_offsets", {offset, offset + item.bytes}}};
    offset += item.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
  }
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof(n));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  constexpr size_t kChunk = size_t{1} << 20;  // elements converted per write
  std::vector<unsigned char> buf(kChunk * DtypeSize(dtype));
  for (const SafetensorsItem& item : items) {
    Tensor transformed;
    if (item.transform) {
      transformed = item.transform(*item.tensor);
      if (transformed.shape != item.tensor->shape ||
          transformed.data.size() != item.tensor->data.size()) {
        return absl::InternalError(
            absl::StrCat(path, ": transform changed the shape of ", item.name));
      }
    }
    const std::vector<float>& d = item.transform ? transformed.data : item.tensor->data;
    for (size_t i = 0; i < d.size() && out; i += kChunk) {
      const size_t m = std::min(kChunk, d.size() - i);
      ConvertFromFloat(dtype, d.data() + i, m, buf.data());
      out.write(reinterpret_cast<const char*>(buf.data()),
                static_cast<std::streamsize>(m * DtypeSize(dtype)));
    }
  }
  for (const SafetensorsRawItem& item : raw) {
    out.write(static_cast<const char*>(item.data), static_cast<std::streamsize>(item.bytes));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace banyan::model
