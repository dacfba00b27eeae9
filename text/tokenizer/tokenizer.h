// Tokenizer: the interface the engine, the scheduler and the front ends use to turn text into
// token ids and back. Two implementations:
//  - SpmTokenizer (spm_tokenizer.h): SentencePiece `.model` files and GGUF "llama" vocabularies,
//    reproducing sentencepiece 0.1.97;
//  - BpeTokenizer (bpe_tokenizer.h): Hugging Face `tokenizer.json` BPE models (byte-level BPE as
//    Llama 3 and Qwen use, and BPE with byte fallback as Llama 2 and Mistral use) and GGUF "gpt2"
//    vocabularies, reproducing the `tokenizers` library.
//
// Decoding contract shared by both: Decode(ids) is DecodeStep over the ids followed by
// FinishDecode, and IncrementalDetokenizer runs the same steps as the ids arrive, so streamed text
// concatenates to exactly Decode(ids). A step appends text it is sure of to `out`; raw bytes that
// may still be completed by the next ids (a byte piece, or a byte-level piece ending in the middle
// of a character) wait in DecodeState::pending and are turned into UTF-8 by utf8::AppendByteRun,
// so every emitted string is valid UTF-8 (bytes that form no character become U+FFFD).
// Ids outside the vocabulary are skipped.
//
// A Tokenizer is immutable after construction and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "text/tokenizer/vocab.h"

namespace banyan::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads a tokenizer file: a Hugging Face tokenizer.json when the name ends in ".json" (a
  // tokenizer_config.json beside it supplies bos/eos), else a SentencePiece `.model`. Errors name
  // the file.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // A SentencePiece vocabulary from any source (e.g. GGUF metadata); validated first.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocab(SpmVocab vocab);

  // Token ids of `text`. `add_bos`: add the model's special tokens around the text (for
  // SentencePiece, bos_id(); for tokenizer.json, what its post-processor adds, as transformers'
  // add_special_tokens=True does).
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos) const = 0;

  // The text of `ids`; special (control) tokens give no text.
  std::string Decode(std::span<const int32_t> ids) const;

  virtual int bos_id() const = 0;  // -1 when the model has none
  virtual int eos_id() const = 0;  // -1 when the model has none
  virtual int unk_id() const = 0;  // -1 when the model has none
  // One more than the largest id; every id below it may be decoded.
  virtual int vocab_size() const = 0;
  // The piece as spelled in the vocabulary ("▁" for SentencePiece spaces, "Ġ" for byte-level
  // ones); empty for ids out of range.
  virtual std::string_view Piece(int id) const = 0;
  // The bytes `id` stands for on its own: a byte piece's byte, a byte-level piece's bytes, a
  // special token's spelling. Not necessarily valid UTF-8. Empty for ids out of range.
  virtual std::string TokenBytes(int id) const = 0;
  // What was loaded, for the load log (e.g. "SentencePiece BPE, 32000 pieces").
  virtual std::string Describe() const = 0;
  // The special tokens' spellings and ids (SentencePiece control and unknown pieces;
  // tokenizer.json's special added tokens): text a chat template emits with these spellings
  // stands for the token itself.
  virtual std::vector<std::pair<std::string, int32_t>> SpecialTokens() const = 0;

  // Where decoding of one stream stands.
  struct DecodeState {
    std::string pending;     // raw bytes that do not yet form a character
    bool text_empty = true;  // nothing has been output yet
    // SentencePiece: the dummy-prefix space (see spm_tokenizer.h). tokenizer.json: a leading
    // space the decoder strips has not been decided on yet.
    bool at_start = true;
    bool bos_ws_seen = false;
    int tokens_seen = 0;    // tokenizer.json: tokens that reached the decoder
    int lead_stripped = 0;  // tokenizer.json: leading characters the Strip decoder removed
  };
  // Decodes one more id; see the contract above.
  virtual void DecodeStep(int32_t id, DecodeState* state, std::string* out) const = 0;
  // Ends the stream: pending bytes become text (U+FFFD for each that forms no character).
  static void FinishDecode(DecodeState* state, std::string* out);

 protected:
  Tokenizer() = default;
  // Appends the UTF-8 that state->pending completes; with `complete` every pending byte.
  static void DrainPending(bool complete, DecodeState* state, std::string* out);
};

}  // namespace banyan::text
