#include "text/tokenizer/spm_model_reader.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "text/tokenizer/string_hash.h"

namespace banyan::text {
namespace {

// Protobuf wire types (https://protobuf.dev/programming-guides/encoding/).
enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

struct WireField {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t varint = 0;     // kVarint
  uint32_t fixed32 = 0;    // kFixed32
  std::string_view bytes;  // kLengthDelimited
  size_t offset = 0;       // of the tag, from the start of the file
};

// Decodes one message's fields in order. `base` is the message's offset in the file, so errors
// can point at the byte where parsing failed.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base) : data_(data), base_(base) {}

  bool done() const { return pos_ >= data_.size(); }

  absl::Status Next(WireField* field) {
    field->offset = base_ + pos_;
    std::optional<uint64_t> tag = ReadVarint();
    if (!tag) return Error("truncated or malformed field tag");
    field->number = static_cast<uint32_t>(*tag >> 3);
    field->wire_type = static_cast<int>(*tag & 7);
    if (field->number == 0 || (*tag >> 3) > 0x1FFFFFFF) return Error("invalid field number");
    switch (field->wire_type) {
      case kVarint: {
        std::optional<uint64_t> v = ReadVarint();
        if (!v) return Error("truncated varint");
        field->varint = *v;
        return absl::OkStatus();
      }
      case kFixed64:
        if (data_.size() - pos_ < 8) return Error("truncated fixed64");
        pos_ += 8;
        return absl::OkStatus();
      case kFixed32:
        if (data_.size() - pos_ < 4) return Error("truncated fixed32");
        field->fixed32 = 0;
        for (int i = 3; i >= 0; --i) {
          field->fixed32 = (field->fixed32 << 8) | static_cast<uint8_t>(data_[pos_ + i]);
        }
        pos_ += 4;
        return absl::OkStatus();
      case kLengthDelimited: {
        std::optional<uint64_t> length = ReadVarint();
        if (!length) return Error("truncated length");
        if (*length > data_.size() - pos_) {
          return Error(absl::StrCat("field ", field->number, " claims ", *length,
                                    " bytes but only ", data_.size() - pos_, " remain"));
        }
        field->bytes = data_.substr(pos_, *length);
        pos_ += *length;
        return absl::OkStatus();
      }
      default:
        return Error(
            absl::StrCat("unsupported wire type ", field->wire_type, " for field ", field->number));
    }
  }

  // Offset of the current position in the file.
  size_t offset() const { return base_ + pos_; }

 private:
  std::optional<uint64_t> ReadVarint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return std::nullopt;
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return value;
    }
    return std::nullopt;  // more than 10 bytes
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at byte ", base_ + pos_));
  }

  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

// Runs `on_field` for every field of the message `data` that starts at file offset `base`.
absl::Status ForEachField(std::string_view data, size_t base,
                          const std::function<absl::Status(const WireField&)>& on_field) {
  WireReader reader(data, base);
  while (!reader.done()) {
    WireField field;
    if (absl::Status s = reader.Next(&field); !s.ok()) return s;
    if (absl::Status s = on_field(field); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WrongType(const WireField& f, absl::string_view message, int expected) {
  return absl::InvalidArgumentError(absl::StrCat(message, " field ", f.number, " has wire type ",
                                                 f.wire_type, ", expected ", expected, " (at byte ",
                                                 f.offset, ")"));
}

// Offset of `inner` inside `outer`, where `inner` is a view into `outer`.
size_t OffsetIn(std::string_view outer, std::string_view inner) {
  return static_cast<size_t>(inner.data() - outer.data());
}

float FloatFromBits(uint32_t bits) {
  float f;
  static_assert(sizeof(f) == sizeof(bits));
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

absl::Status ParsePiece(std::string_view file, std::string_view msg, SpmVocab* vocab) {
  std::string piece;
  float score = 0.0f;
  int64_t type = static_cast<int64_t>(PieceType::kNormal);
  absl::Status s = ForEachField(msg, OffsetIn(file, msg), [&](const WireField& f) {
    switch (f.number) {
      case 1:
        if (f.wire_type != kLengthDelimited) return WrongType(f, "SentencePiece", kLengthDelimited);
        piece = std::string(f.bytes);
        break;
      case 2:
        if (f.wire_type != kFixed32) return WrongType(f, "SentencePiece", kFixed32);
        score = FloatFromBits(f.fixed32);
        break;
      case 3:
        if (f.wire_type != kVarint) return WrongType(f, "SentencePiece", kVarint);
        type = static_cast<int64_t>(f.varint);
        break;
      default:
        break;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  if (type < static_cast<int>(PieceType::kNormal) || type > static_cast<int>(PieceType::kByte)) {
    return absl::InvalidArgumentError(
        absl::StrCat("piece ", vocab->pieces.size(), " ('", piece, "') has unknown type ", type));
  }
  vocab->pieces.push_back(std::move(piece));
  vocab->scores.push_back(score);
  vocab->types.push_back(static_cast<PieceType>(type));
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(std::string_view file, std::string_view msg, SpmVocab* vocab) {
  int64_t model_type = 1;  // proto default: UNIGRAM
  bool whitespace_as_suffix = false;
  absl::Status s = ForEachField(msg, OffsetIn(file, msg), [&](const WireField& f) {
    const uint32_t n = f.number;
    const bool is_varint_field = n == 3 || n == 24 || n == 35 || (n >= 40 && n <= 43);
    if (is_varint_field && f.wire_type != kVarint) return WrongType(f, "TrainerSpec", kVarint);
    // int32 fields arrive sign-extended to 64 bits (pad_id = -1 takes ten bytes).
    const auto as_int = static_cast<int32_t>(static_cast<int64_t>(f.varint));
    switch (n) {
      case 3:
        model_type = as_int;
        break;
      case 24:
        whitespace_as_suffix = f.varint != 0;
        break;
      case 35:
        vocab->byte_fallback = f.varint != 0;
        break;
      case 40:
        vocab->unk_id = as_int;
        break;
      case 41:
        vocab->bos_id = as_int;
        break;
      case 42:
        vocab->eos_id = as_int;
        break;
      case 43:
        vocab->pad_id = as_int;
        break;
      case 44:
        if (f.wire_type != kLengthDelimited) return WrongType(f, "TrainerSpec", kLengthDelimited);
        vocab->unk_surface = std::string(f.bytes);
        break;
      default:
        break;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  switch (model_type) {
    case 1:
      vocab->model_type = SpmModelType::kUnigram;
      break;
    case 2:
      vocab->model_type = SpmModelType::kBpe;
      break;
    case 3:
    case 4:
      return absl::UnimplementedError(absl::StrCat("model_type ", model_type == 3 ? "WORD" : "CHAR",
                                                   " is not supported (only BPE and "
                                                   "unigram are)"));
    default:
      return absl::InvalidArgumentError(absl::StrCat("unknown model_type ", model_type));
  }
  if (whitespace_as_suffix) {
    return absl::UnimplementedError("treat_whitespace_as_suffix=true is not supported");
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(std::string_view file, std::string_view msg, SpmVocab* vocab) {
  return ForEachField(msg, OffsetIn(file, msg), [&](const WireField& f) {
    const uint32_t n = f.number;
    if ((n == 1 || n == 2) && f.wire_type != kLengthDelimited) {
      return WrongType(f, "NormalizerSpec", kLengthDelimited);
    }
    if (n >= 3 && n <= 5 && f.wire_type != kVarint) return WrongType(f, "NormalizerSpec", kVarint);
    switch (n) {
      case 2:
        vocab->precompiled_charsmap = std::string(f.bytes);
        break;
      case 3:
        vocab->add_dummy_prefix = f.varint != 0;
        break;
      case 4:
        vocab->remove_extra_whitespaces = f.varint != 0;
        break;
      case 5:
        vocab->escape_whitespaces = f.varint != 0;
        break;
      default:
        break;
    }
    return absl::OkStatus();
  });
}

absl::Status ParseModel(std::string_view bytes, SpmVocab* vocab) {
  bool has_trainer_spec = false;
  bool has_normalizer_spec = false;
  absl::Status s = ForEachField(bytes, 0, [&](const WireField& f) -> absl::Status {
    if (f.number >= 1 && f.number <= 3 && f.wire_type != kLengthDelimited) {
      return WrongType(f, "ModelProto", kLengthDelimited);
    }
    switch (f.number) {
      case 1:
        return ParsePiece(bytes, f.bytes, vocab);
      case 2:
        has_trainer_spec = true;
        return ParseTrainerSpec(bytes, f.bytes, vocab);
      case 3:
        has_normalizer_spec = true;
        return ParseNormalizerSpec(bytes, f.bytes, vocab);
      default:
        return absl::OkStatus();
    }
  });
  if (!s.ok()) return s;
  // Real model files always carry both specs after the pieces; their absence means a file cut
  // short at a field boundary, or something that merely parses as protobuf.
  if (vocab->pieces.empty()) return absl::InvalidArgumentError("no pieces");
  if (!has_trainer_spec) return absl::InvalidArgumentError("no trainer_spec (truncated file?)");
  if (!has_normalizer_spec) {
    return absl::InvalidArgumentError("no normalizer_spec (truncated file?)");
  }
  return ValidateSpmVocab(*vocab);
}

}  // namespace

int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (const char c : piece.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

absl::Status ValidateSpmVocab(const SpmVocab& vocab) {
  const size_t n = vocab.pieces.size();
  if (n == 0) return absl::InvalidArgumentError("vocabulary is empty");
  if (vocab.scores.size() != n || vocab.types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary has ", n, " pieces but ",
                                                   vocab.scores.size(), " scores and ",
                                                   vocab.types.size(), " types"));
  }
  if (n > (1u << 30)) return absl::InvalidArgumentError("vocabulary is too large");
  absl::flat_hash_set<std::string_view, StringViewHash, StringViewEq> seen;
  bool has_byte[256] = {};
  int unknown_count = 0;
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = vocab.pieces[id];
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat("piece ", id, " is empty"));
    if (!seen.insert(piece).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("piece '", piece, "' (id ", id, ") is defined twice"));
    }
    if (vocab.types[id] == PieceType::kUnknown) ++unknown_count;
    if (vocab.types[id] == PieceType::kByte) {
      const int b = ParseBytePiece(piece);
      if (b < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte piece ", id, " is spelled '", piece, "', not <0xXX>"));
      }
      has_byte[b] = true;
    }
  }
  const auto in_range = [n](int id) { return id >= 0 && static_cast<size_t>(id) < n; };
  if (!in_range(vocab.unk_id) || vocab.types[vocab.unk_id] != PieceType::kUnknown ||
      unknown_count != 1) {
    return absl::InvalidArgumentError(absl::StrCat("need exactly one unknown piece, at unk_id ",
                                                   vocab.unk_id, "; found ", unknown_count));
  }
  for (const auto& [name, id] :
       {std::pair{"bos_id", vocab.bos_id}, std::pair{"eos_id", vocab.eos_id},
        std::pair{"pad_id", vocab.pad_id}}) {
    if (id != -1 && !in_range(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", id, " is outside the vocabulary of ", n));
    }
  }
  if (vocab.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (!has_byte[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("byte_fallback is set but there is no byte piece for ", b));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SpmVocab> ParseSpmModel(std::string_view bytes, std::string_view source) {
  const auto with_source = [source](const absl::Status& s) {
    // Debian's abseil has its own string_view type, not std::string_view.
    const absl::string_view name(source.data(), source.size());
    return absl::Status(
        s.code(), absl::StrCat("SentencePiece model '", name, "' is not usable: ", s.message()));
  };
  if (bytes.empty()) return with_source(absl::InvalidArgumentError("the file is empty"));
  SpmVocab vocab;
  if (absl::Status s = ParseModel(bytes, &vocab); !s.ok()) return with_source(s);
  return vocab;
}

absl::StatusOr<SpmVocab> ReadSpmModelFile(const std::string& path) {
  // C stdio rather than iostreams: reading a directory makes istreambuf_iterator throw.
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open SentencePiece model '", path, "': ", std::strerror(errno)));
  }
  std::string bytes;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file)) > 0;) bytes.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read SentencePiece model '", path, "': ", std::strerror(error)));
  }
  return ParseSpmModel(bytes, path);
}

}  // namespace banyan::text
