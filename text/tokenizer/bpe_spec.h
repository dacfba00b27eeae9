// BpeSpec: a Hugging Face style BPE tokenizer described as plain data, independent of where it was
// read from (a tokenizer.json document, see hf_json_reader.h, or a GGUF file's "gpt2" metadata).
// BpeTokenizer::Create validates it and builds the indexes.
//
// The pipeline, as the `tokenizers` library runs it:
//   added tokens are cut out of the raw text first (never split or normalized) ->
//   normalizers -> pre-tokenizers (split into words) -> BPE on each word -> post-processor ids.
// Decoding maps ids back through the decoder description.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace banyan::text {

struct BpeAddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;     // skipped when decoding
  bool lstrip = false;      // swallows the whitespace before it
  bool rstrip = false;      // swallows the whitespace after it
  bool normalized = false;  // matched in the normalized text instead of the raw text
};

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip };
  Kind kind = Kind::kNfc;
  std::string pattern;  // kPrepend: the prefix; kReplace: what is replaced
  bool regex = false;   // kReplace: `pattern` is a regular expression
  std::string content;  // kReplace: the replacement
  bool left = false;    // kStrip: which ends lose their whitespace
  bool right = false;
};

// How a Split pre-tokenizer treats the matches (the `tokenizers` SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  // kSplit
  std::string pattern;
  bool regex = false;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // kByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;  // split with the GPT-2 pattern first
  // kMetaspace
  std::string replacement = "\xE2\x96\x81";  // "▁"
  Prepend prepend = Prepend::kAlways;
  bool split = true;
  // kDigits
  bool individual_digits = false;
};

// The decoder chain, reduced to what the supported decoders (ByteLevel, ByteFallback, Replace,
// Metaspace, Fuse, Strip after Fuse) can express.
struct BpeDecoderSpec {
  bool byte_level = false;     // pieces spell bytes through the GPT-2 byte-to-unicode map
  bool byte_fallback = false;  // "<0xXX>" pieces are raw bytes
  std::vector<std::pair<std::string, std::string>> replacements;  // per piece, in order
  bool metaspace = false;  // "▁" -> " ", and the first piece loses a leading space
  std::string metaspace_replacement = "\xE2\x96\x81";
  bool metaspace_strip_first = true;
  // Strip after Fuse: up to `strip_start` leading `strip_content` characters of the whole text.
  std::string strip_content = " ";
  int strip_start = 0;
};

struct BpeSpec {
  // Model: piece -> id (ids need not be dense), merges in rank order (rank 0 first).
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::string unk_token;  // empty: none
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is a piece is taken whole, before any merge

  std::vector<BpeAddedToken> added_tokens;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  BpeDecoderSpec decoder;

  // Post-processor, for a single sequence with add_special_tokens: ids around the text.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  std::string source;  // for messages and the load log, e.g. "tokenizer.json"
};

}  // namespace banyan::text
