// The only file that includes sentencepiece_processor.h. It must include no abseil header (see
// spm_oracle.h).
#include "tests/text/tokenizer/spm_oracle.h"

#include <sentencepiece_processor.h>

#include <utility>

namespace banyan::text::testing {

struct SpmOracle::Impl {
  sentencepiece::SentencePieceProcessor processor;
  sentencepiece::SentencePieceProcessor processor_with_bos;
};

namespace {

bool Finish(sentencepiece::SentencePieceProcessor& with_bos,
            const sentencepiece::util::Status& loaded,
            const sentencepiece::util::Status& loaded_with_bos, std::string* error) {
  if (!loaded.ok()) {
    *error = loaded.ToString();
    return false;
  }
  if (!loaded_with_bos.ok()) {
    *error = loaded_with_bos.ToString();
    return false;
  }
  if (const auto s = with_bos.SetEncodeExtraOptions("bos"); !s.ok()) {
    *error = s.ToString();
    return false;
  }
  return true;
}

}  // namespace

SpmOracle::SpmOracle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpmOracle::~SpmOracle() = default;

std::unique_ptr<SpmOracle> SpmOracle::LoadFile(const std::string& path, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto a = impl->processor.Load(path);
  const auto b = impl->processor_with_bos.Load(path);
  if (!Finish(impl->processor_with_bos, a, b, error)) return nullptr;
  return std::unique_ptr<SpmOracle>(new SpmOracle(std::move(impl)));
}

std::unique_ptr<SpmOracle> SpmOracle::LoadBytes(const std::string& model, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const auto a = impl->processor.LoadFromSerializedProto(model);
  const auto b = impl->processor_with_bos.LoadFromSerializedProto(model);
  if (!Finish(impl->processor_with_bos, a, b, error)) return nullptr;
  return std::unique_ptr<SpmOracle>(new SpmOracle(std::move(impl)));
}

std::vector<int> SpmOracle::Encode(const std::string& text, bool add_bos, bool* ok) const {
  std::vector<int> ids;
  const auto& p = add_bos ? impl_->processor_with_bos : impl_->processor;
  *ok = p.Encode(text, &ids).ok();
  return ids;
}

std::vector<std::string> SpmOracle::EncodePieces(const std::string& text) const {
  std::vector<std::string> pieces;
  if (!impl_->processor.Encode(text, &pieces).ok()) pieces.clear();
  return pieces;
}

std::string SpmOracle::Decode(const std::vector<int>& ids, bool* ok) const {
  std::string text;
  *ok = impl_->processor.Decode(ids, &text).ok();
  return text;
}

int SpmOracle::bos_id() const { return impl_->processor.bos_id(); }
int SpmOracle::eos_id() const { return impl_->processor.eos_id(); }
int SpmOracle::unk_id() const { return impl_->processor.unk_id(); }
int SpmOracle::piece_size() const { return impl_->processor.GetPieceSize(); }

}  // namespace banyan::text::testing
