// SpmOracle: libsentencepiece behind a plain interface (std types only).
//
// sentencepiece_processor.h defines its own `absl::string_view`, which clashes with the system
// abseil that banyan's headers include, so only spm_oracle.cc sees sentencepiece and it includes
// no abseil header. Test code talks to the oracle through this header alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace banyan::text::testing {

class SpmOracle {
 public:
  // Loads a `.model` file, or a serialized ModelProto; on failure returns null and sets *error.
  static std::unique_ptr<SpmOracle> LoadFile(const std::string& path, std::string* error);
  static std::unique_ptr<SpmOracle> LoadBytes(const std::string& model, std::string* error);
  ~SpmOracle();

  // Ids of `text` (with BOS first when `add_bos`); *ok is false when sentencepiece fails.
  std::vector<int> Encode(const std::string& text, bool add_bos, bool* ok) const;
  // Pieces of `text` as sentencepiece spells them (for failure messages).
  std::vector<std::string> EncodePieces(const std::string& text) const;
  std::string Decode(const std::vector<int>& ids, bool* ok) const;
  int bos_id() const;
  int eos_id() const;
  int unk_id() const;
  int piece_size() const;

 private:
  struct Impl;
  explicit SpmOracle(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace banyan::text::testing
